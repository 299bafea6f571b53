//! A left operand written in bf16 by the kernel that produces it: the LM
//! head's dlogits, which the fused cross-entropy rounds as it writes them,
//! instead of writing f32 that two packers then read back and convert
//! (`[R, V]` f32 is 103 MB a chunk at R = 512, V = 50257).

use super::{
    gemm_packed, has_avx512bf16, Bf16Weight, Packed, PackedA, PackedB, Src, WeightLayout, MR,
};

/// `M×K` bf16 rows laid out as the bf16 gemm's row-strip operand
/// (`[ceil(M/MR)·MR][kp]`, kp = K rounded up to even), padding zero.
pub struct Bf16Rows {
    a: PackedA,
    k: usize,
}

impl Bf16Rows {
    /// Rows for `m × k` values from this thread's buffer pool: the padding
    /// (the odd-K column and the rows past `m`) is zeroed, the rows' `k`
    /// values are left for the caller to write, every one of them.
    pub fn new(m: usize, k: usize) -> Bf16Rows {
        let kp = k + (k & 1);
        let mut data = super::pooled(m.div_ceil(MR) * MR * kp);
        if kp > k {
            for r in 0..m {
                data[r * kp + k] = 0;
            }
        }
        data[m * kp..].fill(0);
        Bf16Rows {
            a: PackedA {
                m,
                kp,
                pair_major: false,
                data,
            },
            k,
        }
    }

    /// Distance between rows, in bf16s.
    pub fn stride(&self) -> usize {
        self.a.kp
    }

    /// The rows, row `i`'s values at `[i·stride, i·stride + k)`.
    pub fn data_mut(&mut self) -> &mut [u16] {
        let (m, kp) = (self.a.m, self.a.kp);
        &mut self.a.data[..m * kp]
    }

    /// `(M, K)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.a.m, self.k)
    }

    /// The transpose `[K, M]` as a pair-major strip operand (K's rows in
    /// strips of MR, M in pairs): a weight gradient's `dYᵀ`.
    fn transposed(&self) -> PackedA {
        let (m, k, kp) = (self.a.m, self.k, self.a.kp);
        let tp = m + (m & 1);
        let mut data = super::pooled(k.div_ceil(MR) * MR * tp);
        let src = &self.a.data;
        let simd = has_avx512bf16();
        use rayon::prelude::*;
        data.par_chunks_mut(MR * tp)
            .enumerate()
            .for_each(|(s, strip)| {
                let rows = MR.min(k - s * MR);
                #[cfg(target_arch = "x86_64")]
                if simd {
                    // SAFETY: the feature was detected; the source holds m rows of kp.
                    unsafe { pairs_from_rows_avx512(strip, src, kp, s * MR, rows, m) };
                    return;
                }
                let _ = simd;
                pairs_from_rows(strip, src, kp, s * MR, rows, m);
            });
        PackedA {
            m: k,
            kp: tp,
            pair_major: true,
            data,
        }
    }
}

/// A pair-major strip of columns `c0..c0+cols` of bf16 rows (`n` rows of
/// stride `ld`): pair q holds rows 2q and 2q+1 (zero past `n`), element by
/// element (the twin of the vector path).
fn pairs_from_rows(strip: &mut [u16], src: &[u16], ld: usize, c0: usize, cols: usize, n: usize) {
    strip.fill(0);
    for i in 0..n {
        for c in 0..cols {
            strip[(i / 2) * MR * 2 + c * 2 + (i & 1)] = src[i * ld + c0 + c];
        }
    }
}

/// [`pairs_from_rows`] with two masked loads and one interleave per pair.
///
/// # Safety
/// AVX-512 BF16 must be present; `src` must hold `n` rows of `ld`, with
/// `c0 + cols <= ld` and `cols <= MR`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
unsafe fn pairs_from_rows_avx512(
    strip: &mut [u16],
    src: &[u16],
    ld: usize,
    c0: usize,
    cols: usize,
    n: usize,
) {
    use std::arch::x86_64::*;
    debug_assert!(cols <= MR && c0 + cols <= ld && strip.len() >= n.div_ceil(2) * MR * 2);
    // Lanes 0..16 hold row 2q, 16..32 row 2q + 1: interleaved as pairs.
    let idx = _mm512_loadu_si512(super::PAIR_LANES.as_ptr() as *const _);
    let mask = ((1u32 << cols) - 1) as u16;
    let base = src.as_ptr().add(c0);
    for q in 0..n.div_ceil(2) {
        let lo = _mm256_maskz_loadu_epi16(mask, base.add(2 * q * ld) as *const i16);
        let hi = if 2 * q + 1 < n {
            _mm256_maskz_loadu_epi16(mask, base.add((2 * q + 1) * ld) as *const i16)
        } else {
            _mm256_setzero_si256()
        };
        let both = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
        _mm512_mask_storeu_epi16(
            strip.as_mut_ptr().add(q * MR * 2) as *mut i16,
            (1u32 << (2 * MR)) - 1,
            _mm512_permutexvar_epi16(idx, both),
        );
    }
}

/// The LM head's gradients from its dlogits in bf16 ([`Bf16Rows`] `[N, V]`):
/// `dinp[N,C] += dY·W` and `dweight[V,C] += dYᵀ·X`, as
/// [`super::matmul_backward_bf16`] computes them from f32 dlogits rounded
/// the same way (the same bits). `w` must be an `nn.Linear` (`[V,C]`)
/// weight packed for the AVX-512 kernel with `backward`.
pub fn lm_head_backward_bf16(
    dinp: &mut [f32],
    dweight: &mut [f32],
    dlogits: &Bf16Rows,
    inp: &[f32],
    w: &Bf16Weight,
) {
    let (n, v) = dlogits.shape();
    let (c, oc) = w.shape();
    assert_eq!(oc, v, "lm_head_backward_bf16: dlogits must be [N,V]");
    assert_eq!(
        w.layout,
        WeightLayout::OutIn,
        "lm_head_backward_bf16: W must be [V,C]"
    );
    assert_eq!(
        dinp.len(),
        n * c,
        "lm_head_backward_bf16: dinp must be [N,C]"
    );
    assert_eq!(
        dweight.len(),
        v * c,
        "lm_head_backward_bf16: dweight must be [V,C]"
    );
    assert_eq!(inp.len(), n * c, "lm_head_backward_bf16: inp must be [N,C]");
    let Packed::Avx512 { bwd: Some(bwd), .. } = &w.packed else {
        panic!("lm_head_backward_bf16: W must be packed for the AVX-512 kernel's backward");
    };
    let input_grad = || {
        // SAFETY: an Avx512 weight is only made where the CPU has it.
        unsafe { gemm_packed(dinp, c, true, &dlogits.a, bwd) };
    };
    let weight_grad = || {
        let a = dlogits.transposed();
        let x = Src {
            data: inp,
            rs: c,
            cs: 1,
        };
        let b = PackedB::pack_pooled(x, n, c, true);
        // SAFETY: as above.
        unsafe { gemm_packed(dweight, c, true, &a, &b) };
        b.recycle();
    };
    rayon::join(input_grad, weight_grad);
}

#[cfg(test)]
mod tests {
    use super::super::{matmul_backward_bf16, Bf16Kernel, GradWrite};
    use super::*;
    use crate::util::bf16::f32_to_bf16;

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n)
            .map(|i| (((i * 37 + seed * 11) % 101) as f32 - 50.0) / 37.0)
            .collect()
    }

    /// The transpose's pair-major strips, element by element from the
    /// layout's formula, with odd rows, odd columns and partial strips;
    /// padding zero (a pool buffer full of garbage underneath).
    #[test]
    fn transposed_places_every_element() {
        for &(m, k) in &[(1, 1), (2, 14), (7, 15), (33, 29), (64, 3)] {
            super::super::recycle(vec![0xFFFF; 1 << 16]);
            let mut rows = Bf16Rows::new(m, k);
            let ld = rows.stride();
            let vals = values(m * k, m + k);
            for (i, row) in rows.data_mut().chunks_mut(ld).enumerate() {
                for (j, x) in row[..k].iter_mut().enumerate() {
                    *x = f32_to_bf16(vals[i * k + j]);
                }
            }
            assert!(
                rows.a.data.iter().skip(m * ld).all(|&x| x == 0),
                "row padding"
            );
            let t = rows.transposed();
            let tp = t.kp;
            let mut want = vec![0u16; t.data.len()];
            for j in 0..k {
                for i in 0..m {
                    let (s, r) = (j / MR, j % MR);
                    want[s * MR * tp + (i / 2) * MR * 2 + r * 2 + (i & 1)] =
                        f32_to_bf16(vals[i * k + j]);
                }
            }
            assert_eq!(t.data, want, "{m}x{k}");
        }
    }

    /// From bf16 rows, the LM head's gradients are the bits the f32
    /// dlogits give (the same rounded operands, the same kernel).
    #[test]
    fn backward_from_rows_equals_backward_from_f32() {
        for &(n, c, v) in &[(5, 16, 53), (37, 24, 301)] {
            let (dy, x, w) = (values(n * v, 1), values(n * c, 2), values(v * c, 3));
            let pw = Bf16Weight::pack(&w, c, v, WeightLayout::OutIn);
            if pw.kernel() != Bf16Kernel::Avx512 {
                assert!(!has_avx512bf16(), "the AVX-512 kernel where the CPU has it");
                continue;
            }
            let mut rows = Bf16Rows::new(n, v);
            let ld = rows.stride();
            for (i, row) in rows.data_mut().chunks_mut(ld).enumerate() {
                super::super::convert_row(&mut row[..v], &dy[i * v..(i + 1) * v]);
            }
            let (mut dx, mut dw) = (values(n * c, 4), values(v * c, 5));
            let (mut rdx, mut rdw) = (dx.clone(), dw.clone());
            lm_head_backward_bf16(&mut dx, &mut dw, &rows, &x, &pw);
            matmul_backward_bf16(
                Some((&mut rdx, GradWrite::Add)),
                Some(&mut rdw),
                None,
                &dy,
                &x,
                &pw,
                n,
            );
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&dx), bits(&rdx), "dx {n}x{c}x{v}");
            assert_eq!(bits(&dw), bits(&rdw), "dW {n}x{c}x{v}");
        }
    }
}
