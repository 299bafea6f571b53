//! int8 products with dynamically quantized activations (W8A8): AVX-512
//! VNNI (`vpdpbusd`, u8 × s8 summed in i32) with a portable twin that
//! computes the same integers and the same f32 results, bit for bit.
//!
//! Shape legend: N rows, K input channels, OC output channels.
//!
//! - Weights: int8, symmetric, one scale per output channel (as
//!   [`super::quant::quantize_int8_out_in`]), packed once into panels of 16
//!   channels holding, for each quad of K, the 16 channels' 4 bytes
//!   (`[OC/16][K/4][16][4]`: the operand order of `vpdpbusd`), K padded with
//!   zeros to a multiple of 4; plus each channel's sum of weights.
//! - Activations: quantized per row as they arrive (dynamic quantization, as
//!   ONNX Runtime's and PyTorch's quantized linear layers do): asymmetric u8,
//!   `scale = (max(x,0) − min(x,0)) / 255`, `zero = round(−min(x,0) / scale)`,
//!   `q = clamp(round(x / scale) + zero, 0, 255)` (ties to even). Per row
//!   rather than per tensor: a row's result does not depend on the other rows
//!   of the batch (decode equals prefill, a padded batch equals its rows),
//!   and one outlier token does not coarsen every other token's grid.
//! - `out[r,o] = sx[r]·sw[o]·(Σ_k q[r,k]·w[o,k] − zero[r]·Σ_k w[o,k]) + b[o]`:
//!   the sum is exact in i32 (|·| ≤ 255·127·K < 2³¹ for K ≤ [`MAX_K`]), then
//!   one conversion and one fused multiply-add, the same on both paths.

use rayon::prelude::*;

use super::quant::{quantize_int8_out_in, SourceLayout};
use super::simd::{self, dispatch};
use crate::util::parallel::SendPtr;

/// Largest K whose sums cannot overflow i32: 255 · 127 · K < 2³¹.
pub const MAX_K: usize = 65_536;

/// Output channels per packed panel (one 16-lane i32 vector).
const LANES: usize = 16;
/// Bytes of one panel per quad of K.
const QUAD_BYTES: usize = 4 * LANES;
/// Rows of the register tile.
const MR: usize = 6;
/// Panels of the register tile: MR × NP = 24 accumulators.
const NP: usize = 4;
/// Rows and panels per parallel task at most.
const TASK_ROWS: usize = 8 * MR;
const TASK_PANELS: usize = 16;

/// Whether this CPU runs the AVX-512 VNNI kernel.
pub fn has_avx512vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Which implementation runs the products.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Int8Kernel {
    /// `vpdpbusd` (the CPU must have AVX-512 VNNI).
    Avx512Vnni,
    /// Plain integer loops (auto-vectorized for AVX2): any CPU, the same results.
    Portable,
}

impl Int8Kernel {
    /// The fastest this CPU has.
    pub fn detect() -> Int8Kernel {
        if has_avx512vnni() {
            Int8Kernel::Avx512Vnni
        } else {
            Int8Kernel::Portable
        }
    }
}

/// Rows `x[N,K]` quantized to u8 per row (see the module doc), each row
/// padded with zeros to a multiple of 4 bytes.
#[derive(Debug, Clone, Default)]
pub struct QuantizedRows {
    n: usize,
    /// Row stride: K rounded up to a multiple of 4.
    kp: usize,
    data: Vec<u8>,
    scales: Vec<f32>,
    zeros: Vec<i32>,
}

impl QuantizedRows {
    /// Quantizes each row of `x[N,K]`.
    pub fn quantize(x: &[f32], n: usize, k: usize) -> QuantizedRows {
        assert_eq!(x.len(), n * k, "QuantizedRows: x must be [N,K]");
        let kp = k.next_multiple_of(4);
        let mut q = QuantizedRows {
            n,
            kp,
            data: vec![0; n * kp],
            scales: vec![0.0; n],
            zeros: vec![0; n],
        };
        if k == 0 {
            return q;
        }
        let rows_per_task = (1 << 14) / kp + 1;
        q.data
            .par_chunks_mut(rows_per_task * kp)
            .zip(q.scales.par_chunks_mut(rows_per_task))
            .zip(q.zeros.par_chunks_mut(rows_per_task))
            .zip(x.par_chunks(rows_per_task * k))
            .for_each(|(((d, s), z), x)| {
                dispatch(
                    #[inline(always)]
                    || {
                        for (((d, s), z), x) in d
                            .chunks_exact_mut(kp)
                            .zip(s.iter_mut())
                            .zip(z.iter_mut())
                            .zip(x.chunks_exact(k))
                        {
                            (*s, *z) = quantize_row(d, x);
                        }
                    },
                )
            });
        q
    }

    /// `(scale, zero)` of row `r`: `x[r,k] ≈ scale · (q[r,k] − zero)`.
    pub fn params(&self, r: usize) -> (f32, i32) {
        (self.scales[r], self.zeros[r])
    }

    /// Row `r`'s bytes (K padded to a multiple of 4).
    pub fn row(&self, r: usize) -> &[u8] {
        &self.data[r * self.kp..(r + 1) * self.kp]
    }
}

/// Quantizes one row into `dst` (its first `x.len()` bytes); returns
/// `(scale, zero)`. Both paths call this one function.
#[inline(always)]
fn quantize_row(dst: &mut [u8], x: &[f32]) -> (f32, i32) {
    let (lo, hi) = (simd::min(x).min(0.0), simd::max(x).max(0.0));
    let scale = (hi - lo) / 255.0;
    // A zero row (or one with non-finite extremes) quantizes to zeros.
    if !(scale > 0.0 && scale.is_finite()) {
        dst[..x.len()].fill(0);
        return (0.0, 0);
    }
    let inv = 1.0 / scale;
    let zero = (-lo * inv).round_ties_even().clamp(0.0, 255.0);
    for (d, &v) in dst.iter_mut().zip(x) {
        // max/min rather than clamp: they drop a NaN, so the value is in
        // [0, 255] and converts without the saturating `as` (which keeps
        // the loop from vectorizing).
        #[allow(clippy::manual_clamp)]
        let q = ((v * inv).round_ties_even() + zero).max(0.0).min(255.0);
        // SAFETY: q is finite and in [0, 255].
        *d = unsafe { q.to_int_unchecked::<i32>() } as u8;
    }
    (scale, zero as i32)
}

/// An int8 weight `W[OC,K]` packed for [`Self::forward`] (see the module doc).
#[derive(Clone)]
pub struct PackedInt8 {
    k: usize,
    oc: usize,
    /// Quads of K (K rounded up to a multiple of 4, over 4).
    quads: usize,
    /// `[OC/16][quads][16][4]`, zero-padded.
    data: Vec<i8>,
    /// Per channel, padded to whole panels with zeros.
    scales: Vec<f32>,
    sums: Vec<i32>,
    kernel: Int8Kernel,
}

impl std::fmt::Debug for PackedInt8 {
    /// Shape and kernel only: the data would be millions of numbers.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedInt8")
            .field("k", &self.k)
            .field("oc", &self.oc)
            .field("kernel", &self.kernel)
            .finish()
    }
}

impl PackedInt8 {
    /// Quantizes the f32 weight `w` (`[K,OC]` or `[OC,K]` per `layout`)
    /// per output channel and packs it for this CPU's fastest kernel.
    pub fn quantize(w: &[f32], k: usize, oc: usize, layout: SourceLayout) -> PackedInt8 {
        let mut q = vec![0i8; k * oc];
        let mut scales = vec![0f32; oc];
        quantize_int8_out_in(&mut q, &mut scales, w, k, oc, layout, &|_| {});
        Self::from_rows(&q, &scales, k, oc)
    }

    /// Packs quantized rows `q[OC,K]` with their scales `[OC]`.
    pub fn from_rows(q: &[i8], scales: &[f32], k: usize, oc: usize) -> PackedInt8 {
        Self::from_rows_with(q, scales, k, oc, Int8Kernel::detect())
    }

    /// [`Self::from_rows`] for `kernel`. Panics when `kernel` is
    /// [`Int8Kernel::Avx512Vnni`] on a CPU without it, or K > [`MAX_K`].
    pub fn from_rows_with(
        q: &[i8],
        scales: &[f32],
        k: usize,
        oc: usize,
        kernel: Int8Kernel,
    ) -> PackedInt8 {
        assert_eq!(q.len(), k * oc, "PackedInt8: q must be [OC,K]");
        assert_eq!(scales.len(), oc, "PackedInt8: scales must be [OC]");
        assert!(k <= MAX_K, "PackedInt8: K {k} above {MAX_K}");
        if kernel == Int8Kernel::Avx512Vnni {
            assert!(has_avx512vnni(), "PackedInt8: this CPU lacks AVX-512 VNNI");
        }
        let quads = k.div_ceil(4);
        let panels = oc.div_ceil(LANES);
        let mut data = crate::util::alloc::huge_zeroed::<i8>(panels * quads * QUAD_BYTES);
        let mut sums = vec![0i32; panels * LANES];
        if quads > 0 {
            data.par_chunks_mut(quads * QUAD_BYTES)
                .zip(sums.par_chunks_mut(LANES))
                .enumerate()
                .for_each(|(p, (panel, sums))| {
                    for (j, sum) in sums.iter_mut().enumerate().take(oc - p * LANES) {
                        let row = &q[(p * LANES + j) * k..][..k];
                        for (i, &v) in row.iter().enumerate() {
                            panel[(i / 4) * QUAD_BYTES + j * 4 + i % 4] = v;
                        }
                        *sum = row.iter().map(|&v| v as i32).sum();
                    }
                });
        }
        let mut padded = vec![0f32; panels * LANES];
        padded[..oc].copy_from_slice(scales);
        PackedInt8 {
            k,
            oc,
            quads,
            data,
            scales: padded,
            sums,
            kernel,
        }
    }

    /// `(K, OC)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.k, self.oc)
    }

    /// The kernel this weight runs on.
    pub fn kernel(&self) -> Int8Kernel {
        self.kernel
    }

    /// Bytes held: the weights, a scale and a sum per channel.
    pub fn bytes(&self) -> usize {
        self.data.len() + self.scales.len() * 4 + self.sums.len() * 4
    }

    /// `dst[K]` = row `o` of the dequantized weight (an embedding lookup).
    pub fn row_into(&self, o: usize, dst: &mut [f32]) {
        assert!(o < self.oc, "PackedInt8::row_into: row {o} of {}", self.oc);
        assert_eq!(dst.len(), self.k, "PackedInt8::row_into: dst must be [K]");
        let (p, j) = (o / LANES, o % LANES);
        let panel = &self.data[p * self.quads * QUAD_BYTES..];
        let s = self.scales[o];
        for (i, d) in dst.iter_mut().enumerate() {
            *d = panel[(i / 4) * QUAD_BYTES + j * 4 + i % 4] as f32 * s;
        }
    }

    /// `out[N,OC] = x[N,K]·Wᵀ (+ bias[OC])`, `x` quantized per row first.
    pub fn forward(&self, out: &mut [f32], x: &[f32], bias: Option<&[f32]>, n: usize) {
        assert_eq!(x.len(), n * self.k, "PackedInt8::forward: x must be [N,K]");
        self.forward_quantized(out, &QuantizedRows::quantize(x, n, self.k), bias);
    }

    /// `out[N,OC] = x·Wᵀ (+ bias[OC])` for rows already quantized.
    pub fn forward_quantized(&self, out: &mut [f32], x: &QuantizedRows, bias: Option<&[f32]>) {
        let (n, oc) = (x.n, self.oc);
        assert_eq!(x.kp, self.quads * 4, "PackedInt8: rows' K differs");
        assert_eq!(out.len(), n * oc, "PackedInt8: out must be [N,OC]");
        if let Some(b) = bias {
            assert_eq!(b.len(), oc, "PackedInt8: bias must be [OC]");
        }
        if n == 0 || oc == 0 {
            return;
        }
        let panels = oc.div_ceil(LANES);
        let row_blocks = n.div_ceil(TASK_ROWS);
        // Enough tasks for every thread (a decode step is one row block).
        let want = 4 * rayon::current_num_threads();
        let per_task = panels
            .div_ceil(want.div_ceil(row_blocks))
            .clamp(1, TASK_PANELS);
        let panel_blocks = panels.div_ceil(per_task);
        let out_ptr = SendPtr(out.as_mut_ptr());
        (0..row_blocks * panel_blocks)
            .into_par_iter()
            .for_each(|task| {
                let (rb, pb) = (task / panel_blocks, task % panel_blocks);
                let rows = rb * TASK_ROWS..((rb + 1) * TASK_ROWS).min(n);
                let ps = pb * per_task..((pb + 1) * per_task).min(panels);
                let ep = Epilogue {
                    x,
                    w: self,
                    bias,
                    out: out_ptr.get(),
                };
                match self.kernel {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: the feature was checked when packing; the
                    // task's rows and panels lie inside `x`, `self` and
                    // `out`, and only this task writes its block of `out`.
                    Int8Kernel::Avx512Vnni => unsafe { vnni::block(&ep, rows, ps) },
                    #[cfg(not(target_arch = "x86_64"))]
                    Int8Kernel::Avx512Vnni => unreachable!("VNNI weights are x86-64 only"),
                    Int8Kernel::Portable => dispatch(
                        #[inline(always)]
                        || portable_block(&ep, rows, ps),
                    ),
                }
            });
    }
}

/// What a task needs to finish its outputs.
struct Epilogue<'a> {
    x: &'a QuantizedRows,
    w: &'a PackedInt8,
    bias: Option<&'a [f32]>,
    out: *mut f32,
}

impl Epilogue<'_> {
    /// The result for row `r`, channel `o` from its integer sum.
    #[inline(always)]
    fn finish(&self, r: usize, o: usize, acc: i32) -> f32 {
        let (sx, zero) = self.x.params(r);
        let v = acc.wrapping_sub(zero.wrapping_mul(self.w.sums[o]));
        let b = self.bias.map_or(0.0, |b| b[o]);
        (v as f32).mul_add(sx * self.w.scales[o], b)
    }
}

/// The portable twin: row by row, panel by panel, the same integer sums.
#[inline(always)]
fn portable_block(ep: &Epilogue<'_>, rows: std::ops::Range<usize>, panels: std::ops::Range<usize>) {
    let w = ep.w;
    let span = w.quads * QUAD_BYTES;
    for p in panels {
        let panel = &w.data[p * span..(p + 1) * span];
        let lanes = LANES.min(w.oc - p * LANES);
        for r in rows.clone() {
            let mut acc = [0i32; LANES];
            for (a, b) in
                ep.x.row(r)
                    .chunks_exact(4)
                    .zip(panel.chunks_exact(QUAD_BYTES))
            {
                for (j, acc) in acc.iter_mut().enumerate() {
                    let mut s = 0i32;
                    for t in 0..4 {
                        s += a[t] as i32 * b[j * 4 + t] as i32;
                    }
                    *acc += s;
                }
            }
            for (j, &acc) in acc.iter().enumerate().take(lanes) {
                let o = p * LANES + j;
                // SAFETY: r < N and o < OC; only this task writes (r, o).
                unsafe { *ep.out.add(r * w.oc + o) = ep.finish(r, o, acc) };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use super::{Epilogue, LANES, MR, NP, QUAD_BYTES};
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// The task's block: groups of NP panels over tiles of MR rows, then the
    /// panels left over one at a time. (Blocking K so that a group's slice
    /// of B stays in L1 measured 2-5% slower: the loop is bound by its
    /// instructions, not by L2.)
    ///
    /// # Safety
    /// AVX-512 VNNI present; `rows` and `panels` inside the operands.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    pub(super) unsafe fn block(ep: &Epilogue<'_>, rows: Range<usize>, panels: Range<usize>) {
        let mut p = panels.start;
        while p < panels.end {
            let np = if panels.end - p >= NP { NP } else { 1 };
            let mut r = rows.start;
            while r < rows.end {
                let mr = MR.min(rows.end - r);
                macro_rules! tile {
                    ($($m:literal)*) => {
                        match (mr, np) {
                            $(($m, NP) => tile::<$m, NP>(ep, r, p),
                              ($m, _) => tile::<$m, 1>(ep, r, p),)*
                            _ => unreachable!("tile rows 1..=MR"),
                        }
                    };
                }
                tile!(1 2 3 4 5 6);
                r += mr;
            }
            p += np;
        }
    }

    /// Rows `r0..r0+R` times panels `p0..p0+P`, written through the
    /// epilogue. Not inlined: on its own the loop keeps all R·P sums in
    /// registers (inlined into a larger `block`, two were spilled: half the
    /// speed).
    #[inline(never)]
    #[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni")]
    unsafe fn tile<const R: usize, const P: usize>(ep: &Epilogue<'_>, r0: usize, p0: usize) {
        let (x, w) = (ep.x, ep.w);
        let span = w.quads * QUAD_BYTES;
        let b = w.data.as_ptr().add(p0 * span);
        let a = x.data.as_ptr().add(r0 * x.kp);
        let mut acc = [[_mm512_setzero_si512(); P]; R];
        for q in 0..w.quads {
            let mut bv = [_mm512_setzero_si512(); P];
            for (j, bv) in bv.iter_mut().enumerate() {
                *bv = _mm512_loadu_si512(b.add(j * span + q * QUAD_BYTES) as *const _);
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                let av =
                    _mm512_set1_epi32((a.add(i * x.kp + 4 * q) as *const i32).read_unaligned());
                for j in 0..P {
                    acc[j] = _mm512_dpbusd_epi32(acc[j], av, bv[j]);
                }
            }
        }
        for (i, acc) in acc.iter().enumerate() {
            let r = r0 + i;
            let (sx, zero) = x.params(r);
            let (sxv, zv) = (_mm512_set1_ps(sx), _mm512_set1_epi32(zero));
            for (j, &acc) in acc.iter().enumerate() {
                let o = (p0 + j) * LANES;
                let lanes = LANES.min(w.oc - o);
                let mask: __mmask16 = if lanes == LANES {
                    !0
                } else {
                    (1u16 << lanes) - 1
                };
                // Scales and sums are padded to whole panels.
                let sums = _mm512_loadu_si512(w.sums.as_ptr().add(o) as *const _);
                let v = _mm512_sub_epi32(acc, _mm512_mullo_epi32(zv, sums));
                let s = _mm512_mul_ps(sxv, _mm512_loadu_ps(w.scales.as_ptr().add(o)));
                let bias = match ep.bias {
                    Some(b) => _mm512_maskz_loadu_ps(mask, b.as_ptr().add(o)),
                    None => _mm512_setzero_ps(),
                };
                let y = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), s, bias);
                _mm512_mask_storeu_ps(ep.out.add(r * w.oc + o), mask, y);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(len: usize, seed: u32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    /// The integer sums and results, from the definitions in the module doc,
    /// in f64: `sx·sw·Σ(q − zero)·w + b`.
    fn reference(
        x: &[f32],
        n: usize,
        w: &PackedInt8,
        q: &[i8],
        sw: &[f32],
        bias: &[f32],
    ) -> Vec<f64> {
        let (k, oc) = w.shape();
        let xq = QuantizedRows::quantize(x, n, k);
        let mut out = vec![0f64; n * oc];
        for r in 0..n {
            let (sx, zero) = xq.params(r);
            for o in 0..oc {
                let s: i64 = (0..k)
                    .map(|i| (xq.row(r)[i] as i64 - zero as i64) * q[o * k + i] as i64)
                    .sum();
                out[r * oc + o] = sx as f64 * sw[o] as f64 * s as f64 + bias[o] as f64;
            }
        }
        out
    }

    /// Row quantization: codes in range, the zero point represents 0
    /// exactly, every value within half a step of its code.
    #[test]
    fn rows_quantize_within_half_a_step() {
        let (n, k) = (5, 37);
        let mut x = data(n * k, 1);
        x[k..2 * k].iter_mut().for_each(|v| *v = v.abs() + 0.1); // all positive
        x[2 * k..3 * k].fill(0.0); // zero row
        x[3 * k + 4] = 0.0;
        let q = QuantizedRows::quantize(&x, n, k);
        assert_eq!(q.params(2), (0.0, 0));
        assert_eq!(q.params(1).1, 0, "no negatives: zero point 0");
        for r in 0..n {
            let (s, z) = q.params(r);
            assert!((0..=255).contains(&z));
            for i in 0..k {
                let back = s * (q.row(r)[i] as f32 - z as f32);
                assert!(
                    (back - x[r * k + i]).abs() <= s / 2.0 * 1.0001 + 1e-7,
                    "({r},{i})"
                );
            }
            assert!(q.row(r)[k..].iter().all(|&b| b == 0), "padding is zero");
        }
        assert_eq!(q.row(3)[4] as i32, q.params(3).1, "0 is the zero point");
    }

    /// Both kernels against the exact integer definition, with row tails
    /// (1..MR+ rows, several tasks), channel tails (OC not a multiple of 16,
    /// panel groups and single panels) and K not a multiple of 4; the VNNI
    /// kernel equals the portable one bit for bit.
    #[test]
    fn kernels_match_the_integer_definition() {
        let kernels: Vec<Int8Kernel> = [Int8Kernel::Avx512Vnni, Int8Kernel::Portable]
            .into_iter()
            .filter(|&k| k == Int8Kernel::Portable || has_avx512vnni())
            .collect();
        for &(n, k, oc) in &[
            (1, 8, 16),
            (3, 37, 21),
            (7, 64, 100),
            (53, 130, 83),
            (1, 768, 2304),
        ] {
            let wf = data(oc * k, 7);
            let mut q = vec![0i8; oc * k];
            let mut sw = vec![0f32; oc];
            quantize_int8_out_in(&mut q, &mut sw, &wf, k, oc, SourceLayout::OutIn, &|_| {});
            let x = data(n * k, 3);
            let bias = data(oc, 5);
            let mut results = Vec::new();
            for &kernel in &kernels {
                let w = PackedInt8::from_rows_with(&q, &sw, k, oc, kernel);
                let want = reference(&x, n, &w, &q, &sw, &bias);
                let mut got = vec![f32::NAN; n * oc];
                w.forward(&mut got, &x, Some(&bias), n);
                for (i, (&g, &e)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g as f64 - e).abs() <= 1e-5 * (1.0 + e.abs()),
                        "{kernel:?} {n}x{k}x{oc} at {i}: {g} vs {e}"
                    );
                }
                results.push(got);
            }
            for r in &results[1..] {
                assert!(r
                    .iter()
                    .zip(&results[0])
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
            }
        }
    }

    /// W8A8 against the f32 product: within a few quantization steps.
    #[test]
    fn int8_product_tracks_f32() {
        let (n, k, oc) = (9, 256, 48);
        let wf = data(oc * k, 11);
        let x = data(n * k, 13);
        let w = PackedInt8::quantize(&wf, k, oc, SourceLayout::OutIn);
        let mut got = vec![0f32; n * oc];
        w.forward(&mut got, &x, None, n);
        let mut max_err = 0f32;
        let mut max_val = 0f32;
        for r in 0..n {
            for o in 0..oc {
                let e: f32 = (0..k).map(|i| x[r * k + i] * wf[o * k + i]).sum();
                max_err = max_err.max((got[r * oc + o] - e).abs());
                max_val = max_val.max(e.abs());
            }
        }
        assert!(max_err <= 0.02 * max_val, "{max_err} vs {max_val}");
        assert!(max_err > 0.0, "the operands really are rounded");
    }

    /// A dequantized row is the row of the weight within half a step; an
    /// in-out source packs like its transpose.
    #[test]
    fn rows_dequantize_and_layouts_agree() {
        let (k, oc) = (13, 19);
        let wf = data(oc * k, 17);
        let a = PackedInt8::quantize(&wf, k, oc, SourceLayout::OutIn);
        let t: Vec<f32> = (0..k * oc).map(|i| wf[(i % oc) * k + i / oc]).collect();
        let b = PackedInt8::quantize(&t, k, oc, SourceLayout::InOut);
        assert_eq!(a.data, b.data);
        let mut row = vec![0f32; k];
        for o in 0..oc {
            a.row_into(o, &mut row);
            let step = a.scales[o];
            for i in 0..k {
                assert!((row[i] - wf[o * k + i]).abs() <= step / 2.0 + 1e-7);
            }
        }
    }

    /// The same results on one thread and on four.
    #[test]
    fn results_do_not_depend_on_threads() {
        let (n, k, oc) = (100, 96, 200);
        let w = PackedInt8::quantize(&data(oc * k, 19), k, oc, SourceLayout::OutIn);
        let x = data(n * k, 23);
        let run = |threads| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            let mut out = vec![0f32; n * oc];
            pool.install(|| w.forward(&mut out, &x, None, n));
            out
        };
        assert_eq!(run(1), run(4));
    }
}
