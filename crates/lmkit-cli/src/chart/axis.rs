//! The axes of a chart: "nice" ticks, their labels, and a plotters
//! coordinate ([`Axis`]) that uses them, linear or log.

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use std::ops::Range;

/// "Nice" tick positions for a linear axis over [lo, hi]: a step of 1, 2 or
/// 5 × 10^k giving about `target` ticks, ticks on its multiples.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> (Vec<f64>, f64) {
    let step = nice_step((hi - lo) / target.max(1) as f64);
    let first = (lo / step).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    let ticks = (first..=last.max(first))
        .map(|k| k as f64 * step)
        .filter(|v| *v <= hi + step * 1e-9)
        .collect();
    (ticks, step)
}

pub(super) fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm < 1.5 {
        1.0
    } else if norm < 3.0 {
        2.0
    } else if norm < 7.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// Ticks of a log axis over [lo, hi] (both > 0): decades when the range holds
/// at least three (every k-th when many), else 1-2-5 or 1…9 per decade, else
/// linear nice ticks.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let (d0, d1) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let with = |mantissas: &[f64]| -> Vec<f64> {
        (d0..=d1)
            .flat_map(|d| mantissas.iter().map(move |m| m * 10f64.powi(d)))
            .filter(|v| *v >= lo * (1.0 - 1e-9) && *v <= hi * (1.0 + 1e-9))
            .collect()
    };
    let decades = with(&[1.0]);
    if decades.len() >= 3 {
        let stride = decades.len().div_ceil(8);
        return decades.into_iter().step_by(stride).collect();
    }
    for mantissas in [
        &[1.0, 2.0, 5.0][..],
        &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0],
    ] {
        let ticks = with(mantissas);
        if ticks.len() >= 3 {
            return ticks;
        }
    }
    nice_ticks(lo, hi, 4).0
}

/// Tick label: `step` is the tick spacing (it sets the decimals); values of
/// 10 000 and up get an SI suffix, below 0.01 a mantissa and exponent.
/// `largest` is the axis' largest |tick|: one notation for the whole axis.
pub fn fmt_tick(v: f64, step: f64, largest: f64) -> String {
    if v.abs() < step.abs() * 1e-6 || v == 0.0 {
        return "0".into();
    }
    let decimals = |s: f64| (-(s.log10() + 1e-9).floor()).max(0.0) as usize;
    if largest >= 1e4 {
        let (div, suffix) = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
            .into_iter()
            .find(|(d, _)| largest >= *d)
            .unwrap_or((1e3, "k"));
        return format!("{:.*}{suffix}", decimals(step / div), v / div);
    }
    if largest < 1e-2 {
        let exp = (v.abs().log10() + 1e-9).floor() as i32;
        let mant = v / 10f64.powi(exp);
        let digits = (exp - (step.log10() + 1e-9).floor() as i32).max(0) as usize;
        let m = format!("{mant:.digits$}");
        let m = if m.contains('.') {
            m.trim_end_matches('0').trim_end_matches('.')
        } else {
            &m
        };
        return format!("{m}e{exp}");
    }
    format!("{:.*}", decimals(step), v)
}

/// A plotters coordinate with our ticks and labels: linear or log.
#[derive(Clone)]
pub struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    pub(super) ticks: Vec<f64>,
    step: f64,
    largest: f64,
}

impl Axis {
    /// An axis over the data range [lo, hi], widened by `pad` of its span on
    /// each side (a factor on a log axis); degenerate ranges get a span.
    pub fn new(lo: f64, hi: f64, log: bool, pad: f64) -> Self {
        let (mut lo, mut hi) = if lo.is_finite() && hi.is_finite() {
            (lo, hi)
        } else {
            (0.0, 1.0)
        };
        if log {
            lo = lo.max(f64::MIN_POSITIVE);
            hi = hi.max(lo);
            if hi / lo < 1.0 + 1e-9 {
                (lo, hi) = (lo / 1.5, hi * 1.5);
            }
            let f = (hi / lo).powf(pad);
            let (lo, hi) = (lo / f, hi * f);
            let ticks = log_ticks(lo, hi);
            let largest = ticks.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            return Axis {
                lo,
                hi,
                log,
                ticks,
                step: 0.0,
                largest,
            };
        }
        if hi - lo <= hi.abs().max(lo.abs()) * 1e-12 {
            let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            (lo, hi) = (lo - d, hi + d);
        }
        let span = hi - lo;
        let (lo, hi) = (lo - span * pad, hi + span * pad);
        let (ticks, step) = nice_ticks(lo, hi, 5);
        let largest = ticks.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        Axis {
            lo,
            hi,
            log,
            ticks,
            step,
            largest,
        }
    }

    /// Position of `v` along the axis, 0 at `lo` and 1 at `hi`.
    pub fn fraction(&self, v: f64) -> f64 {
        if self.log {
            (v.max(f64::MIN_POSITIVE).ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }

    pub fn label(&self, v: f64) -> String {
        // A log axis has no single step: each tick is formatted at its own decade.
        let step = if self.log {
            let k = self
                .ticks
                .windows(2)
                .map(|w| w[1] - w[0])
                .fold(f64::INFINITY, f64::min);
            let decade = 10f64.powf(v.abs().log10().floor());
            if k.is_finite() && k < decade {
                k.max(decade / 10.0)
            } else {
                decade
            }
        } else {
            self.step
        };
        // A log axis picks the notation per tick (10, 100, 1000, 10k).
        fmt_tick(v, step, if self.log { v.abs() } else { self.largest })
    }
}

impl Ranged for Axis {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let f = self.fraction(*v);
        // Saturating cast: a stray value lands off the plot, clipped.
        limit.0 + (f * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Axis {
    fn format_ext(&self, v: &f64) -> String {
        self.label(*v)
    }
}
