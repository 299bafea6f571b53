//! LayerNorm over the last dimension, forward and backward (biased variance,
//! as `torch.nn.LayerNorm`).
//!
//! Shape legend: N rows (B·T), C channels.

use super::simd::{self, dispatch, fma, LANES};
use super::{rows_per_task, with_scratch};
use rayon::prelude::*;

/// Rows whose weight/bias gradients are summed together before the final
/// reduction. Fixed (not tied to the thread count), so the reduction order
/// never changes.
const GRAD_BLOCK_ROWS: usize = 32;

/// `out = (inp − mean)·rstd·weight + bias` per row; saves `mean[N]` and
/// `rstd[N]` (= 1/√(var + eps)) for the backward pass.
#[allow(clippy::too_many_arguments)]
pub fn layernorm_forward(
    out: &mut [f32],
    mean: &mut [f32],
    rstd: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: &[f32],
    n: usize,
    c: usize,
    eps: f32,
) {
    assert_eq!(out.len(), n * c, "layernorm_forward: out must be [N,C]");
    assert_eq!(inp.len(), n * c, "layernorm_forward: inp must be [N,C]");
    assert_eq!(mean.len(), n, "layernorm_forward: mean must be [N]");
    assert_eq!(rstd.len(), n, "layernorm_forward: rstd must be [N]");
    assert_eq!(weight.len(), c, "layernorm_forward: weight must be [C]");
    assert_eq!(bias.len(), c, "layernorm_forward: bias must be [C]");
    if n == 0 || c == 0 {
        mean.fill(0.0);
        rstd.fill(0.0);
        return;
    }
    let rpt = rows_per_task(c);
    out.par_chunks_mut(rpt * c)
        .zip(inp.par_chunks(rpt * c))
        .zip(mean.par_chunks_mut(rpt).zip(rstd.par_chunks_mut(rpt)))
        .for_each(|((o, x), (mu, rs))| {
            dispatch(
                #[inline(always)]
                || {
                    for (((orow, xrow), m), r) in o
                        .chunks_exact_mut(c)
                        .zip(x.chunks_exact(c))
                        .zip(mu.iter_mut())
                        .zip(rs.iter_mut())
                    {
                        let (mm, rr) = forward_row(orow, xrow, weight, bias, eps);
                        *m = mm;
                        *r = rr;
                    }
                },
            )
        });
}

/// `out = (inp − mean)·rstd·weight + bias` per row from the statistics
/// [`layernorm_forward`] saved: its output again, bit for bit (backward
/// recomputes it rather than keep it).
#[allow(clippy::too_many_arguments)]
pub fn layernorm_apply(
    out: &mut [f32],
    inp: &[f32],
    mean: &[f32],
    rstd: &[f32],
    weight: &[f32],
    bias: &[f32],
    n: usize,
    c: usize,
) {
    assert_eq!(out.len(), n * c, "layernorm_apply: out must be [N,C]");
    assert_eq!(inp.len(), n * c, "layernorm_apply: inp must be [N,C]");
    assert_eq!(mean.len(), n, "layernorm_apply: mean must be [N]");
    assert_eq!(rstd.len(), n, "layernorm_apply: rstd must be [N]");
    assert_eq!(weight.len(), c, "layernorm_apply: weight must be [C]");
    assert_eq!(bias.len(), c, "layernorm_apply: bias must be [C]");
    if n == 0 || c == 0 {
        return;
    }
    let rpt = rows_per_task(c);
    out.par_chunks_mut(rpt * c)
        .zip(inp.par_chunks(rpt * c))
        .zip(mean.par_chunks(rpt).zip(rstd.par_chunks(rpt)))
        .for_each(|((o, x), (mu, rs))| {
            dispatch(
                #[inline(always)]
                || {
                    for (((orow, xrow), &m), &r) in
                        o.chunks_exact_mut(c).zip(x.chunks_exact(c)).zip(mu).zip(rs)
                    {
                        apply_row(orow, xrow, weight, bias, m, r);
                    }
                },
            )
        });
}

/// The normalized row from its statistics; shared by forward and
/// [`layernorm_apply`] so both compute the same floats.
#[inline(always)]
fn apply_row(out: &mut [f32], x: &[f32], w: &[f32], b: &[f32], m: f32, rs: f32) {
    for (((o, xv), wv), bv) in out.iter_mut().zip(x).zip(w).zip(b) {
        *o = fma((*xv - m) * rs, *wv, *bv);
    }
}

#[inline(always)]
fn forward_row(out: &mut [f32], x: &[f32], w: &[f32], b: &[f32], eps: f32) -> (f32, f32) {
    let c = x.len();
    let m = simd::sum(x) / c as f32;
    let mut acc = [0.0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let mut tail = 0.0f32;
    for v in chunks.remainder() {
        let d = *v - m;
        tail = fma(d, d, tail);
    }
    for ch in chunks {
        for l in 0..LANES {
            let d = ch[l] - m;
            acc[l] = fma(d, d, acc[l]);
        }
    }
    let var = (simd::hsum(&acc) + tail) / c as f32;
    let rs = 1.0 / (var + eps).sqrt();
    apply_row(out, x, w, b, m, rs);
    (m, rs)
}

/// `dinp += ∂L/∂inp`, `dweight += Σ_rows dout·x̂`, `dbias += Σ_rows dout`,
/// where x̂ = (inp − mean)·rstd from the forward pass.
#[allow(clippy::too_many_arguments, clippy::type_complexity)]
pub fn layernorm_backward(
    dinp: &mut [f32],
    dweight: &mut [f32],
    dbias: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    mean: &[f32],
    rstd: &[f32],
    n: usize,
    c: usize,
) {
    assert_eq!(dinp.len(), n * c, "layernorm_backward: dinp must be [N,C]");
    assert_eq!(dout.len(), n * c, "layernorm_backward: dout must be [N,C]");
    assert_eq!(inp.len(), n * c, "layernorm_backward: inp must be [N,C]");
    assert_eq!(mean.len(), n, "layernorm_backward: mean must be [N]");
    assert_eq!(rstd.len(), n, "layernorm_backward: rstd must be [N]");
    assert_eq!(weight.len(), c, "layernorm_backward: weight must be [C]");
    assert_eq!(dweight.len(), c, "layernorm_backward: dweight must be [C]");
    assert_eq!(dbias.len(), c, "layernorm_backward: dbias must be [C]");
    if n == 0 || c == 0 {
        return;
    }
    let blocks = n.div_ceil(GRAD_BLOCK_ROWS);
    // Scratch: per row block, partial dweight then partial dbias.
    with_scratch(blocks * 2 * c, |partials| {
        let br = GRAD_BLOCK_ROWS;
        let run = |((dx, (dy, x)), (part, (mu, rs))): (
            (&mut [f32], (&[f32], &[f32])),
            (&mut [f32], (&[f32], &[f32])),
        )| {
            let (pw, pb) = part.split_at_mut(c);
            pw.fill(0.0);
            pb.fill(0.0);
            dispatch(
                #[inline(always)]
                || {
                    for i in 0..mu.len() {
                        let r = i * c..(i + 1) * c;
                        backward_row(
                            &mut dx[r.clone()],
                            pw,
                            pb,
                            &dy[r.clone()],
                            &x[r],
                            weight,
                            mu[i],
                            rs[i],
                        );
                    }
                },
            )
        };
        let rows = dinp
            .par_chunks_mut(br * c)
            .zip(dout.par_chunks(br * c).zip(inp.par_chunks(br * c)))
            .zip(
                partials
                    .par_chunks_mut(2 * c)
                    .zip(mean.par_chunks(br).zip(rstd.par_chunks(br))),
            );
        if n * c >= 1 << 14 {
            rows.for_each(run);
        } else {
            rows.with_min_len(usize::MAX).for_each(run);
        }
        // Sum the block partials in block order, columns in parallel.
        let partials = &*partials;
        let sum_cols = |off: usize, acc: &mut [f32], c0: usize| {
            for blk in 0..blocks {
                let p = &partials[blk * 2 * c + off + c0..blk * 2 * c + off + c0 + acc.len()];
                for (a, v) in acc.iter_mut().zip(p) {
                    *a += *v;
                }
            }
        };
        const COLS: usize = 256;
        dweight
            .par_chunks_mut(COLS)
            .enumerate()
            .for_each(|(ci, acc)| sum_cols(0, acc, ci * COLS));
        dbias
            .par_chunks_mut(COLS)
            .enumerate()
            .for_each(|(ci, acc)| sum_cols(c, acc, ci * COLS));
    });
}

#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn backward_row(
    dx: &mut [f32],
    dw: &mut [f32],
    db: &mut [f32],
    dy: &[f32],
    x: &[f32],
    w: &[f32],
    mean: f32,
    rstd: f32,
) {
    let c = x.len();
    // Row reductions: Σ dnorm and Σ dnorm·x̂ with dnorm = dy·w.
    let mut a1 = [0.0f32; LANES];
    let mut a2 = [0.0f32; LANES];
    let (mut t1, mut t2) = (0.0f32, 0.0f32);
    let full = c / LANES * LANES;
    for j0 in (0..full).step_by(LANES) {
        let (yc, xc, wc) = (&dy[j0..j0 + LANES], &x[j0..j0 + LANES], &w[j0..j0 + LANES]);
        for l in 0..LANES {
            let xh = (xc[l] - mean) * rstd;
            let dn = yc[l] * wc[l];
            a1[l] += dn;
            a2[l] = fma(dn, xh, a2[l]);
        }
    }
    for j in full..c {
        let xh = (x[j] - mean) * rstd;
        let dn = dy[j] * w[j];
        t1 += dn;
        t2 = fma(dn, xh, t2);
    }
    let m1 = (simd::hsum(&a1) + t1) / c as f32;
    let m2 = (simd::hsum(&a2) + t2) / c as f32;
    for j in 0..c {
        let xh = (x[j] - mean) * rstd;
        let g = dy[j];
        db[j] += g;
        dw[j] = fma(g, xh, dw[j]);
        let dn = g * w[j];
        dx[j] += (dn - m1 - xh * m2) * rstd;
    }
}
