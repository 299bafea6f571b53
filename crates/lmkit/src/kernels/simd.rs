//! Runtime CPU dispatch, vectorizable scalar math and the weight-stream
//! prefetch used by the fast kernels.
//!
//! The crate is built for baseline x86-64 (SSE2), so hot loops are compiled
//! again with AVX2+FMA and with AVX-512 enabled and the widest the CPU has is
//! picked at run time. Bodies are `#[inline(always)]` so they are re-optimised
//! (and auto-vectorised) under the caller's target features. Reductions use
//! explicit lane arrays, so every path performs the same operations in the
//! same order: results do not depend on which instruction set was chosen
//! (`paths_agree_bit_for_bit` checks it).

/// Lanes of the explicit accumulators in reductions (two AVX2 registers, one
/// AVX-512 register).
pub(crate) const LANES: usize = 16;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::sync::OnceLock;

    pub(super) fn has_avx2_fma() -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }

    pub(super) fn has_avx512() -> bool {
        static HAS: OnceLock<bool> = OnceLock::new();
        *HAS.get_or_init(|| {
            has_avx2_fma()
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512dq")
        })
    }

    #[target_feature(enable = "avx2,avx,fma,bmi1,bmi2")]
    pub(super) unsafe fn v3<R>(f: impl FnOnce() -> R) -> R {
        f()
    }

    #[target_feature(enable = "avx512f,avx512vl,avx512bw,avx512dq,avx2,avx,fma,bmi1,bmi2")]
    pub(super) unsafe fn v4<R>(f: impl FnOnce() -> R) -> R {
        f()
    }
}

/// Bytes ahead of a weight stream's current load that the decode kernels
/// prefetch into L1, one prefetch per 64-byte load. The hardware
/// prefetchers alone left bandwidth unused: on an Intel Xeon (Emerald
/// Rapids), GPT-2 124M f32 decode on 2 threads went 42.7 → 47.0 tokens/s
/// (2 KiB ahead: 46.8, 1 KiB: 44.3). On an AMD EPYC (Zen 5) an earlier
/// trial of the same made no difference.
#[cfg(target_arch = "x86_64")]
const PREFETCH_AHEAD: usize = 4096;

/// Prefetches the cache line [`PREFETCH_AHEAD`] bytes after `p` (the decode
/// kernels' weight streams). A hint: the address may lie past the end of the
/// data (it is never read).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn prefetch_ahead<T>(p: *const T) {
    use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
    // SAFETY: _mm_prefetch has no memory effects and does not fault on any
    // address; SSE is part of x86-64's baseline.
    unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>().wrapping_add(PREFETCH_AHEAD)) }
}

/// Runs `f` compiled for AVX-512 (F, VL, BW, DQ) or else AVX2+FMA when this
/// CPU has them (baseline x86-64 otherwise). Pass an `#[inline(always)]`
/// closure that calls `#[inline(always)]` bodies. AVX-512 doubles the
/// compute-bound loops (exp in softmax, GELU, the LM head's loss) where the
/// core has full-width units (Zen 5, Intel); Zen 4 runs 512-bit ops in two
/// halves, as fast as AVX2.
#[inline(always)]
pub(crate) fn dispatch<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        if x86::has_avx512() {
            // SAFETY: the features were detected on this CPU.
            return unsafe { x86::v4(f) };
        }
        if x86::has_avx2_fma() {
            // SAFETY: the features were detected on this CPU.
            return unsafe { x86::v3(f) };
        }
    }
    f()
}

/// `a·b + c`, a single FMA instruction on the dispatched paths.
#[inline(always)]
pub(crate) fn fma(a: f32, b: f32, c: f32) -> f32 {
    a.mul_add(b, c)
}

/// e^x within 2e-7 relative error (degree-5 minimax polynomial after range
/// reduction by ln 2), branch-free so loops vectorize. Exactly 0 below the
/// smallest normal result; saturates at e^88.37 ≈ 2.4e38; NaN stays NaN.
#[inline(always)]
pub(crate) fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const LO: f32 = -87.33;
    const HI: f32 = 88.37;
    // 1.5·2^23: adding it rounds to an integer, which then sits in the low
    // mantissa bits. Reading it from there avoids a float→int conversion
    // (Rust's saturating `as` does not vectorize).
    const MAGIC: f32 = 12_582_912.0;
    // Below LO the result is selected away, so only the top needs a clamp.
    let xc = if x > HI { HI } else { x };
    let t = fma(xc, LOG2E, MAGIC);
    let n = t - MAGIC;
    let ni = (t.to_bits() as i32).wrapping_sub(MAGIC.to_bits() as i32);
    let r = fma(n, -LN2_LO, fma(n, -LN2_HI, xc));
    // e^r ≈ 1 + r + r²·(c2 + c3·r + c4·r² + c5·r³) on |r| ≤ ln2/2.
    let mut p = 8.312_733e-3_f32;
    p = fma(p, r, 4.189_048_3e-2);
    p = fma(p, r, 0.166_671_13);
    p = fma(p, r, 0.499_992_28);
    let e = fma(p, r * r, r) + 1.0;
    let scale = f32::from_bits((ni.wrapping_add(127) << 23) as u32);
    if x < LO {
        0.0
    } else {
        e * scale
    }
}

/// erf(x) as Eigen's `generic_fast_erf_float`: a rational function x·P(x²)/Q(x²)
/// on x clamped to [−4, 4] (erf is ±1 in f32 beyond). Under 5e-7 absolute
/// error; no exp, one divide.
#[inline(always)]
pub(crate) fn erf(x: f32) -> f32 {
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let mut p = -2.726_142_3e-10_f32;
    p = fma(p, x2, 2.770_681_4e-8);
    p = fma(p, x2, -2.101_024e-6);
    p = fma(p, x2, -5.692_506_4e-5);
    p = fma(p, x2, -7.349_906_3e-4);
    p = fma(p, x2, -2.954_6e-3);
    p = fma(p, x2, -1.609_603_3e-2);
    let mut q = -1.456_607_2e-5_f32;
    q = fma(q, x2, -2.133_740_6e-4);
    q = fma(q, x2, -1.682_827e-3);
    q = fma(q, x2, -7.373_329e-3);
    q = fma(q, x2, -1.426_474e-2);
    x * p / q
}

/// Σ a[i]·b[i] with 16 lane accumulators (fixed order on every path).
#[inline(always)]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    debug_assert_eq!(a.len(), b.len());
    let mut acc = [0.0f32; LANES];
    let (ac, ar) = (a.chunks_exact(LANES), a.chunks_exact(LANES).remainder());
    let (bc, br) = (b.chunks_exact(LANES), b.chunks_exact(LANES).remainder());
    for (x, y) in ac.zip(bc) {
        for l in 0..LANES {
            acc[l] = fma(x[l], y[l], acc[l]);
        }
    }
    let mut tail = 0.0f32;
    for (x, y) in ar.iter().zip(br) {
        tail = fma(*x, *y, tail);
    }
    hsum(&acc) + tail
}

/// Σ a[i] with 16 lane accumulators.
#[inline(always)]
pub(crate) fn sum(a: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let chunks = a.chunks_exact(LANES);
    let rem = chunks.remainder();
    for x in chunks {
        for l in 0..LANES {
            acc[l] += x[l];
        }
    }
    let mut tail = 0.0f32;
    for x in rem {
        tail += *x;
    }
    hsum(&acc) + tail
}

/// max a[i] (−∞ for an empty slice; NaN passed over). A comparison rather
/// than `f32::max`: it is one `maxps` (`f32::max` also checks its other
/// operand for NaN, and the loop stayed scalar).
#[inline(always)]
pub(crate) fn max(a: &[f32]) -> f32 {
    extreme(a, f32::NEG_INFINITY, |x, m| x > m)
}

/// `a[i] ← f(a[i])`, returning the max of the new values as [`max`] would
/// (−∞ for an empty slice; NaN passed over), in the same pass.
#[inline(always)]
pub(crate) fn map_max(a: &mut [f32], f: impl Fn(f32) -> f32) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let mut chunks = a.chunks_exact_mut(LANES);
    for ch in &mut chunks {
        for l in 0..LANES {
            let x = f(ch[l]);
            ch[l] = x;
            acc[l] = if x > acc[l] { x } else { acc[l] };
        }
    }
    let mut m = f32::NEG_INFINITY;
    for x in chunks.into_remainder() {
        *x = f(*x);
        m = if *x > m { *x } else { m };
    }
    for &v in &acc {
        m = if v > m { v } else { m };
    }
    m
}

/// min a[i] (+∞ for an empty slice; NaN passed over).
#[inline(always)]
pub(crate) fn min(a: &[f32]) -> f32 {
    extreme(a, f32::INFINITY, |x, m| x < m)
}

/// The element of `a` (or `init`) that `better` prefers over all others.
#[inline(always)]
fn extreme(a: &[f32], init: f32, better: impl Fn(f32, f32) -> bool) -> f32 {
    let mut acc = [init; LANES];
    let chunks = a.chunks_exact(LANES);
    let rem = chunks.remainder();
    for x in chunks {
        for l in 0..LANES {
            acc[l] = if better(x[l], acc[l]) { x[l] } else { acc[l] };
        }
    }
    let mut m = init;
    for &v in acc.iter().chain(rem) {
        m = if better(v, m) { v } else { m };
    }
    m
}

/// Pairwise sum of the 16 lanes (a fixed tree).
#[inline(always)]
pub(crate) fn hsum(acc: &[f32; LANES]) -> f32 {
    let mut h = [0.0f32; 8];
    for l in 0..8 {
        h[l] = acc[l] + acc[l + 8];
    }
    let q = [h[0] + h[4], h[1] + h[5], h[2] + h[6], h[3] + h[7]];
    (q[0] + q[2]) + (q[1] + q[3])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::reference::erf_f64;

    /// exp, erf, a lane reduction and FMAs over many values, as the kernels
    /// write them.
    #[inline(always)]
    fn body(xs: &[f32]) -> (Vec<u32>, u32) {
        let mut acc = [0.0f32; LANES];
        let mut out = Vec::with_capacity(xs.len());
        for ch in xs.chunks_exact(LANES) {
            for l in 0..LANES {
                let e = exp(ch[l]) + erf(ch[l] * 0.25);
                acc[l] = fma(e, ch[l], acc[l]);
                out.push(e.to_bits());
            }
        }
        let m = max(xs);
        let mut ys = xs.to_vec();
        let mm = map_max(&mut ys, |x| x * 0.125);
        assert_eq!(mm, max(&ys), "map_max is max of the mapped values");
        out.extend(ys.iter().map(|y| y.to_bits()));
        (out, (hsum(&acc) + m + mm).to_bits())
    }

    /// Every dispatch path computes the same bits: baseline, AVX2 and
    /// AVX-512 where this CPU has them.
    #[test]
    fn paths_agree_bit_for_bit() {
        let xs: Vec<f32> = (0..4096)
            .map(|i| (i as f32 * 0.618_034).sin() * 90.0)
            .collect();
        let base = body(&xs);
        #[cfg(target_arch = "x86_64")]
        {
            if x86::has_avx2_fma() {
                // SAFETY: detected.
                assert!(
                    unsafe { x86::v3(|| body(&xs)) } == base,
                    "AVX2 path differs"
                );
            }
            if x86::has_avx512() {
                // SAFETY: detected.
                assert!(
                    unsafe { x86::v4(|| body(&xs)) } == base,
                    "AVX-512 path differs"
                );
            }
        }
        assert!(dispatch(|| body(&xs)) == base);
    }

    #[test]
    fn exp_erf_match_f64() {
        let mut worst = [0.0f64; 2]; // exp (relative), erf (absolute)
        let mut x = -100.0f32;
        while x < 90.0 {
            let e = exp(x) as f64;
            let r = (x as f64).exp();
            if r > 1e-37 && r < 2e38 {
                worst[0] = worst[0].max(((e - r) / r).abs());
            }
            if x.abs() < 10.0 {
                worst[1] = worst[1].max((erf(x) as f64 - erf_f64(x as f64)).abs());
            }
            x += 0.001_37;
        }
        assert!(worst[0] < 3e-7, "exp rel err {}", worst[0]);
        assert!(worst[1] < 6e-7, "erf abs err {}", worst[1]);
        assert_eq!(exp(-200.0), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(f32::NAN).is_nan());
        assert!(exp(f32::INFINITY).is_finite() && exp(f32::INFINITY) > 1e38);
    }
}
