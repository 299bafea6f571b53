//! Row softmax and softmax + cross-entropy (with an ignore index), including
//! the fused training path that turns logits into their gradient in place.
//!
//! Shape legend: N rows (B·T), V vocabulary (classes).

use super::rows_per_task;
use super::simd::{self, dispatch, LANES};
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
    out.par_chunks_mut(rpt * v)
        .zip(inp.par_chunks(rpt * v))
        .for_each(|(o, x)| {
            dispatch(
                #[inline(always)]
                || {
                    for (orow, xrow) in o.chunks_exact_mut(v).zip(x.chunks_exact(v)) {
                        let m = simd::max(xrow);
                        orow.copy_from_slice(xrow);
                        let s = exp_shift_sum(orow, m);
                        let inv = 1.0 / s;
                        for p in orow.iter_mut() {
                            *p *= inv;
                        }
                    }
                },
            )
        });
}

/// Sums losses in row order in f64 and counts non-ignored rows.
fn total(losses: &[f32], targets: &[i32], ignore_index: i32) -> (f64, usize) {
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
                            let m = simd::max(row);
                            let s = exp_sum(row, m);
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
                        let m = simd::max(row);
                        let k = scale / exp_sum(row, m);
                        for (dv, xv) in drow.iter_mut().zip(row) {
                            *dv += k * simd::exp(*xv - m);
                        }
                        drow[target_index(t, v)] -= scale;
                    }
                },
            )
        });
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
    par_rows(logits_to_dlogits, losses, v, |row0, x, l| {
        dispatch(
            #[inline(always)]
            || {
                for (r, (row, loss)) in x.chunks_exact_mut(v).zip(l.iter_mut()).enumerate() {
                    let t = targets[row0 + r];
                    if t == ignore_index {
                        row.fill(0.0);
                        *loss = 0.0;
                        continue;
                    }
                    let ti = target_index(t, v);
                    let m = simd::max(row);
                    let xt = row[ti];
                    let s = exp_shift_sum(row, m);
                    *loss = s.ln() - (xt - m);
                    let k = scale / s;
                    for p in row.iter_mut() {
                        *p *= k;
                    }
                    row[ti] -= scale;
                }
            },
        )
    });
    total(losses, targets, ignore_index)
}
