//! One attention head's keys and values from a bf16 KV cache, packed once as
//! the right operands of its two products: causal prefill multiplies each
//! block of queries by a prefix of them, and packing that prefix again for
//! every block (widened to f32 first) cost more than the products.

use super::{extent, gemm_packed_on, pooled, recycle, BRef, PackedA, PackedB, Src, View, NR};
use crate::kernels::simd::dispatch;

/// A head's keys as the `[HS, n]` right operand of `S = Q·Kᵀ`, or its values
/// as the `[n, HS]` right operand of `O = P·V` (bf16, `PackedB`'s layout).
pub(crate) struct HeadOperand {
    /// Columns and rows (K) held.
    n: usize,
    k: usize,
    kp: usize,
    data: Vec<u16>,
}

impl HeadOperand {
    /// `Kᵀ` of `keys[n, hs]` (bf16 bits, row-major): panels of NR keys, in
    /// each the K pairs `(K[j, d], K[j, d+1])` of a key are its own two
    /// adjacent values.
    pub(crate) fn keys_t(keys: &[u16], n: usize, hs: usize) -> HeadOperand {
        assert!(keys.len() >= n * hs, "HeadOperand::keys_t: keys too short");
        let kp = hs + (hs & 1);
        let mut data = pooled(n.div_ceil(NR) * kp * NR);
        dispatch(
            #[inline(always)]
            || {
                for (p, panel) in data.chunks_exact_mut(kp * NR).enumerate() {
                    let keys = &keys[p * NR * hs..][..NR.min(n - p * NR) * hs];
                    // Pair q of every key in turn: one contiguous NR·2 run.
                    for (q, run) in panel.chunks_exact_mut(NR * 2).enumerate() {
                        run.fill(0);
                        for (dst, key) in run.chunks_exact_mut(2).zip(keys.chunks_exact(hs)) {
                            dst[0] = key[2 * q];
                            if 2 * q + 1 < hs {
                                dst[1] = key[2 * q + 1];
                            }
                        }
                    }
                }
            },
        );
        HeadOperand { n, k: hs, kp, data }
    }

    /// `V` of `vals[n, hs]` (bf16 bits, row-major): panels of NR of the HS
    /// columns, in each the K pairs of two consecutive positions.
    pub(crate) fn values(vals: &[u16], n: usize, hs: usize) -> HeadOperand {
        assert!(
            vals.len() >= n * hs,
            "HeadOperand::values: values too short"
        );
        let kp = n + (n & 1);
        let mut data = pooled(hs.div_ceil(NR) * kp * NR);
        dispatch(
            #[inline(always)]
            || {
                for (p, panel) in data.chunks_exact_mut(kp * NR).enumerate() {
                    let cols = NR.min(hs - p * NR);
                    for (q, run) in panel.chunks_exact_mut(NR * 2).enumerate() {
                        let row = |e: usize| &vals[(2 * q + e) * hs + p * NR..][..cols];
                        if 2 * q + 1 < n && cols == NR {
                            // Two positions' rows interleaved.
                            for (dst, (&a, &b)) in
                                run.chunks_exact_mut(2).zip(row(0).iter().zip(row(1)))
                            {
                                dst[0] = a;
                                dst[1] = b;
                            }
                            continue;
                        }
                        run.fill(0);
                        for e in 0..2.min(n - 2 * q) {
                            for (j, &x) in row(e).iter().enumerate() {
                                run[j * 2 + e] = x;
                            }
                        }
                    }
                }
            },
        );
        HeadOperand {
            n: hs,
            k: n,
            kp,
            data,
        }
    }

    /// `rhs[k, n]` (f32, any strides) rounded to bf16 and packed, on this
    /// thread: a training head's keys (`Kᵀ`, or `K` for dq) or values (`V`,
    /// or `Vᵀ` for dp), packed once for all its causal query blocks.
    pub(crate) fn pack(rhs: View<'_>, k: usize, n: usize) -> HeadOperand {
        let src = Src {
            data: rhs.data,
            rs: rhs.rs,
            cs: rhs.cs,
        };
        let PackedB { n, k, kp, data } = PackedB::pack_pooled(src, k, n, false);
        HeadOperand { n, k, kp, data }
    }

    /// `dst[M, cols] (+)= bf16(lhs[M, k])·B[..k, ..cols]` on this thread:
    /// the first `cols` columns and `k` rows of this operand (`dst` row
    /// stride `ldc`). Summed in K order, as [`super::gemm_bf16_serial_to_ptr`]
    /// sums the same operands packed alone.
    ///
    /// # Safety
    /// AVX-512 BF16 must be present; `dst` must be valid for the `M×cols`
    /// elements and no other thread may touch them meanwhile.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn product(
        &self,
        dst: *mut f32,
        ldc: usize,
        accumulate: bool,
        lhs: View<'_>,
        m: usize,
        cols: usize,
        k: usize,
    ) {
        assert!(
            cols <= self.n && k <= self.k,
            "HeadOperand::product: {k}×{cols} exceeds the operand's {}×{}",
            self.k,
            self.n
        );
        if m == 0 || cols == 0 {
            return;
        }
        let src = Src {
            data: lhs.data,
            rs: lhs.rs,
            cs: lhs.cs,
        };
        let a = PackedA::pack_on(src, m, k, false);
        let b = BRef {
            data: &self.data,
            n: cols,
            kp: self.kp,
        };
        // SAFETY: the caller's promises on `dst` and the CPU.
        unsafe {
            let c = std::slice::from_raw_parts_mut(dst, extent(m, cols, ldc, 1));
            gemm_packed_on(c, ldc, accumulate, &a, b, false, super::Epilogue::NONE);
        }
    }
}

impl Drop for HeadOperand {
    fn drop(&mut self) {
        recycle(std::mem::take(&mut self.data));
    }
}

#[cfg(test)]
mod tests {
    use super::super::{gemm_bf16_serial_to_ptr, has_avx512bf16};
    use super::*;
    use crate::util::bf16::{bf16_to_f32, f32_to_bf16};

    /// Products with prefixes of a once-packed head (odd lengths and HS,
    /// column tails) are bit for bit those of the prefix packed alone.
    #[test]
    fn prefixes_equal_operands_packed_alone() {
        if !has_avx512bf16() {
            return; // The packed products need the kernel; the f32 path has no twin here.
        }
        for (n, hs) in [(75, 64), (40, 7), (33, 32)] {
            let kv: Vec<u16> = (0..n * hs)
                .map(|i| f32_to_bf16(((i * 37) % 29) as f32 * 0.125 - 1.5))
                .collect();
            let wide: Vec<f32> = kv.iter().map(|&x| bf16_to_f32(x)).collect();
            let (kt, v) = (
                HeadOperand::keys_t(&kv, n, hs),
                HeadOperand::values(&kv, n, hs),
            );
            // The same operands packed from f32 (training's heads).
            let (kt32, v32) = (
                HeadOperand::pack(
                    View {
                        data: &wide,
                        rs: 1,
                        cs: hs,
                    },
                    hs,
                    n,
                ),
                HeadOperand::pack(
                    View {
                        data: &wide,
                        rs: hs,
                        cs: 1,
                    },
                    n,
                    hs,
                ),
            );
            let rows = 9;
            let q: Vec<f32> = (0..rows * n.max(hs))
                .map(|i| ((i * 5) % 13) as f32 - 6.0)
                .collect();
            for nk in [1, 2, 17, n] {
                let view = |data, rs, cs| View { data, rs, cs };
                // S = Q·K[..nk]ᵀ
                let (mut got, mut want) = (vec![0f32; rows * nk], vec![0f32; rows * nk]);
                let mut got32 = vec![0f32; rows * nk];
                unsafe {
                    kt.product(got.as_mut_ptr(), nk, false, view(&q, hs, 1), rows, nk, hs);
                    kt32.product(got32.as_mut_ptr(), nk, false, view(&q, hs, 1), rows, nk, hs);
                    gemm_bf16_serial_to_ptr(
                        want.as_mut_ptr(),
                        nk,
                        false,
                        view(&q, hs, 1),
                        view(&wide, 1, hs),
                        rows,
                        nk,
                        hs,
                    );
                }
                assert_eq!(got, want, "Q·Kᵀ n {n} hs {hs} nk {nk}");
                assert_eq!(got32, want, "Q·Kᵀ from f32, n {n} hs {hs} nk {nk}");
                // O = P·V[..nk]
                let (mut got, mut want) = (vec![0f32; rows * hs], vec![0f32; rows * hs]);
                let mut got32 = vec![0f32; rows * hs];
                unsafe {
                    v.product(got.as_mut_ptr(), hs, false, view(&q, nk, 1), rows, hs, nk);
                    v32.product(got32.as_mut_ptr(), hs, false, view(&q, nk, 1), rows, hs, nk);
                    gemm_bf16_serial_to_ptr(
                        want.as_mut_ptr(),
                        hs,
                        false,
                        view(&q, nk, 1),
                        view(&wide, hs, 1),
                        rows,
                        hs,
                        nk,
                    );
                }
                assert_eq!(got, want, "P·V n {n} hs {hs} nk {nk}");
                assert_eq!(got32, want, "P·V from f32, n {n} hs {hs} nk {nk}");
            }
        }
    }
}
