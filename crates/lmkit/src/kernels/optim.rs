//! AdamW (PyTorch semantics) and the global gradient norm.

use super::simd::{dispatch, fma, LANES};
use rayon::prelude::*;
use std::ops::Range;

/// AdamW hyper-parameters (as `torch.optim.AdamW`).
#[derive(Clone, Copy, Debug)]
pub struct AdamW {
    pub lr: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
}

/// The f64 of the shortest decimal that rounds to `x`: the number the user
/// wrote (0.95, not 0.949999988…). PyTorch forms `1 − β2`, `lr·wd` and the
/// bias corrections from Python's f64 hyper-parameters; doing the same keeps
/// the update bit-compatible with it.
fn decimal(x: f32) -> f64 {
    x.to_string().parse().unwrap_or(x as f64)
}

/// Elements per AdamW task.
const ADAM_CHUNK: usize = 1 << 13;

/// One `torch.optim.AdamW` step (`step` is 1-based, counted after this
/// update). For each span `(range, decay)` of the flat buffers: decoupled
/// decay `p *= 1 − lr·wd` when `decay`, then
/// `m = lerp(m, g, 1−β1)`, `v = β2·v + (1−β2)·g²`,
/// `p −= lr/(1−β1^step) · m / (√v/√(1−β2^step) + eps)`.
/// Scalars are formed in f64 as Python does, tensor math in f32. Spans must
/// cover `0..params.len()` in order without gaps.
pub fn adamw_update(
    params: &mut [f32],
    grads: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    step: u64,
    cfg: &AdamW,
    decay: &[(Range<usize>, bool)],
) {
    adamw_update_scaled(params, grads, 1.0, m, v, step, cfg, decay, None)
}

/// `after(range, new values)` of [`UpdateHook`].
pub type AfterChunk<'a> = dyn Fn(Range<usize>, &[f32]) + Sync + 'a;

/// What the optimizer does besides the update, part by part: after each
/// chunk of the buffer is updated, `after(range, new values)` runs on the
/// thread that updated it while the values are in its cache (the model
/// packs them into its bf16 copies).
pub struct UpdateHook<'a> {
    /// AdamW's tasks: contiguous from 0, together the whole buffer.
    pub chunks: Vec<Range<usize>>,
    pub after: Box<AfterChunk<'a>>,
}

/// [`adamw_update`] with the gradient `grad_scale · g` (f32 product), the
/// same bits as scaling `grads` in place first (`clip_grad_norm_`'s
/// `g.mul_(coef)`) without that extra pass over the buffer; `grads` is
/// left as it was. With a `hook`, over its chunks, calling its `after` on
/// each: the same bits again (the update is element-wise).
#[allow(clippy::too_many_arguments)]
pub fn adamw_update_scaled(
    params: &mut [f32],
    grads: &[f32],
    grad_scale: f32,
    m: &mut [f32],
    v: &mut [f32],
    step: u64,
    cfg: &AdamW,
    decay: &[(Range<usize>, bool)],
    hook: Option<&UpdateHook<'_>>,
) {
    let plan;
    let (chunks, after) = match hook {
        Some(h) => (&h.chunks, Some(&*h.after)),
        None => {
            plan = chunk_plan(params.len(), &[]);
            (&plan, None)
        }
    };
    adamw_run(
        params,
        grads,
        grad_scale,
        (m, v),
        step,
        cfg,
        decay,
        chunks,
        after,
    )
}

/// Chunks of `0..len` for AdamW's tasks: each of `aligned`'s `(range,
/// unit)` (ranges in order, disjoint) cut into whole multiples of `unit`
/// elements (the last piece what remains), the rest into pieces of 8192.
pub fn chunk_plan(len: usize, aligned: &[(Range<usize>, usize)]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut cut = |r: Range<usize>, step: usize| {
        let mut at = r.start;
        while at < r.end {
            let end = (at + step).min(r.end);
            out.push(at..end);
            at = end;
        }
    };
    let mut at = 0;
    for (r, unit) in aligned {
        assert!(
            r.start >= at && r.end <= len,
            "chunk_plan: ranges out of order"
        );
        cut(at..r.start, ADAM_CHUNK);
        let unit = (*unit).max(1);
        cut(r.clone(), (ADAM_CHUNK / unit).max(1) * unit);
        at = r.end;
    }
    cut(at..len, ADAM_CHUNK);
    out
}

/// The update of [`adamw_update`] over `chunks` in parallel, each chunk's
/// elements in the decay spans they fall in, then `after` on the chunk.
#[allow(clippy::too_many_arguments)]
fn adamw_run(
    params: &mut [f32],
    grads: &[f32],
    grad_scale: f32,
    (m, v): (&mut [f32], &mut [f32]),
    step: u64,
    cfg: &AdamW,
    decay: &[(Range<usize>, bool)],
    chunks: &[Range<usize>],
    after: Option<&AfterChunk<'_>>,
) {
    let len = params.len();
    assert_eq!(
        grads.len(),
        len,
        "adamw_update: grads length differs from params"
    );
    assert_eq!(m.len(), len, "adamw_update: m length differs from params");
    assert_eq!(v.len(), len, "adamw_update: v length differs from params");
    assert!(step >= 1, "adamw_update: step is 1-based");
    check_cover(decay.iter().map(|(r, _)| r), len, "decay spans");
    check_cover(chunks.iter(), len, "chunks");

    let (lr, beta1, beta2) = (decimal(cfg.lr), decimal(cfg.beta1), decimal(cfg.beta2));
    let exponent = step.min(i32::MAX as u64) as i32;
    let step_size = (lr / (1.0 - beta1.powi(exponent))) as f32;
    let bc2_sqrt = (1.0 - beta2.powi(exponent)).sqrt() as f32;
    let w1 = (1.0 - beta1) as f32;
    let b2 = cfg.beta2;
    let w2 = (1.0 - beta2) as f32;
    let eps = cfg.eps;
    let decay_mul = (1.0 - lr * decimal(cfg.weight_decay)) as f32;

    let body = |p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], dmul: f32| {
        dispatch(
            #[inline(always)]
            || {
                for (((p, g), m), v) in p.iter_mut().zip(g).zip(m.iter_mut()).zip(v.iter_mut()) {
                    let g = *g * grad_scale;
                    // The FMAs are where PyTorch's CPU kernels have them
                    // (lerp, addcmul, addcdiv): results match it bit for bit.
                    let mm = if w1 < 0.5 {
                        fma(w1, g - *m, *m)
                    } else {
                        fma(-(g - *m), 1.0 - w1, g)
                    };
                    let vv = fma(w2 * g, g, *v * b2);
                    *m = mm;
                    *v = vv;
                    let denom = vv.sqrt() / bc2_sqrt + eps;
                    *p = fma(-step_size, mm / denom, *p * dmul);
                }
            },
        )
    };
    // The buffers cut at the chunks' ends, for the parallel tasks.
    let mut tasks = Vec::with_capacity(chunks.len());
    let (mut p, mut m, mut v) = (params, m, v);
    for r in chunks {
        let n = r.end - r.start;
        let (pc, pr) = std::mem::take(&mut p).split_at_mut(n);
        let (mc, mr) = std::mem::take(&mut m).split_at_mut(n);
        let (vc, vr) = std::mem::take(&mut v).split_at_mut(n);
        (p, m, v) = (pr, mr, vr);
        tasks.push((r.clone(), pc, mc, vc));
    }
    tasks.into_par_iter().for_each(|(r, p, m, v)| {
        // The decay spans this chunk meets, from the one holding its start.
        let first = decay.partition_point(|(s, _)| s.end <= r.start);
        for (s, apply) in &decay[first..] {
            if s.start >= r.end {
                break;
            }
            let (a, b) = (s.start.max(r.start), s.end.min(r.end));
            let (lo, hi) = (a - r.start, b - r.start);
            let dmul = if *apply { decay_mul } else { 1.0 };
            body(
                &mut p[lo..hi],
                &grads[a..b],
                &mut m[lo..hi],
                &mut v[lo..hi],
                dmul,
            );
        }
        if let Some(after) = after {
            after(r, p);
        }
    });
}

/// Asserts `ranges` cover `0..len` in order without gaps.
fn check_cover<'a>(ranges: impl Iterator<Item = &'a Range<usize>>, len: usize, what: &str) {
    let mut next = 0;
    for r in ranges {
        assert_eq!(
            r.start, next,
            "adamw_update: {what} must be contiguous from 0"
        );
        assert!(r.end >= r.start, "adamw_update: empty or reversed span");
        next = r.end;
    }
    assert_eq!(next, len, "adamw_update: {what} must cover the buffer");
}

/// Elements per partial sum of [`global_norm`]. Fixed, so the reduction
/// order (and the result) is the same for any thread count.
const NORM_CHUNK: usize = 1 << 14;

/// `sqrt(Σ g²)`: f32 lane sums within fixed chunks, f64 across chunks in
/// order: identical for any thread count.
pub fn global_norm(grads: &[f32]) -> f32 {
    sum_squares(grads).sqrt() as f32
}

/// `Σ g²` as [`global_norm`] sums it (data-parallel training adds the sums
/// of the ranks' blocks).
pub fn sum_squares(grads: &[f32]) -> f64 {
    let partial = |ch: &[f32]| -> f64 {
        dispatch(
            #[inline(always)]
            || {
                let mut acc = [0.0f32; LANES];
                let chunks = ch.chunks_exact(LANES);
                let mut tail = 0.0f64;
                for x in chunks.remainder() {
                    tail += (*x as f64) * (*x as f64);
                }
                for c in chunks {
                    for l in 0..LANES {
                        acc[l] = c[l].mul_add(c[l], acc[l]);
                    }
                }
                acc.iter().map(|&a| a as f64).sum::<f64>() + tail
            },
        )
    };
    let partials: Vec<f64> = if grads.len() <= NORM_CHUNK {
        vec![partial(grads)]
    } else {
        grads.par_chunks(NORM_CHUNK).map(partial).collect()
    };
    partials.iter().sum::<f64>()
}
