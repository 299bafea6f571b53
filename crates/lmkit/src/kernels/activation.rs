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
                // 0.5·x·(1 + tanh u) = x·sigmoid(2u): one exp, one divide.
                for (o, &x) in o.iter_mut().zip(x) {
                    let u = SQRT_2_OVER_PI * fma(GELU_K * x, x * x, x);
                    *o = x / (1.0 + simd::exp(-2.0 * u));
                }
            },
        ),
        Gelu::Erf => dispatch(
            #[inline(always)]
            || {
                for (o, &x) in o.iter_mut().zip(x) {
                    *o = 0.5 * x * (1.0 + simd::erf(x * FRAC_1_SQRT_2));
                }
            },
        ),
    });
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
