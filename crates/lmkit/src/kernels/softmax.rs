//! Row softmax and softmax + cross-entropy (with an ignore index), including
//! the fused training path that turns logits into their gradient in place.
//!
//! Shape legend: N rows (B·T), V vocabulary (classes).

use super::rows_per_task;
use super::simd::{self, dispatch, LANES};
use crate::util::bf16::f32_to_bf16;
use rayon::prelude::*;

/// Runs `f(first_row, rows_of_a, rows_of_b)` over row chunks of two buffers
/// with `v` columns and one `[N]` buffer, in parallel.
fn par_rows(
    a: &mut [f32],
    losses: &mut [f32],
    v: usize,
    f: impl Fn(usize, &mut [f32], &mut [f32]) + Sync,
) {
    let rpt = rows_per_task(v);
    a.par_chunks_mut(rpt * v)
        .zip(losses.par_chunks_mut(rpt))
        .enumerate()
        .for_each(|(ti, (a, l))| f(ti * rpt, a, l));
}

/// x ← exp(x − max) in place; returns Σ exp(x − max).
#[inline(always)]
fn exp_shift_sum(row: &mut [f32], max: f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let mut chunks = row.chunks_exact_mut(LANES);
    for ch in &mut chunks {
        for l in 0..LANES {
            let e = simd::exp(ch[l] - max);
            ch[l] = e;
            acc[l] += e;
        }
    }
    let mut tail = 0.0f32;
    for x in chunks.into_remainder() {
        let e = simd::exp(*x - max);
        *x = e;
        tail += e;
    }
    simd::hsum(&acc) + tail
}

/// Σ exp(x − max) without writing.
#[inline(always)]
fn exp_sum(row: &[f32], max: f32) -> f32 {
    let mut acc = [0.0f32; LANES];
    let chunks = row.chunks_exact(LANES);
    let mut tail = 0.0f32;
    for x in chunks.remainder() {
        tail += simd::exp(*x - max);
    }
    for ch in chunks {
        for l in 0..LANES {
            acc[l] += simd::exp(ch[l] - max);
        }
    }
    simd::hsum(&acc) + tail
}

// One-pass softmax statistics. A row is cut into chunks small enough to stay
// in L1 between taking their max and their exponentials, so the row is read
// from memory once while the exps are computed (instead of a memory-bound
// max pass followed by a compute-bound exp pass). Chunk j keeps its own max
// m_j; the row max M and sum S = Σ_j s_j·e^(m_j − M) are combined afterwards.

/// Most chunks per row (bounds the per-row stack arrays).
const MAX_CHUNKS: usize = 128;

/// Chunk width for a row of `v`: at least 1024 floats, at most MAX_CHUNKS chunks.
fn chunk_len(v: usize) -> usize {
    v.div_ceil(MAX_CHUNKS).max(1024).next_multiple_of(LANES)
}

/// (M, S) such that softmax(row) = exp(row − M)/S, reading the row once.
#[inline(always)]
fn row_stats(row: &[f32], cl: usize) -> (f32, f32) {
    let (mut m, mut s) = (f32::NEG_INFINITY, 0.0f32);
    for ch in row.chunks(cl) {
        let mj = simd::max(ch);
        if mj == f32::NEG_INFINITY {
            continue; // every entry is −∞: contributes nothing
        }
        let sj = exp_sum(ch, mj);
        if mj > m {
            s = simd::fma(s, simd::exp(m - mj), sj);
            m = mj;
        } else {
            s = simd::fma(sj, simd::exp(mj - m), s);
        }
    }
    (m, s)
}

/// Overwrites `row` with exp(row − m_j) per chunk j, filling `maxes[j]` and
/// returning (M, S) as [`row_stats`]. [`scale_chunks`] finishes the softmax.
#[inline(always)]
fn exp_chunks_in_place(row: &mut [f32], cl: usize, maxes: &mut [f32; MAX_CHUNKS]) -> (f32, f32) {
    let mut sums = [0.0f32; MAX_CHUNKS];
    let mut m = f32::NEG_INFINITY;
    for (j, ch) in row.chunks_mut(cl).enumerate() {
        let mj = simd::max(ch);
        maxes[j] = mj;
        if mj == f32::NEG_INFINITY {
            ch.fill(0.0);
            continue;
        }
        sums[j] = exp_shift_sum(ch, mj);
        m = m.max(mj);
    }
    combine(row.len().div_ceil(cl), maxes, &sums, m)
}

/// [`exp_chunks_in_place`] reading `src` and writing `dst` (no copy first).
#[inline(always)]
fn exp_chunks_into(
    dst: &mut [f32],
    src: &[f32],
    cl: usize,
    maxes: &mut [f32; MAX_CHUNKS],
) -> (f32, f32) {
    let mut sums = [0.0f32; MAX_CHUNKS];
    let mut m = f32::NEG_INFINITY;
    for (j, (d, x)) in dst.chunks_mut(cl).zip(src.chunks(cl)).enumerate() {
        let mj = simd::max(x);
        maxes[j] = mj;
        if mj == f32::NEG_INFINITY {
            d.fill(0.0);
            continue;
        }
        let mut acc = [0.0f32; LANES];
        let mut dc = d.chunks_exact_mut(LANES);
        let xc = x.chunks_exact(LANES);
        let xr = xc.remainder();
        for (dv, xv) in (&mut dc).zip(xc) {
            for l in 0..LANES {
                let e = simd::exp(xv[l] - mj);
                dv[l] = e;
                acc[l] += e;
            }
        }
        let mut tail = 0.0f32;
        for (dv, xv) in dc.into_remainder().iter_mut().zip(xr) {
            let e = simd::exp(*xv - mj);
            *dv = e;
            tail += e;
        }
        sums[j] = simd::hsum(&acc) + tail;
        m = m.max(mj);
    }
    combine(src.len().div_ceil(cl), maxes, &sums, m)
}

/// (M, S) from per-chunk maxima and sums: S = Σ_j s_j·e^(m_j − M).
#[inline(always)]
fn combine(
    chunks: usize,
    maxes: &[f32; MAX_CHUNKS],
    sums: &[f32; MAX_CHUNKS],
    m: f32,
) -> (f32, f32) {
    let mut s = 0.0f32;
    for j in 0..chunks {
        if maxes[j] != f32::NEG_INFINITY {
            s = simd::fma(sums[j], simd::exp(maxes[j] - m), s);
        }
    }
    (m, s)
}

/// After [`exp_chunks_in_place`]: row ← row·k·e^(m_j − M), i.e. k·softmax·S.
#[inline(always)]
fn scale_chunks(row: &mut [f32], cl: usize, maxes: &[f32; MAX_CHUNKS], m: f32, k: f32) {
    for (j, ch) in row.chunks_mut(cl).enumerate() {
        let f = k * simd::exp(maxes[j] - m);
        for x in ch.iter_mut() {
            *x *= f;
        }
    }
}

fn target_index(t: i32, v: usize) -> usize {
    debug_assert!(
        t >= 0 && (t as usize) < v,
        "target {t} out of range for {v} classes"
    );
    t as usize
}

/// Row softmax (probabilities) for inference. `out` may not alias `inp`.
pub fn softmax_rows(out: &mut [f32], inp: &[f32], n: usize, v: usize) {
    assert_eq!(out.len(), n * v, "softmax_rows: out must be [N,V]");
    assert_eq!(inp.len(), n * v, "softmax_rows: inp must be [N,V]");
    if v == 0 {
        return;
    }
    let rpt = rows_per_task(v);
    let cl = chunk_len(v);
    out.par_chunks_mut(rpt * v)
        .zip(inp.par_chunks(rpt * v))
        .for_each(|(o, x)| {
            dispatch(
                #[inline(always)]
                || {
                    let mut maxes = [0.0f32; MAX_CHUNKS];
                    for (orow, xrow) in o.chunks_exact_mut(v).zip(x.chunks_exact(v)) {
                        let (m, s) = exp_chunks_into(orow, xrow, cl, &mut maxes);
                        scale_chunks(orow, cl, &maxes, m, 1.0 / s);
                    }
                },
            )
        });
}

/// Sums losses in row order in f64 and counts non-ignored rows.
pub(super) fn total(losses: &[f32], targets: &[i32], ignore_index: i32) -> (f64, usize) {
    let mut sum = 0.0f64;
    let mut count = 0usize;
    for (l, t) in losses.iter().zip(targets) {
        if *t != ignore_index {
            sum += *l as f64;
            count += 1;
        }
    }
    (sum, count)
}

/// `losses[i] = −log softmax(logits[i])[targets[i]]`, 0 where
/// `targets[i] == ignore_index`. Returns (Σ losses in f64, non-ignored rows).
pub fn cross_entropy_forward(
    losses: &mut [f32],
    logits: &[f32],
    targets: &[i32],
    n: usize,
    v: usize,
    ignore_index: i32,
) -> (f64, usize) {
    assert_eq!(losses.len(), n, "cross_entropy_forward: losses must be [N]");
    assert_eq!(
        logits.len(),
        n * v,
        "cross_entropy_forward: logits must be [N,V]"
    );
    assert_eq!(
        targets.len(),
        n,
        "cross_entropy_forward: targets must be [N]"
    );
    if v > 0 {
        let rpt = rows_per_task(v);
        let cl = chunk_len(v);
        losses
            .par_chunks_mut(rpt)
            .zip(logits.par_chunks(rpt * v))
            .enumerate()
            .for_each(|(ti, (l, x))| {
                dispatch(
                    #[inline(always)]
                    || {
                        for (r, (loss, row)) in l.iter_mut().zip(x.chunks_exact(v)).enumerate() {
                            let t = targets[ti * rpt + r];
                            if t == ignore_index {
                                *loss = 0.0;
                                continue;
                            }
                            let (m, s) = row_stats(row, cl);
                            *loss = s.ln() - (row[target_index(t, v)] - m);
                        }
                    },
                )
            });
    } else {
        losses.fill(0.0);
    }
    total(losses, targets, ignore_index)
}

/// `dlogits[i] += scale·(softmax(logits[i]) − onehot(targets[i]))` for
/// non-ignored rows.
pub fn cross_entropy_backward(
    dlogits: &mut [f32],
    logits: &[f32],
    targets: &[i32],
    n: usize,
    v: usize,
    ignore_index: i32,
    scale: f32,
) {
    assert_eq!(
        dlogits.len(),
        n * v,
        "cross_entropy_backward: dlogits must be [N,V]"
    );
    assert_eq!(
        logits.len(),
        n * v,
        "cross_entropy_backward: logits must be [N,V]"
    );
    assert_eq!(
        targets.len(),
        n,
        "cross_entropy_backward: targets must be [N]"
    );
    if v == 0 {
        return;
    }
    let rpt = rows_per_task(v);
    let cl = chunk_len(v);
    dlogits
        .par_chunks_mut(rpt * v)
        .zip(logits.par_chunks(rpt * v))
        .enumerate()
        .for_each(|(ti, (d, x))| {
            dispatch(
                #[inline(always)]
                || {
                    for (r, (drow, row)) in d.chunks_exact_mut(v).zip(x.chunks_exact(v)).enumerate()
                    {
                        let t = targets[ti * rpt + r];
                        if t == ignore_index {
                            continue;
                        }
                        let (m, s) = row_stats(row, cl);
                        let k = scale / s;
                        for (dv, xv) in drow.iter_mut().zip(row) {
                            *dv += k * simd::exp(*xv - m);
                        }
                        drow[target_index(t, v)] -= scale;
                    }
                },
            )
        });
}

/// One scored row of the fused path: overwrites the logits with
/// `scale·(softmax − onehot(ti))` and returns the row's loss.
#[inline(always)]
fn dlogits_row(
    row: &mut [f32],
    ti: usize,
    cl: usize,
    maxes: &mut [f32; MAX_CHUNKS],
    scale: f32,
) -> f32 {
    let (loss, m, k) = exp_row_loss(row, ti, cl, maxes, scale);
    scale_chunks(row, cl, maxes, m, k);
    row[ti] -= scale;
    loss
}

/// The row's exponentials in place per chunk ([`exp_chunks_in_place`]) and
/// its loss against class `ti`: (loss, M, scale/S), the factor that with
/// each chunk's `exp(m_j − M)` makes `scale·softmax`.
#[inline(always)]
fn exp_row_loss(
    row: &mut [f32],
    ti: usize,
    cl: usize,
    maxes: &mut [f32; MAX_CHUNKS],
    scale: f32,
) -> (f32, f32, f32) {
    let xt = row[ti];
    let (m, s) = exp_chunks_in_place(row, cl, maxes);
    (s.ln() - (xt - m), m, scale / s)
}

/// [`dlogits_row`] with the dlogits written to `out` in bf16 as they are
/// scaled (one pass over the row fewer than scaling in place and then
/// converting): the same f32 values, rounded as [`f32_to_bf16`].
#[inline(always)]
fn dlogits_row_bf16(
    row: &mut [f32],
    out: &mut [u16],
    ti: usize,
    cl: usize,
    maxes: &mut [f32; MAX_CHUNKS],
    scale: f32,
) -> f32 {
    let (loss, m, k) = exp_row_loss(row, ti, cl, maxes, scale);
    for (j, (ch, o)) in row.chunks(cl).zip(out.chunks_mut(cl)).enumerate() {
        let f = k * simd::exp(maxes[j] - m);
        for (o, &x) in o.iter_mut().zip(ch) {
            *o = f32_to_bf16(x * f);
        }
    }
    let f = k * simd::exp(maxes[ti / cl] - m);
    out[ti] = f32_to_bf16(row[ti] * f - scale);
    loss
}

/// [`cross_entropy_fused`] with the dlogits written in bf16 (round to
/// nearest even) to rows of `out` (row i at `out[i·ld..][..v]`; the rest of
/// each row is left as it is) rather than over the logits, which are
/// scratch: each value is the f32 that [`cross_entropy_fused`] writes,
/// rounded as [`f32_to_bf16`], so a bf16 product sees the same operand
/// either way.
#[allow(clippy::too_many_arguments)]
pub(crate) fn cross_entropy_fused_bf16(
    logits: &mut [f32],
    out: &mut [u16],
    ld: usize,
    losses: &mut [f32],
    targets: &[i32],
    [n, v]: [usize; 2],
    ignore_index: i32,
    scale: f32,
) -> (f64, usize) {
    assert_eq!(
        logits.len(),
        n * v,
        "cross_entropy_fused_bf16: logits must be [N,V]"
    );
    assert!(
        ld >= v && out.len() >= n * ld,
        "cross_entropy_fused_bf16: out must be N rows of ld ≥ V"
    );
    assert_eq!(
        losses.len(),
        n,
        "cross_entropy_fused_bf16: losses must be [N]"
    );
    assert_eq!(
        targets.len(),
        n,
        "cross_entropy_fused_bf16: targets must be [N]"
    );
    if v == 0 {
        losses.fill(0.0);
        return total(losses, targets, ignore_index);
    }
    let cl = chunk_len(v);
    let rpt = rows_per_task(v);
    logits
        .par_chunks_mut(rpt * v)
        .zip(losses.par_chunks_mut(rpt))
        .zip(out[..n * ld].par_chunks_mut(rpt * ld))
        .enumerate()
        .for_each(|(ti, ((x, l), o))| {
            dispatch(
                #[inline(always)]
                || {
                    let mut maxes = [0.0f32; MAX_CHUNKS];
                    let rows = x
                        .chunks_exact_mut(v)
                        .zip(l.iter_mut())
                        .zip(o.chunks_mut(ld));
                    for (r, ((row, loss), orow)) in rows.enumerate() {
                        let t = targets[ti * rpt + r];
                        let orow = &mut orow[..v];
                        if t == ignore_index {
                            orow.fill(0);
                            *loss = 0.0;
                            continue;
                        }
                        *loss =
                            dlogits_row_bf16(row, orow, target_index(t, v), cl, &mut maxes, scale);
                    }
                },
            )
        });
    total(losses, targets, ignore_index)
}

/// Fused training path: computes the losses (as [`cross_entropy_forward`])
/// and OVERWRITES the logits with `scale·(p − onehot)`; ignored rows become 0.
/// Saves a second `[N,V]` buffer and a pass over it.
pub fn cross_entropy_fused(
    logits_to_dlogits: &mut [f32],
    losses: &mut [f32],
    targets: &[i32],
    n: usize,
    v: usize,
    ignore_index: i32,
    scale: f32,
) -> (f64, usize) {
    assert_eq!(
        logits_to_dlogits.len(),
        n * v,
        "cross_entropy_fused: logits must be [N,V]"
    );
    assert_eq!(losses.len(), n, "cross_entropy_fused: losses must be [N]");
    assert_eq!(targets.len(), n, "cross_entropy_fused: targets must be [N]");
    if v == 0 {
        losses.fill(0.0);
        return total(losses, targets, ignore_index);
    }
    let cl = chunk_len(v);
    par_rows(logits_to_dlogits, losses, v, |row0, x, l| {
        dispatch(
            #[inline(always)]
            || {
                let mut maxes = [0.0f32; MAX_CHUNKS];
                for (r, (row, loss)) in x.chunks_exact_mut(v).zip(l.iter_mut()).enumerate() {
                    let t = targets[row0 + r];
                    if t == ignore_index {
                        row.fill(0.0);
                        *loss = 0.0;
                        continue;
                    }
                    *loss = dlogits_row(row, target_index(t, v), cl, &mut maxes, scale);
                }
            },
        )
    });
    total(losses, targets, ignore_index)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bf16 dlogits are [`cross_entropy_fused`]'s f32 rounded to
    /// nearest even, element for element (ignored rows zero), the losses
    /// the same bits, and nothing past each row's V is written.
    #[test]
    fn fused_bf16_rounds_the_fused_f32() {
        for &(n, v) in &[(3, 5), (9, 1000), (40, 3001)] {
            let logits: Vec<f32> = (0..n * v)
                .map(|i| (((i * 7919) % 1013) as f32 - 500.0) / 97.0)
                .collect();
            let targets: Vec<i32> = (0..n)
                .map(|i| {
                    if i % 4 == 3 {
                        -100
                    } else {
                        ((i * 31) % v) as i32
                    }
                })
                .collect();
            let ld = v + 3;
            let (mut f, mut fl) = (logits.clone(), vec![0.0; n]);
            let fs = cross_entropy_fused(&mut f, &mut fl, &targets, n, v, -100, 0.25);
            let (mut scratch, mut bl) = (logits.clone(), vec![0.0; n]);
            let mut out = vec![0xABCDu16; n * ld];
            let bs = cross_entropy_fused_bf16(
                &mut scratch,
                &mut out,
                ld,
                &mut bl,
                &targets,
                [n, v],
                -100,
                0.25,
            );
            assert_eq!(fs, bs, "{n}x{v} totals");
            let bits = |x: &[f32]| x.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&fl), bits(&bl), "{n}x{v} losses");
            for i in 0..n {
                let want: Vec<u16> = f[i * v..(i + 1) * v]
                    .iter()
                    .map(|&x| f32_to_bf16(x))
                    .collect();
                assert_eq!(&out[i * ld..i * ld + v], &want[..], "{n}x{v} row {i}");
                assert!(
                    out[i * ld + v..(i + 1) * ld].iter().all(|&x| x == 0xABCD),
                    "past V"
                );
            }
        }
    }
}
