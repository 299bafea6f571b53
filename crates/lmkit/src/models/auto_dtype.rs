//! `dtype = auto`: the number format a model's matrix products run fastest
//! in on this CPU, measured rather than assumed.
//!
//! A bf16 or int8 product is not faster everywhere: Zen 4/5 issue
//! `vdpbf16ps` as fast as an f32 FMA (twice the FLOPs), Intel's Xeons
//! without AMX at half the rate, where the bf16 kernels widen to f32 and
//! run slower than plain f32. So [`resolve`] times a pass over the model's
//! products ([`GemmShape`], its four matrices per layer at [`AUTO_ROWS`]
//! rows) in each format with the real kernels (the inference engine's
//! weight matrices: the f32 `gemm`, the bf16 and int8 gemms), keeps the
//! timings in a small JSON file keyed by CPU, thread count and shapes (in
//! the cache folder of the BPE cache, [`lmkit_tokenizers::bpe::cache_dir`]),
//! and [`choose`]s: a format replaces a more exact one only when it is
//! faster by more than [`MARGIN`], so noise never trades exactness for a
//! slower product.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Instant;

use crate::error::{Error, Result};
use crate::kernels::quant::SourceLayout;
use crate::models::gpt2::{Matrix, WeightDtype};
use crate::spec::{AnyConfig, Precision};

/// A requested number format: a fixed one, or `auto` ([`resolve`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DtypeRequest<T> {
    Fixed(T),
    Auto,
}

impl<T> DtypeRequest<T> {
    /// The fixed format, `None` for `auto`.
    pub fn fixed(self) -> Option<T> {
        match self {
            DtypeRequest::Fixed(t) => Some(t),
            DtypeRequest::Auto => None,
        }
    }
}

impl<T: Default> Default for DtypeRequest<T> {
    fn default() -> Self {
        DtypeRequest::Fixed(T::default())
    }
}

impl<T> From<T> for DtypeRequest<T> {
    fn from(t: T) -> Self {
        DtypeRequest::Fixed(t)
    }
}

impl<T: FromStr<Err = Error>> FromStr for DtypeRequest<T> {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        if s.eq_ignore_ascii_case("auto") {
            Ok(DtypeRequest::Auto)
        } else {
            s.parse().map(DtypeRequest::Fixed)
        }
    }
}

impl<T: std::fmt::Display> std::fmt::Display for DtypeRequest<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DtypeRequest::Fixed(t) => t.fmt(f),
            DtypeRequest::Auto => f.write_str("auto"),
        }
    }
}

impl<T: std::fmt::Display> serde::Serialize for DtypeRequest<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de, T: FromStr<Err = Error>> serde::Deserialize<'de> for DtypeRequest<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

impl DtypeRequest<WeightDtype> {
    /// The inference format: the fixed one, or [`resolve`]d among `allowed`
    /// for `shapes` (the choice printed on stderr in one line).
    pub fn resolve(self, allowed: &[WeightDtype], shapes: &[GemmShape]) -> WeightDtype {
        match self {
            DtypeRequest::Fixed(d) => d,
            DtypeRequest::Auto => announce(resolve(allowed, shapes)),
        }
    }

    /// [`Self::resolve`] for an inference model of `config` (any format
    /// its shapes allow: int8 bounds the inputs).
    pub fn resolve_for(self, config: &AnyConfig) -> WeightDtype {
        let all = [WeightDtype::F32, WeightDtype::Bf16, WeightDtype::Int8];
        self.resolve(&all, &model_shapes(config))
    }
}

impl DtypeRequest<Precision> {
    /// A training run's precision: the fixed one, or f32 or bf16 (never
    /// int8) as [`resolve`]d for `shapes`, printed on stderr in one line.
    /// `ranks` > 1 with `auto` is an error: every rank must run one format,
    /// and each would measure its own.
    pub fn resolve_training(self, shapes: &[GemmShape], ranks: usize) -> Result<Precision> {
        Ok(match self {
            DtypeRequest::Fixed(p) => p,
            DtypeRequest::Auto if ranks > 1 => {
                return Err(Error::InvalidInput(
                    "`dtype` auto: give f32 or bf16 for a data-parallel run (every rank must \
                     run the same format)"
                        .into(),
                ))
            }
            DtypeRequest::Auto => {
                match announce(resolve(&[WeightDtype::F32, WeightDtype::Bf16], shapes)) {
                    WeightDtype::Bf16 => Precision::Bf16,
                    _ => Precision::F32,
                }
            }
        })
    }
}

fn announce(c: Choice) -> WeightDtype {
    eprintln!("{c}");
    c.dtype
}

/// One matrix product: `rows × ic` activations times an `ic × oc` weight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    pub rows: usize,
    pub ic: usize,
    pub oc: usize,
}

/// Rows the products are timed at: a prompt, a perplexity window's slice,
/// a batch of short texts.
pub const AUTO_ROWS: usize = 128;

/// A transformer layer's four products (fused QKV, attention output, MLP up
/// and down) at [`AUTO_ROWS`] rows, for width `c` and MLP width `inner`.
pub fn layer_shapes(c: usize, inner: usize) -> Vec<GemmShape> {
    [(c, 3 * c), (c, c), (c, inner), (inner, c)]
        .into_iter()
        .map(|(ic, oc)| GemmShape {
            rows: AUTO_ROWS,
            ic,
            oc,
        })
        .collect()
}

/// [`layer_shapes`] of a model of `config`.
pub fn model_shapes(config: &AnyConfig) -> Vec<GemmShape> {
    match config {
        AnyConfig::Gpt2(c) => layer_shapes(c.n_embd, c.inner()),
        AnyConfig::Bert(c) => layer_shapes(c.hidden_size, c.intermediate_size),
    }
}

/// How much faster than the more exact format a format must measure to
/// replace it: run-to-run noise on a busy machine is a few percent.
pub const MARGIN: f64 = 1.10;

/// The format chosen and why, as [`resolve`] prints it.
#[derive(Debug, Clone, PartialEq)]
pub struct Choice {
    pub dtype: WeightDtype,
    pub reason: String,
}

impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "dtype auto: {} ({})", self.dtype, self.reason)
    }
}

/// The fastest of `allowed` by `seconds` (one pass over the same products
/// in each format), with f32 kept unless a format beats it by [`MARGIN`],
/// and int8 taken over bf16 only when it beats bf16 by the margin too.
/// Returns the format and why in a few words. Formats without a timing
/// are skipped; f32 is the answer when nothing else qualifies.
pub fn choose(seconds: &[(WeightDtype, f64)], allowed: &[WeightDtype]) -> (WeightDtype, String) {
    let time = |d: WeightDtype| {
        seconds
            .iter()
            .find(|(x, s)| *x == d && s.is_finite() && *s > 0.0)
            .map(|&(_, s)| s)
    };
    let Some(f32_s) = time(WeightDtype::F32) else {
        return (WeightDtype::F32, "no f32 timing to compare with".into());
    };
    let (mut best, mut best_s) = (WeightDtype::F32, f32_s);
    let mut speeds = Vec::new();
    for d in [WeightDtype::Bf16, WeightDtype::Int8] {
        let Some(s) = time(d).filter(|_| allowed.contains(&d)) else {
            continue;
        };
        speeds.push(format!("{d} {:.2}×", f32_s / s));
        if s * MARGIN < best_s {
            (best, best_s) = (d, s);
        }
    }
    let speeds = speeds.join(", ");
    let reason = if best == WeightDtype::F32 {
        if speeds.is_empty() {
            "the only format allowed or measured".to_string()
        } else {
            format!(
                "kept: {speeds} f32's speed, none faster by {:.0}%",
                (MARGIN - 1.0) * 100.0
            )
        }
    } else {
        format!("{speeds} f32's speed")
    };
    (best, reason)
}

/// The format of `allowed` this CPU runs `shapes` fastest in: timings from
/// the cache file of this CPU, thread count and shapes, else measured (a
/// fraction of a second) and cached.
pub fn resolve(allowed: &[WeightDtype], shapes: &[GemmShape]) -> Choice {
    // The version names how `measure` times: a change makes old timings miss.
    let key = format!(
        "v2 | {} | {} threads | {shapes:?}",
        crate::kernels::probe::cpu_identity(),
        rayon::current_num_threads()
    );
    let file = cache_file(&key);
    let (seconds, source) = match file.as_ref().and_then(|f| read_cache(f, &key)) {
        Some(s) => (
            s,
            format!(
                "cached in {}",
                file.as_ref()
                    .map_or_else(String::new, |f| f.display().to_string())
            ),
        ),
        None => {
            let s = measure(shapes);
            let stored = file
                .as_ref()
                .is_some_and(|f| write_cache(f, &key, &s).is_ok());
            let source = match (&file, stored) {
                (Some(f), true) => format!("measured, cached in {}", f.display()),
                _ => "measured, not cached".to_string(),
            };
            (s, source)
        }
    };
    let (dtype, why) = choose(&seconds, allowed);
    // The first of the largest products (MLP up before down).
    let largest = shapes.iter().rev().max_by_key(|s| s.ic * s.oc);
    let on = largest.map_or_else(String::new, |s| {
        format!(" on {}×{} products of {} rows", s.ic, s.oc, s.rows)
    });
    Choice {
        dtype,
        reason: format!("{why}{on}; {source}"),
    }
}

/// Seconds of one pass over `shapes` in each format this CPU and these
/// shapes allow (int8 bounds the inputs), each the best of a few passes.
pub fn measure(shapes: &[GemmShape]) -> Vec<(WeightDtype, f64)> {
    let int8_ok = shapes
        .iter()
        .all(|s| WeightDtype::Int8.check_inputs(s.ic).is_ok());
    let formats = [WeightDtype::F32, WeightDtype::Bf16, WeightDtype::Int8];
    formats
        .into_iter()
        .filter(|&d| d != WeightDtype::Int8 || int8_ok)
        .map(|d| (d, time_pass(d, shapes)))
        .collect()
}

/// The best of 3 timed passes (after one untimed) over `shapes` in `dtype`.
fn time_pass(dtype: WeightDtype, shapes: &[GemmShape]) -> f64 {
    let fill = |len: usize, salt: usize| -> Vec<f32> {
        (0..len)
            .map(|i| {
                ((i.wrapping_mul(2_654_435_761).wrapping_add(salt) % 2001) as f32 - 1000.0) * 1e-3
            })
            .collect()
    };
    let mut work: Vec<_> = shapes
        .iter()
        .map(|s| {
            let w = fill(s.ic * s.oc, 1);
            // `[IC, OC]`: how f32 products run (GPT-2's Conv1D blocks, BERT's
            // inference copy transposed at load); an `[OC, IC]` f32 source
            // would be repacked on every call and make f32 look slow.
            let m = Matrix::quantize(&w, SourceLayout::InOut, s.ic, s.oc, dtype, &|_| {});
            (m, fill(s.rows * s.ic, 2), vec![0f32; s.rows * s.oc], s.rows)
        })
        .collect();
    let mut scratch = Vec::new();
    let mut best = f64::INFINITY;
    for pass in 0..4 {
        let t = Instant::now();
        for (m, x, out, rows) in &mut work {
            m.forward(out, x, None, *rows, &mut scratch);
            std::hint::black_box(&out);
        }
        if pass > 0 {
            best = best.min(t.elapsed().as_secs_f64());
        }
    }
    best
}

/// Where the timings for `key` live: `dtype-<digest>.json` in the cache folder.
fn cache_file(key: &str) -> Option<PathBuf> {
    // FNV-1a: stable across builds, unlike std's hasher.
    let digest = key.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    Some(lmkit_tokenizers::bpe::cache_dir()?.join(format!("dtype-{digest:016x}.json")))
}

/// Timings from a cache file; anything unexpected (too large, not the
/// JSON `write_cache` writes, another key) is a miss, measured again.
fn read_cache(file: &std::path::Path, key: &str) -> Option<Vec<(WeightDtype, f64)>> {
    // A few hundred bytes when written here: never read a large file whole.
    if std::fs::metadata(file).ok()?.len() > 64 << 10 {
        return None;
    }
    cached_timings(&std::fs::read(file).ok()?, key)
}

/// The timings of a cache file's bytes for `key` (`None`: not a cache file
/// of this key). Public for the fuzz target of the cache reader.
pub fn cached_timings(bytes: &[u8], key: &str) -> Option<Vec<(WeightDtype, f64)>> {
    let doc: serde_json::Value = serde_json::from_slice(bytes).ok()?;
    if doc.get("key")?.as_str()? != key {
        return None;
    }
    let seconds = doc.get("seconds")?.as_object()?;
    seconds
        .iter()
        .map(|(d, s)| Some((d.parse().ok()?, s.as_f64()?)))
        .collect()
}

fn write_cache(file: &std::path::Path, key: &str, seconds: &[(WeightDtype, f64)]) -> Result<()> {
    let by_name: BTreeMap<&str, f64> = seconds.iter().map(|&(d, s)| (d.as_str(), s)).collect();
    let doc = serde_json::json!({ "key": key, "seconds": by_name });
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    crate::util::fs::atomic_write(file, doc.to_string().as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use WeightDtype::{Bf16, Int8, F32};

    const INFER: [WeightDtype; 3] = [F32, Bf16, Int8];
    const TRAIN: [WeightDtype; 2] = [F32, Bf16];

    /// Zen 4/5: bf16 twice f32's speed is taken; int8 faster still is taken
    /// for inference, never for training.
    #[test]
    fn faster_formats_are_taken_where_allowed() {
        let zen = [(F32, 1.0), (Bf16, 0.52), (Int8, 0.30)];
        assert_eq!(choose(&zen, &INFER).0, Int8);
        let (d, why) = choose(&zen, &TRAIN);
        assert_eq!(d, Bf16);
        assert!(why.contains("bf16 1.92×"), "{why}");
        assert!(!why.contains("int8"), "{why}");
    }

    /// An Intel Xeon without AMX: its bf16 products run as widened f32
    /// FMAs, slower than f32; f32 is kept, and the reason says so.
    #[test]
    fn intel_like_slow_bf16_keeps_f32() {
        let xeon = [(F32, 1.0), (Bf16, 1.35)];
        let (d, why) = choose(&xeon, &TRAIN);
        assert_eq!(d, F32);
        assert!(
            why.starts_with("kept") && why.contains("bf16 0.74×"),
            "{why}"
        );
        // int8 at par with f32 is not worth its rounding either.
        assert_eq!(
            choose(&[(F32, 1.0), (Bf16, 1.35), (Int8, 0.97)], &INFER).0,
            F32
        );
    }

    /// Within the margin, noise does not flip to the less exact format:
    /// bf16 5% faster keeps f32, int8 5% faster than bf16 keeps bf16.
    #[test]
    fn noise_within_the_margin_keeps_the_more_exact_format() {
        assert_eq!(choose(&[(F32, 1.0), (Bf16, 0.95)], &TRAIN).0, F32);
        assert_eq!(
            choose(&[(F32, 1.0), (Bf16, 0.5), (Int8, 0.48)], &INFER).0,
            Bf16
        );
        assert_eq!(
            choose(&[(F32, 1.0), (Bf16, 0.5), (Int8, 0.40)], &INFER).0,
            Int8
        );
    }

    /// Missing or broken timings never pick a format.
    #[test]
    fn missing_timings_fall_back_to_f32() {
        assert_eq!(choose(&[(Bf16, 0.1)], &INFER).0, F32);
        assert_eq!(
            choose(&[(F32, 1.0), (Bf16, f64::NAN), (Int8, 0.0)], &INFER).0,
            F32
        );
        assert_eq!(choose(&[(F32, 1.0), (Bf16, 0.2)], &[F32]).0, F32);
    }

    #[test]
    fn requests_parse_and_print() {
        let auto: DtypeRequest<WeightDtype> = "AUTO".parse().unwrap();
        assert_eq!(auto, DtypeRequest::Auto);
        assert_eq!(
            "bf16".parse::<DtypeRequest<Precision>>().unwrap(),
            Precision::Bf16.into()
        );
        let err = "fp8"
            .parse::<DtypeRequest<WeightDtype>>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("fp8") && err.contains("auto"), "{err}");
        assert_eq!(serde_json::to_string(&auto).unwrap(), "\"auto\"");
        let back: DtypeRequest<Precision> = serde_json::from_str("\"f32\"").unwrap();
        assert_eq!(back, DtypeRequest::Fixed(Precision::F32));
    }

    /// A real (small) measurement: every format timed, the timings cached
    /// under the key and read back, and a choice among them.
    #[test]
    fn measured_timings_round_trip_through_the_cache() {
        let shapes = [GemmShape {
            rows: 32,
            ic: 64,
            oc: 96,
        }];
        let seconds = measure(&shapes);
        assert_eq!(seconds.iter().map(|s| s.0).collect::<Vec<_>>(), INFER);
        assert!(
            seconds.iter().all(|&(_, s)| s.is_finite() && s > 0.0),
            "{seconds:?}"
        );
        let dir = std::env::temp_dir().join(format!("lmkit-auto-dtype-{}", std::process::id()));
        let file = dir.join("dtype-test.json");
        write_cache(&file, "k", &seconds).unwrap();
        assert_eq!(read_cache(&file, "k").unwrap().len(), 3);
        assert!(read_cache(&file, "another machine").is_none());
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(INFER.contains(&choose(&seconds, &INFER).0));
    }
}
