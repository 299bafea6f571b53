//! Residual connections and simple element-wise buffer updates.

use super::activation::{par_chunks_each, par_zip3};
use super::simd::dispatch;
use rayon::prelude::*;

/// `out = a + b` (residual forward).
pub fn residual_forward(out: &mut [f32], a: &[f32], b: &[f32]) {
    assert_eq!(
        out.len(),
        a.len(),
        "residual_forward: out and a lengths differ"
    );
    assert_eq!(
        out.len(),
        b.len(),
        "residual_forward: out and b lengths differ"
    );
    par_zip3(out, a, b, |o, a, b| {
        dispatch(
            #[inline(always)]
            || {
                for ((o, a), b) in o.iter_mut().zip(a).zip(b) {
                    *o = *a + *b;
                }
            },
        )
    });
}

/// `acc += x` (residual backward, gradient accumulation).
pub fn add_inplace(acc: &mut [f32], x: &[f32]) {
    assert_eq!(acc.len(), x.len(), "add_inplace: lengths differ");
    par_zip3(acc, x, x, |a, x, _| {
        dispatch(
            #[inline(always)]
            || {
                for (a, x) in a.iter_mut().zip(x) {
                    *a += *x;
                }
            },
        )
    });
}

/// `out[r] += bias` for every row `r` of `out` (`[N, bias.len()]`), rows in
/// parallel.
pub fn add_bias_rows(out: &mut [f32], bias: &[f32]) {
    let oc = bias.len();
    assert!(
        out.len().is_multiple_of(oc),
        "add_bias_rows: out is not rows of the bias"
    );
    if oc == 0 {
        return;
    }
    out.par_chunks_mut(oc).for_each(|row| {
        dispatch(
            #[inline(always)]
            || {
                for (o, b) in row.iter_mut().zip(bias) {
                    *o += b;
                }
            },
        )
    });
}

/// `buf = 0` on the rayon pool: a gradient buffer of a step's parameters is
/// tens of MB, more than one core's stores fill at the memory's rate.
pub fn zero_fill(buf: &mut [f32]) {
    par_chunks_each(buf, |b| b.fill(0.0));
}

/// `buf *= s` (gradient clipping, loss scaling).
pub fn scale_inplace(buf: &mut [f32], s: f32) {
    par_chunks_each(buf, |b| {
        dispatch(
            #[inline(always)]
            || {
                for v in b.iter_mut() {
                    *v *= s;
                }
            },
        )
    });
}
