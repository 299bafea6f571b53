//! A packed bf16 matmul (used by BERT's encoder): `out[N,OC] = bf16(inp[N,K])·Wᵀ + b`
//! with products of bf16 pairs accumulated in f32 (AVX-512 BF16
//! `vdpbf16ps`, two multiply-adds per lane per instruction: twice the f32
//! FMA rate). Where the CPU lacks AVX-512 BF16, the same rounded operands
//! go through the f32 `gemm` path (same numbers up to summation order).
//!
//! Shape legend: N rows (B·T), K input channels, OC output channels,
//! MR×NR the register tile (14 rows × 32 columns).
//!
//! Packed weight layout: panels of NR output columns; within a panel, for
//! each pair of input channels (k, k+1), NR pairs `(W[j,k], W[j,k+1])` — the
//! operand `vdpbf16ps` multiplies against a broadcast pair of one input
//! row. K is padded to even and OC to a multiple of NR with zeros.

use rayon::prelude::*;

use super::{matmul_forward, WeightLayout};
use crate::util::bf16::{bf16_to_f32, f32_to_bf16};
use crate::util::parallel::SendPtr;

/// Rows of the register tile.
const MR: usize = 14;
/// Columns of the register tile (two 16-lane vectors).
const NR: usize = 32;
/// Row tiles per parallel task.
const TILES_PER_TASK: usize = 8;

fn has_avx512bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// An `nn.Linear` weight `[OC,K]` in bf16, packed for the tile kernel.
#[derive(Debug, Clone)]
pub struct PackedBf16 {
    oc: usize,
    k: usize,
    /// K rounded up to even.
    kp: usize,
    /// `[ceil(OC/NR)][kp/2][NR][2]`.
    data: Vec<u16>,
    /// `[OC]` rounded up to a multiple of NR (zeros past OC).
    bias: Vec<f32>,
}

impl PackedBf16 {
    /// Packs `w[OC,K]` (row-major, `nn.Linear` layout) and its bias.
    pub fn pack(w: &[f32], bias: Option<&[f32]>, oc: usize, k: usize) -> PackedBf16 {
        assert_eq!(w.len(), oc * k, "PackedBf16::pack: weight must be [OC,K]");
        let kp = k + (k & 1);
        let panels = oc.div_ceil(NR);
        let mut data = vec![0u16; panels * kp * NR];
        data.par_chunks_mut(kp * NR)
            .enumerate()
            .for_each(|(p, panel)| {
                for j in 0..NR {
                    let col = p * NR + j;
                    if col >= oc {
                        break;
                    }
                    let row = &w[col * k..(col + 1) * k];
                    for (kk, &x) in row.iter().enumerate() {
                        panel[(kk / 2) * NR * 2 + j * 2 + (kk & 1)] = f32_to_bf16(x);
                    }
                }
            });
        let mut b = vec![0.0; panels * NR];
        if let Some(bias) = bias {
            assert_eq!(bias.len(), oc, "PackedBf16::pack: bias must be [OC]");
            b[..oc].copy_from_slice(bias);
        }
        PackedBf16 {
            oc,
            k,
            kp,
            data,
            bias: b,
        }
    }

    /// The weight rounded to bf16, back in f32 `[OC,K]`.
    pub fn unpack(&self) -> Vec<f32> {
        let mut w = vec![0.0; self.oc * self.k];
        for (col, row) in w.chunks_exact_mut(self.k).enumerate() {
            let (p, j) = (col / NR, col % NR);
            let panel = &self.data[p * self.kp * NR..];
            for (kk, x) in row.iter_mut().enumerate() {
                *x = bf16_to_f32(panel[(kk / 2) * NR * 2 + j * 2 + (kk & 1)]);
            }
        }
        w
    }

    /// `out[N,OC] = bf16(inp[N,K])·Wᵀ + b`.
    pub fn forward(&self, out: &mut [f32], inp: &[f32], n: usize) {
        let (k, oc, kp) = (self.k, self.oc, self.kp);
        assert_eq!(inp.len(), n * k, "PackedBf16::forward: inp must be [N,K]");
        assert_eq!(out.len(), n * oc, "PackedBf16::forward: out must be [N,OC]");
        if n == 0 || oc == 0 {
            return;
        }
        // Input rows in bf16, K padded to even, rows padded to a multiple of MR.
        let npad = n.div_ceil(MR) * MR;
        let mut a = vec![0u16; npad * kp];
        a.par_chunks_mut(kp * 64)
            .zip(inp.par_chunks(k * 64))
            .for_each(|(dst, src)| {
                for (d, s) in dst.chunks_exact_mut(kp).zip(src.chunks_exact(k)) {
                    convert_row(d, s);
                }
            });
        #[cfg(target_arch = "x86_64")]
        if has_avx512bf16() {
            let out_ptr = SendPtr(out.as_mut_ptr());
            let tiles = npad / MR;
            let tasks = tiles.div_ceil(TILES_PER_TASK);
            (0..tasks).into_par_iter().for_each(|task| {
                let t0 = task * TILES_PER_TASK;
                let t1 = (t0 + TILES_PER_TASK).min(tiles);
                let mut tmp = [0f32; MR * NR];
                for p in 0..oc.div_ceil(NR) {
                    let panel = &self.data[p * kp * NR..(p + 1) * kp * NR];
                    let bias = &self.bias[p * NR..(p + 1) * NR];
                    let cols = NR.min(oc - p * NR);
                    for tile in t0..t1 {
                        let r0 = tile * MR;
                        let rows = MR.min(n - r0.min(n));
                        let arow = &a[r0 * kp..(r0 + MR) * kp];
                        if rows == MR && cols == NR {
                            // SAFETY: rows r0..r0+MR and columns p·NR..p·NR+NR
                            // lie inside `out` (checked just above), and this
                            // task alone writes rows of its tiles.
                            unsafe {
                                let c = out_ptr.get().add(r0 * oc + p * NR);
                                tile_kernel(arow, kp, panel, bias, c, oc);
                            }
                        } else if rows > 0 {
                            // SAFETY: `tmp` is a full MR×NR tile.
                            unsafe { tile_kernel(arow, kp, panel, bias, tmp.as_mut_ptr(), NR) };
                            for r in 0..rows {
                                let dst = (r0 + r) * oc + p * NR;
                                // SAFETY: as above, restricted to the valid
                                // rows and columns of this tile.
                                unsafe {
                                    std::ptr::copy_nonoverlapping(
                                        tmp.as_ptr().add(r * NR),
                                        out_ptr.get().add(dst),
                                        cols,
                                    );
                                }
                            }
                        }
                    }
                }
            });
            return;
        }
        // Portable path: the same bf16-rounded operands through f32 gemm.
        let af: Vec<f32> = (0..n)
            .flat_map(|r| a[r * kp..r * kp + k].iter().map(|&h| bf16_to_f32(h)))
            .collect();
        matmul_forward(
            out,
            &af,
            &self.unpack(),
            Some(&self.bias[..oc]),
            n,
            k,
            oc,
            WeightLayout::OutIn,
        );
    }
}

/// One input row f32 → bf16 (`dst` may be one longer than `src`: padding).
fn convert_row(dst: &mut [u16], src: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512bf16() {
        // SAFETY: the feature was just detected.
        unsafe { convert_row_avx512(dst, src) };
        return;
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f32_to_bf16(s);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
unsafe fn convert_row_avx512(dst: &mut [u16], src: &[f32]) {
    use std::arch::x86_64::*;
    let k = src.len();
    let mut i = 0;
    while i + 32 <= k {
        let lo = _mm512_loadu_ps(src.as_ptr().add(i));
        let hi = _mm512_loadu_ps(src.as_ptr().add(i + 16));
        let v = _mm512_cvtne2ps_pbh(hi, lo);
        _mm512_storeu_si512(
            dst.as_mut_ptr().add(i) as *mut _,
            std::mem::transmute::<__m512bh, __m512i>(v),
        );
        i += 32;
    }
    while i < k {
        dst[i] = f32_to_bf16(src[i]);
        i += 1;
    }
}

/// One MR×NR tile over the whole K: `c[r, j] = bias[j] + Σ_k a[r,k]·panel[k,j]`.
///
/// # Safety
/// AVX-512 BF16 must be present; `a` holds MR rows of `kp` bf16s, `panel`
/// `kp·NR` bf16s, `c` an MR×NR tile with row stride `ldc` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
unsafe fn tile_kernel(a: &[u16], kp: usize, panel: &[u16], bias: &[f32], c: *mut f32, ldc: usize) {
    use std::arch::x86_64::*;
    debug_assert!(a.len() >= MR * kp && panel.len() >= kp * NR && bias.len() >= NR);
    let b0 = _mm512_loadu_ps(bias.as_ptr());
    let b1 = _mm512_loadu_ps(bias.as_ptr().add(16));
    let mut acc = [[b0, b1]; MR];
    let ap = a.as_ptr() as *const i32;
    let bp = panel.as_ptr();
    let pairs = kp / 2;
    let lda = kp / 2; // in i32 (pairs)
    for p in 0..pairs {
        let w0: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.add(p * NR * 2) as *const _));
        let w1: __m512bh =
            std::mem::transmute(_mm512_loadu_si512(bp.add(p * NR * 2 + 32) as *const _));
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let x: __m512bh = std::mem::transmute(_mm512_set1_epi32(*ap.add(r * lda + p)));
            acc_r[0] = _mm512_dpbf16_ps(acc_r[0], x, w0);
            acc_r[1] = _mm512_dpbf16_ps(acc_r[1], x, w1);
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        _mm512_storeu_ps(c.add(r * ldc), acc_r[0]);
        _mm512_storeu_ps(c.add(r * ldc + 16), acc_r[1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The tile kernel (or the portable path) against a plain f64 product
    /// of the bf16-rounded operands, over shapes with row, column and K tails.
    #[test]
    fn packed_matches_reference() {
        for &(n, k, oc) in &[
            (1, 1, 1),
            (14, 32, 32),
            (29, 37, 70),
            (3, 64, 33),
            (40, 96, 64),
        ] {
            let w: Vec<f32> = (0..oc * k)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                .collect();
            let x: Vec<f32> = (0..n * k)
                .map(|i| ((i * 53 % 89) as f32 - 44.0) / 30.0)
                .collect();
            let b: Vec<f32> = (0..oc).map(|i| i as f32 * 0.1).collect();
            let packed = PackedBf16::pack(&w, Some(&b), oc, k);
            let mut out = vec![f32::NAN; n * oc];
            packed.forward(&mut out, &x, n);
            let r = |v: f32| bf16_to_f32(f32_to_bf16(v)) as f64;
            for row in 0..n {
                for col in 0..oc {
                    let want: f64 = b[col] as f64
                        + (0..k)
                            .map(|kk| r(x[row * k + kk]) * r(w[col * k + kk]))
                            .sum::<f64>();
                    let got = out[row * oc + col] as f64;
                    assert!(
                        (got - want).abs() < 1e-4 * (1.0 + want.abs()),
                        "{n}x{k}x{oc} [{row},{col}]: {got} vs {want}"
                    );
                }
            }
            assert_eq!(packed.unpack().len(), oc * k);
        }
    }
}
