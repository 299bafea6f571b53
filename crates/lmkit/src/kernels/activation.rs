//! Element-wise activations: GELU (tanh approximation and exact erf) and tanh
//! (BERT pooler), forward and backward.

use super::simd::{self, dispatch, fma};
use super::ELEMS_PER_TASK;
use rayon::prelude::*;

/// Which GELU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gelu {
    /// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`: HF `gelu_new` /
    /// `gelu_pytorch_tanh` (GPT-2).
    Tanh,
    /// `0.5·x·(1 + erf(x/√2))`: HF `gelu` (BERT).
    Erf,
}

const SQRT_2_OVER_PI: f32 = 0.797_884_6;
const GELU_K: f32 = 0.044_715;
const FRAC_1_SQRT_2: f32 = std::f32::consts::FRAC_1_SQRT_2;
/// 1/√(2π)
const INV_SQRT_2PI: f32 = 0.398_942_3;

/// Runs `f` over matching chunks of an output and up to two inputs, in
/// parallel when there is enough work.
pub(crate) fn par_zip3(
    out: &mut [f32],
    a: &[f32],
    b: &[f32],
    f: impl Fn(&mut [f32], &[f32], &[f32]) + Sync,
) {
    if out.len() <= ELEMS_PER_TASK {
        f(out, a, b);
    } else {
        out.par_chunks_mut(ELEMS_PER_TASK)
            .zip(
                a.par_chunks(ELEMS_PER_TASK)
                    .zip(b.par_chunks(ELEMS_PER_TASK)),
            )
            .for_each(|(o, (x, y))| f(o, x, y));
    }
}

/// `out = gelu(inp)`.
pub fn gelu_forward(out: &mut [f32], inp: &[f32], kind: Gelu) {
    assert_eq!(
        out.len(),
        inp.len(),
        "gelu_forward: out and inp lengths differ"
    );
    par_zip3(out, inp, inp, |o, x, _| match kind {
        Gelu::Tanh => dispatch(
            #[inline(always)]
            || {
                for (o, &x) in o.iter_mut().zip(x) {
                    *o = gelu_tanh(x);
                }
            },
        ),
        Gelu::Erf => dispatch(
            #[inline(always)]
            || {
                for (o, &x) in o.iter_mut().zip(x) {
                    *o = gelu_erf(x);
                }
            },
        ),
    });
}

/// Runs `f` over chunks of `buf` in place, in parallel when there is
/// enough work.
pub(crate) fn par_chunks_each(buf: &mut [f32], f: impl Fn(&mut [f32]) + Sync) {
    if buf.len() <= ELEMS_PER_TASK {
        f(buf);
    } else {
        buf.par_chunks_mut(ELEMS_PER_TASK).for_each(&f);
    }
}

/// `xs = gelu(xs)` in place: [`gelu_forward`] without a second buffer.
pub fn gelu_in_place(xs: &mut [f32], kind: Gelu) {
    par_chunks_each(xs, |x| {
        let cols = x.len();
        // SAFETY: one row of `cols` floats, this task's own.
        unsafe { gelu_tile(x.as_mut_ptr(), cols, 1, cols, kind) }
    });
}

/// `rows[r][..cols] = gelu(rows[r][..cols])` for `rows` rows `ld` floats
/// apart, on this thread: [`gelu_forward`]'s arithmetic (the same bits), for
/// a product's epilogue on a tile it has just written.
///
/// # Safety
/// The `rows` × `cols` elements at `at + r·ld + j` must be valid for reads
/// and writes, and no other thread may touch them meanwhile.
pub(crate) unsafe fn gelu_tile(at: *mut f32, ld: usize, rows: usize, cols: usize, kind: Gelu) {
    // SAFETY: the caller's promise, row by row.
    let row = |r: usize| unsafe { std::slice::from_raw_parts_mut(at.add(r * ld), cols) };
    match kind {
        Gelu::Tanh => dispatch(
            #[inline(always)]
            || {
                for r in 0..rows {
                    for x in row(r).iter_mut() {
                        *x = gelu_tanh(*x);
                    }
                }
            },
        ),
        Gelu::Erf => dispatch(
            #[inline(always)]
            || {
                for r in 0..rows {
                    for x in row(r).iter_mut() {
                        *x = gelu_erf(*x);
                    }
                }
            },
        ),
    }
}

/// GPT-2's GELU: 0.5·x·(1 + tanh u) = x·sigmoid(2u): one exp, one divide.
#[inline(always)]
fn gelu_tanh(x: f32) -> f32 {
    let u = SQRT_2_OVER_PI * fma(GELU_K * x, x * x, x);
    x / (1.0 + simd::exp(-2.0 * u))
}

/// BERT's GELU, with erf.
#[inline(always)]
fn gelu_erf(x: f32) -> f32 {
    0.5 * x * (1.0 + simd::erf(x * FRAC_1_SQRT_2))
}

/// `grad ← gelu'(inp)·grad`: the output gradient in, the input gradient out,
/// in place (the one kernel that neither accumulates nor needs a second
/// buffer: a GPT-2 layer at batch 4×256, d 384 saves zeroing and writing
/// 6 MB).
pub fn gelu_backward(grad: &mut [f32], inp: &[f32], kind: Gelu) {
    assert_eq!(
        grad.len(),
        inp.len(),
        "gelu_backward: grad and inp lengths differ"
    );
    par_zip3(grad, inp, inp, |d, x, _| match kind {
        Gelu::Tanh => dispatch(
            #[inline(always)]
            || {
                // With e = exp(−2u), s = sigmoid(2u) = 1/(1 + e):
                // 0.5(1 + tanh u) = s and 0.5(1 − tanh²u) = 2s(1 − s) = 2s·e·s
                // (e·s avoids the cancellation in 1 − s).
                for (d, &x) in d.iter_mut().zip(x) {
                    let x2 = x * x;
                    let u = SQRT_2_OVER_PI * fma(GELU_K * x, x2, x);
                    let e = simd::exp(-2.0 * u);
                    let s = 1.0 / (1.0 + e);
                    let du = SQRT_2_OVER_PI * fma(3.0 * GELU_K, x2, 1.0);
                    let grad = fma(2.0 * x * s * (e * s), du, s);
                    *d *= grad;
                }
            },
        ),
        Gelu::Erf => dispatch(
            #[inline(always)]
            || {
                for (d, &x) in d.iter_mut().zip(x) {
                    let cdf = 0.5 * (1.0 + simd::erf(x * FRAC_1_SQRT_2));
                    let pdf = INV_SQRT_2PI * simd::exp(-0.5 * x * x);
                    *d *= fma(x, pdf, cdf);
                }
            },
        ),
    });
}

/// `out = tanh(inp)` (the BERT pooler; small, so it uses the exact libm tanh).
pub fn tanh_forward(out: &mut [f32], inp: &[f32]) {
    assert_eq!(
        out.len(),
        inp.len(),
        "tanh_forward: out and inp lengths differ"
    );
    par_zip3(out, inp, inp, |o, x, _| {
        for (o, x) in o.iter_mut().zip(x) {
            *o = x.tanh();
        }
    });
}

/// `dinp += (1 − out²)·dout`, from the forward output.
pub fn tanh_backward(dinp: &mut [f32], out: &[f32], dout: &[f32]) {
    assert_eq!(
        dinp.len(),
        out.len(),
        "tanh_backward: dinp and out lengths differ"
    );
    assert_eq!(
        dout.len(),
        out.len(),
        "tanh_backward: dout and out lengths differ"
    );
    par_zip3(dinp, out, dout, |d, y, g| {
        dispatch(
            #[inline(always)]
            || {
                for ((d, &y), &g) in d.iter_mut().zip(y).zip(g) {
                    *d = fma(fma(-y, y, 1.0), g, *d);
                }
            },
        )
    });
}
