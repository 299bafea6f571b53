//! Matrix-vector kernels for decode: `out[N, OC] = x[N, IC] · W + bias` for a
//! handful of rows (batch-1 decode has N = 1).
//!
//! Shape legend: N rows of `x` (batch × new tokens, small), IC input
//! channels, OC output channels.
//!
//! Decode multiplies a few activation rows by every weight matrix once per
//! token, so it is bound by memory bandwidth, not arithmetic. Each kernel
//! streams every weight byte once per call, contiguously, and applies all N
//! rows of `x` to a weight tile while it is in cache. Work is split over
//! rayon into tiles whose size does not depend on the thread count, and every
//! output is reduced in a fixed order, so results are deterministic.
//!
//! Weight formats:
//! - f32 `[IC, OC]` ([`matvec_f32_in_out`]): GPT-2's Conv1D as stored.
//! - f32 `[OC, IC]` ([`matvec_f32_out_in`]): `nn.Linear` and the tied lm_head
//!   (`wte` is `[V, C]`).
//! - bf16 `[OC, IC]` ([`matvec_bf16`]): raw bf16 bits (see [`super::quant`]).
//!   With AVX-512 BF16 the dot products run on `vdpbf16ps`, with `x` split
//!   into a high and a low bf16 part so that only the weights are rounded.
//!
//! int8 weights run on [`super::int8_gemm`] at every batch size.
//!
//! Every kernel has a plain f64-accumulating twin in [`mod@reference`].

use rayon::prelude::*;

use crate::util::bf16::{bf16_to_f32, f32_to_bf16};
use crate::util::parallel::SendPtr;

/// Rows of an `[IC, OC]` weight handled by one task of [`matvec_f32_in_out`].
/// Fixed (not derived from the thread count) so that the reduction order,
/// hence the result, is the same on every run.
pub const IN_OUT_BLOCK: usize = 64;

/// Length of the `partials` buffer [`matvec_f32_in_out`] needs.
pub fn in_out_partials_len(n: usize, ic: usize, oc: usize) -> usize {
    ic.div_ceil(IN_OUT_BLOCK) * n * oc
}

/// Output rows per task for `[OC, IC]` weights: about 64 KiB of weights per
/// task (enough to amortise scheduling, small enough to stay in L2 while the
/// N rows of `x` are applied), in multiples of 4 rows.
fn rows_per_task(ic: usize, elem_bytes: usize) -> usize {
    let rows = (64 * 1024) / (ic * elem_bytes).max(1);
    (rows.max(4) / 4) * 4
}

fn check_shapes(
    out: &[f32],
    x: &[f32],
    w_len: usize,
    bias: Option<&[f32]>,
    n: usize,
    ic: usize,
    oc: usize,
) {
    assert_eq!(out.len(), n * oc, "matvec: out must be [N, OC]");
    assert_eq!(x.len(), n * ic, "matvec: x must be [N, IC]");
    assert_eq!(w_len, ic * oc, "matvec: weight must hold IC·OC elements");
    if let Some(b) = bias {
        assert_eq!(b.len(), oc, "matvec: bias must be [OC]");
    }
}

/// Runs `rows(dst, r0, k)` for every tile of output rows `[r0, r0 + dst.len())`
/// and every row `k` of `x`, in parallel over tiles; `dst` is the slice of
/// `out[k]` for that tile. The tile's weights stay in cache across `k`.
fn for_each_row_tile<F>(out: &mut [f32], n: usize, oc: usize, rows_per_task: usize, rows: F)
where
    F: Fn(&mut [f32], usize, usize) + Sync,
{
    let ptr = SendPtr(out.as_mut_ptr());
    let tasks = oc.div_ceil(rows_per_task);
    (0..tasks).into_par_iter().for_each(|t| {
        let r0 = t * rows_per_task;
        let len = rows_per_task.min(oc - r0);
        for k in 0..n {
            // SAFETY: `out` has n·oc elements (checked by the caller); this
            // task alone writes rows [r0, r0 + len) of output row k.
            let dst = unsafe { std::slice::from_raw_parts_mut(ptr.get().add(k * oc + r0), len) };
            rows(dst, r0, k);
        }
    });
}

fn add_bias(dst: &mut [f32], bias: Option<&[f32]>, r0: usize) {
    if let Some(b) = bias {
        let len = dst.len();
        for (d, b) in dst.iter_mut().zip(&b[r0..r0 + len]) {
            *d += b;
        }
    }
}

/// `out[N, OC] = x[N, IC] · w[IC, OC] + bias`, `w` in Conv1D (`InOut`) order.
///
/// Tasks take blocks of [`IN_OUT_BLOCK`] weight rows, so each streams one
/// contiguous region, and accumulate `x[k, i] · w[i, :]` into their own
/// partial output; the partials are then summed in block order.
/// `partials` must hold [`in_out_partials_len`] elements.
#[allow(clippy::too_many_arguments)]
pub fn matvec_f32_in_out(
    out: &mut [f32],
    partials: &mut [f32],
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    n: usize,
    ic: usize,
    oc: usize,
) {
    check_shapes(out, x, w.len(), bias, n, ic, oc);
    assert_eq!(
        partials.len(),
        in_out_partials_len(n, ic, oc),
        "matvec: partials length"
    );
    if n == 0 || oc == 0 {
        return;
    }
    // Checked once per product: the row loop below runs IC·N times.
    #[cfg(target_arch = "x86_64")]
    let simd = is_x86_feature_detected!("avx512f");
    #[cfg(not(target_arch = "x86_64"))]
    let simd = false;
    partials
        .par_chunks_mut(n * oc)
        .enumerate()
        .for_each(|(blk, part)| {
            part.fill(0.0);
            let i0 = blk * IN_OUT_BLOCK;
            let i1 = (i0 + IN_OUT_BLOCK).min(ic);
            for i in i0..i1 {
                let wrow = &w[i * oc..(i + 1) * oc];
                for k in 0..n {
                    axpy_row(&mut part[k * oc..(k + 1) * oc], x[k * ic + i], wrow, simd);
                }
            }
        });
    let nblk = ic.div_ceil(IN_OUT_BLOCK);
    let parts: &[f32] = partials;
    // out[k, o] = bias[o] + Σ_blk parts[blk][k, o], summed in block order;
    // a block at a time over contiguous slices, so the adds vectorise (one
    // element at a time, strided, this was ~5% of a decode step).
    out.par_chunks_mut(1024).enumerate().for_each(|(t, dst)| {
        let base = t * 1024;
        for (j, d) in dst.iter_mut().enumerate() {
            *d = bias.map_or(0.0, |b| b[(base + j) % oc]);
        }
        for blk in 0..nblk {
            let src = &parts[blk * n * oc + base..][..dst.len()];
            for (d, s) in dst.iter_mut().zip(src) {
                *d += s;
            }
        }
    });
}

/// `y[OC] += x · w[OC]`: one weight row, so a task reads its block of rows
/// as one sequential stream (four rows interleaved made four short streams
/// the prefetchers barely follow). The sums are the same either way: one
/// fused multiply-add per row, in row order. `simd`: avx512f was detected.
#[inline(always)]
fn axpy_row(y: &mut [f32], x: f32, w: &[f32], simd: bool) {
    #[cfg(target_arch = "x86_64")]
    if simd {
        // SAFETY: the caller detected avx512f at run time; lengths are checked inside.
        unsafe { x86::axpy_avx512(y, x, w) };
        return;
    }
    let _ = simd;
    for (yv, wv) in y.iter_mut().zip(w) {
        *yv += x * wv;
    }
}

/// `out[N, OC] = x[N, IC] · w[OC, IC]ᵀ + bias`, `w` in `nn.Linear` (`OutIn`) order.
pub fn matvec_f32_out_in(
    out: &mut [f32],
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    n: usize,
    ic: usize,
    oc: usize,
) {
    check_shapes(out, x, w.len(), bias, n, ic, oc);
    if n == 0 || oc == 0 {
        return;
    }
    for_each_row_tile(out, n, oc, rows_per_task(ic, 4), |dst, r0, k| {
        let xk = &x[k * ic..(k + 1) * ic];
        let wt = &w[r0 * ic..(r0 + dst.len()) * ic];
        dot_rows_f32(dst, xk, wt, ic);
        add_bias(dst, bias, r0);
    });
}

/// `dst[r] = w[r, :] · x` for every row of the tile `w` (`[dst.len(), IC]`).
fn dot_rows_f32(dst: &mut [f32], x: &[f32], w: &[f32], ic: usize) {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: avx512f was detected at run time; lengths are checked inside.
        unsafe { x86::dot_rows_f32_avx512(dst, x, w, ic) };
        return;
    }
    for (r, d) in dst.iter_mut().enumerate() {
        *d = dot_portable(&w[r * ic..(r + 1) * ic], x, |v| v);
    }
}

/// 16 independent lanes so that the compiler vectorises the loop without
/// reassociating (the order is fixed, so results are deterministic).
fn dot_portable<T: Copy>(w: &[T], x: &[f32], widen: impl Fn(T) -> f32) -> f32 {
    let mut acc = [0f32; 16];
    let wc = w.chunks_exact(16);
    let xc = x.chunks_exact(16);
    let (wr, xr) = (wc.remainder(), xc.remainder());
    for (wv, xv) in wc.zip(xc) {
        for l in 0..16 {
            acc[l] += widen(wv[l]) * xv[l];
        }
    }
    let mut s = acc.iter().sum::<f32>();
    for (&wv, &xv) in wr.iter().zip(xr) {
        s += widen(wv) * xv;
    }
    s
}

/// `out[N, OC] = x[N, IC] · w[OC, IC]ᵀ + bias` with bf16 weights (raw bits).
pub fn matvec_bf16(
    out: &mut [f32],
    x: &[f32],
    w: &[u16],
    bias: Option<&[f32]>,
    n: usize,
    ic: usize,
    oc: usize,
) {
    check_shapes(out, x, w.len(), bias, n, ic, oc);
    if n == 0 || oc == 0 {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16") {
        // x = hi + lo with both halves in bf16: hi·w + lo·w keeps ~16
        // significant bits of x, so only the weights carry bf16 rounding.
        let mut hi = vec![0u16; n * ic];
        let mut lo = vec![0u16; n * ic];
        for ((h, l), &v) in hi.iter_mut().zip(lo.iter_mut()).zip(x) {
            *h = f32_to_bf16(v);
            *l = f32_to_bf16(v - bf16_to_f32(*h));
        }
        for_each_row_tile(out, n, oc, rows_per_task(ic, 2), |dst, r0, k| {
            let (xh, xl) = (&hi[k * ic..(k + 1) * ic], &lo[k * ic..(k + 1) * ic]);
            let wt = &w[r0 * ic..(r0 + dst.len()) * ic];
            // SAFETY: avx512f and avx512bf16 were detected at run time.
            unsafe { x86::dot_rows_bf16_avx512(dst, xh, xl, wt, ic) };
            add_bias(dst, bias, r0);
        });
        return;
    }
    for_each_row_tile(out, n, oc, rows_per_task(ic, 2), |dst, r0, k| {
        let xk = &x[k * ic..(k + 1) * ic];
        for (j, d) in dst.iter_mut().enumerate() {
            let r = r0 + j;
            *d = dot_portable(&w[r * ic..(r + 1) * ic], xk, bf16_to_f32);
        }
        add_bias(dst, bias, r0);
    });
}

// AVX-512 intrinsics (and `avx512bf16` for vdpbf16ps) need Rust 1.89.
#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    use crate::kernels::simd::prefetch_ahead;

    /// `y += x·w`.
    ///
    /// # Safety
    /// The CPU must support avx512f.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn axpy_avx512(y: &mut [f32], x: f32, w: &[f32]) {
        assert_eq!(y.len(), w.len());
        let n = y.len();
        let xv = _mm512_set1_ps(x);
        let (wp, yp) = (w.as_ptr(), y.as_mut_ptr());
        let mut c = 0;
        // SAFETY (all pointer arithmetic below): c + 16 <= n elements of both.
        while c + 16 <= n {
            prefetch_ahead(wp.wrapping_add(c));
            let v = _mm512_fmadd_ps(xv, _mm512_loadu_ps(wp.add(c)), _mm512_loadu_ps(yp.add(c)));
            _mm512_storeu_ps(yp.add(c), v);
            c += 16;
        }
        for (yv, wv) in y[c..].iter_mut().zip(&w[c..]) {
            *yv = x.mul_add(*wv, *yv);
        }
    }

    /// Accumulators per row: independent FMA chains over the row's chunks.
    const CHAINS: usize = 4;

    /// `dst[r] = w[r, :] · x` for the rows of `w` (`[dst.len(), ic]`), one
    /// row after another, so the tile is read as one sequential stream.
    /// Interleaving four rows (one load of `x` for four FMAs) made four
    /// short streams (a GPT-2 row is 3 KiB) that the prefetchers barely
    /// follow: a 256 MiB read in that pattern ran at 40-50% of a
    /// sequential one on one core. `x` stays in L1 either way.
    ///
    /// # Safety
    /// The CPU must support avx512f.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn dot_rows_f32_avx512(dst: &mut [f32], x: &[f32], w: &[f32], ic: usize) {
        assert!(x.len() == ic && w.len() == dst.len() * ic);
        let main = ic / 16 * 16;
        let xp = x.as_ptr();
        for (r, d) in dst.iter_mut().enumerate() {
            let row = &w[r * ic..(r + 1) * ic];
            let wp = row.as_ptr();
            let mut acc = [_mm512_setzero_ps(); CHAINS];
            let mut j = 0;
            while j < main {
                // SAFETY: j + 16 <= ic elements of x and of the row.
                prefetch_ahead(wp.wrapping_add(j));
                let a = &mut acc[(j / 16) % CHAINS];
                *a = _mm512_fmadd_ps(_mm512_loadu_ps(wp.add(j)), _mm512_loadu_ps(xp.add(j)), *a);
                j += 16;
            }
            const _: () = assert!(CHAINS == 4, "the chains are added pairwise below");
            let sum = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
            let mut s = _mm512_reduce_add_ps(sum);
            for jj in main..ic {
                s += row[jj] * x[jj];
            }
            *d = s;
        }
    }

    /// bf16 rows times `x = xh + xl` (both bf16) with `vdpbf16ps`, one row
    /// after another (see [`dot_rows_f32_avx512`] for why).
    ///
    /// # Safety
    /// The CPU must support avx512f and avx512bf16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub unsafe fn dot_rows_bf16_avx512(
        dst: &mut [f32],
        xh: &[u16],
        xl: &[u16],
        w: &[u16],
        ic: usize,
    ) {
        assert!(xh.len() == ic && xl.len() == ic && w.len() == dst.len() * ic);
        let main = ic / 32 * 32;
        let load =
            |p: *const u16| -> __m512bh { std::mem::transmute(_mm512_loadu_si512(p as *const _)) };
        for (r, d) in dst.iter_mut().enumerate() {
            let row = &w[r * ic..(r + 1) * ic];
            let wp = row.as_ptr();
            let mut acc = [_mm512_setzero_ps(); CHAINS];
            let mut acl = [_mm512_setzero_ps(); CHAINS];
            let mut j = 0;
            while j < main {
                // SAFETY: j + 32 <= ic elements of u16 in xh, xl and the row.
                let c = (j / 32) % CHAINS;
                prefetch_ahead(wp.wrapping_add(j));
                let wv = load(wp.add(j));
                acc[c] = _mm512_dpbf16_ps(acc[c], wv, load(xh.as_ptr().add(j)));
                acl[c] = _mm512_dpbf16_ps(acl[c], wv, load(xl.as_ptr().add(j)));
                j += 32;
            }
            let mut sum = _mm512_setzero_ps();
            for c in 0..CHAINS {
                sum = _mm512_add_ps(sum, _mm512_add_ps(acc[c], acl[c]));
            }
            let mut s = _mm512_reduce_add_ps(sum);
            for jj in main..ic {
                let xv = super::bf16_to_f32(xh[jj]) + super::bf16_to_f32(xl[jj]);
                s += super::bf16_to_f32(row[jj]) * xv;
            }
            *d = s;
        }
    }
}

/// Plain twins of the kernels above (f64 accumulation), used by tests.
pub mod reference {
    use super::bf16_to_f32;

    fn finish(
        out: &mut [f32],
        n: usize,
        oc: usize,
        bias: Option<&[f32]>,
        mut f: impl FnMut(usize, usize) -> f64,
    ) {
        for k in 0..n {
            for o in 0..oc {
                out[k * oc + o] = (f(k, o) + bias.map_or(0.0, |b| b[o] as f64)) as f32;
            }
        }
    }

    /// See [`super::matvec_f32_in_out`].
    pub fn matvec_f32_in_out(
        out: &mut [f32],
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        n: usize,
        ic: usize,
        oc: usize,
    ) {
        finish(out, n, oc, bias, |k, o| {
            (0..ic)
                .map(|i| x[k * ic + i] as f64 * w[i * oc + o] as f64)
                .sum()
        });
    }

    /// See [`super::matvec_f32_out_in`].
    pub fn matvec_f32_out_in(
        out: &mut [f32],
        x: &[f32],
        w: &[f32],
        bias: Option<&[f32]>,
        n: usize,
        ic: usize,
        oc: usize,
    ) {
        finish(out, n, oc, bias, |k, o| {
            (0..ic)
                .map(|i| x[k * ic + i] as f64 * w[o * ic + i] as f64)
                .sum()
        });
    }

    /// See [`super::matvec_bf16`].
    pub fn matvec_bf16(
        out: &mut [f32],
        x: &[f32],
        w: &[u16],
        bias: Option<&[f32]>,
        n: usize,
        ic: usize,
        oc: usize,
    ) {
        finish(out, n, oc, bias, |k, o| {
            (0..ic)
                .map(|i| x[k * ic + i] as f64 * bf16_to_f32(w[o * ic + i]) as f64)
                .sum()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::quant::{to_bf16_out_in, SourceLayout};

    /// Deterministic pseudo-random values in [-1, 1).
    fn values(len: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    /// |fast - reference| ≤ tol · (Σ|x·w| + 1) per output, with the scale
    /// computed from the same data so the bound is tight but fair.
    fn assert_close(fast: &[f32], reference: &[f32], scale: &[f32], tol: f32) {
        for (i, ((a, b), s)) in fast.iter().zip(reference).zip(scale).enumerate() {
            assert!(
                (a - b).abs() <= tol * (s + 1.0),
                "output {i}: fast {a} vs reference {b} (scale {s})"
            );
        }
    }

    /// Σ_i |x[k,i]·w[i,o]| for the tolerance of each output.
    fn abs_scale(x: &[f32], w_out_in: &[f32], n: usize, ic: usize, oc: usize) -> Vec<f32> {
        let xa: Vec<f32> = x.iter().map(|v| v.abs()).collect();
        let wa: Vec<f32> = w_out_in.iter().map(|v| v.abs()).collect();
        let mut s = vec![0.0; n * oc];
        reference::matvec_f32_out_in(&mut s, &xa, &wa, None, n, ic, oc);
        s
    }

    fn transpose(w: &[f32], rows: usize, cols: usize) -> Vec<f32> {
        let mut t = vec![0.0; w.len()];
        for r in 0..rows {
            for c in 0..cols {
                t[c * rows + r] = w[r * cols + c];
            }
        }
        t
    }

    // Shapes cover tails in both dimensions (not multiples of 4/16/32/64),
    // several tasks, and N > 1.
    const SHAPES: [(usize, usize, usize); 6] = [
        (1, 768, 2304),
        (3, 100, 37),
        (1, 33, 5),
        (2, 130, 300),
        (5, 64, 1),
        // Output chunks of `matvec_f32_in_out`'s reduction (1024) end inside rows.
        (3, 90, 700),
    ];

    #[test]
    fn f32_in_out_matches_reference() {
        for (s, &(n, ic, oc)) in SHAPES.iter().enumerate() {
            let x = values(n * ic, s as u64 + 1);
            let w = values(ic * oc, s as u64 + 100);
            let b = values(oc, s as u64 + 200);
            let mut fast = vec![f32::NAN; n * oc];
            let mut partials = vec![f32::NAN; in_out_partials_len(n, ic, oc)];
            matvec_f32_in_out(&mut fast, &mut partials, &x, &w, Some(&b), n, ic, oc);
            let mut want = vec![0.0; n * oc];
            reference::matvec_f32_in_out(&mut want, &x, &w, Some(&b), n, ic, oc);
            assert_close(
                &fast,
                &want,
                &abs_scale(&x, &transpose(&w, ic, oc), n, ic, oc),
                1e-6,
            );
        }
    }

    #[test]
    fn f32_in_out_is_deterministic_across_thread_counts() {
        let (n, ic, oc) = (2, 700, 300);
        let x = values(n * ic, 7);
        let w = values(ic * oc, 8);
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("thread pool");
            let mut out = vec![0.0; n * oc];
            let mut partials = vec![0.0; in_out_partials_len(n, ic, oc)];
            pool.install(|| matvec_f32_in_out(&mut out, &mut partials, &x, &w, None, n, ic, oc));
            out
        };
        let one = run(1);
        assert_eq!(one, run(2));
        assert_eq!(one, run(3));
    }

    #[test]
    fn f32_out_in_matches_reference() {
        for (s, &(n, ic, oc)) in SHAPES.iter().enumerate() {
            let x = values(n * ic, s as u64 + 1);
            let w = values(ic * oc, s as u64 + 100);
            let mut fast = vec![f32::NAN; n * oc];
            matvec_f32_out_in(&mut fast, &x, &w, None, n, ic, oc);
            let mut want = vec![0.0; n * oc];
            reference::matvec_f32_out_in(&mut want, &x, &w, None, n, ic, oc);
            assert_close(&fast, &want, &abs_scale(&x, &w, n, ic, oc), 1e-6);
        }
    }

    #[test]
    fn bf16_matches_reference() {
        for (s, &(n, ic, oc)) in SHAPES.iter().enumerate() {
            let x = values(n * ic, s as u64 + 1);
            let w = values(ic * oc, s as u64 + 100);
            let b = values(oc, s as u64 + 300);
            let mut wb = vec![0u16; ic * oc];
            to_bf16_out_in(&mut wb, &w, ic, oc, SourceLayout::OutIn, &|_| {});
            let mut fast = vec![f32::NAN; n * oc];
            matvec_bf16(&mut fast, &x, &wb, Some(&b), n, ic, oc);
            let mut want = vec![0.0; n * oc];
            reference::matvec_bf16(&mut want, &x, &wb, Some(&b), n, ic, oc);
            // x is split into two bf16 halves on AVX-512 BF16 (relative error
            // about 2^-17 per element), exact f32 otherwise.
            assert_close(&fast, &want, &abs_scale(&x, &w, n, ic, oc), 2e-5);
        }
    }
}
