//! Sentence embeddings the sentence-transformers way: read the model's
//! `modules.json`, `1_Pooling/config.json`, `sentence_bert_config.json` and
//! pool the encoder's token states into one vector per text.
//!
//! Shape legend: B batch, T sequence (padded), C channels.

use std::path::Path;

use serde_json::Value;

use crate::error::{Error, Result};

/// How token states become one vector (sentence-transformers `Pooling`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// The first token (`[CLS]`).
    Cls,
    /// Mean over real tokens.
    Mean,
    /// Element-wise max over real tokens.
    Max,
    /// Sum over real tokens divided by √(number of tokens).
    MeanSqrtLen,
}

impl Pooling {
    /// Parses a CLI name: `mean`, `cls`, `max`, `mean_sqrt_len`.
    pub fn parse(s: &str) -> Result<Pooling> {
        match s {
            "mean" => Ok(Pooling::Mean),
            "cls" => Ok(Pooling::Cls),
            "max" => Ok(Pooling::Max),
            "mean_sqrt_len" => Ok(Pooling::MeanSqrtLen),
            _ => Err(Error::InvalidInput(format!(
                "unknown pooling {s:?} (expected mean, cls, max or mean_sqrt_len)"
            ))),
        }
    }
}

/// What a sentence-transformers model directory says about embedding.
#[derive(Debug, Clone, PartialEq)]
pub struct SentenceConfig {
    /// Pooling modes in the order sentence-transformers concatenates them
    /// (cls, max, mean, mean_sqrt_len); usually exactly one.
    pub pooling: Vec<Pooling>,
    /// Whether a `Normalize` module follows pooling.
    pub normalize: bool,
    /// `max_seq_length` of the Transformer module (tokens, specials included).
    pub max_seq_length: Option<usize>,
    /// `do_lower_case` of the Transformer module: lowercase texts first.
    pub do_lower_case: bool,
}

impl Default for SentenceConfig {
    /// What a plain HF checkpoint gets: mean pooling, no normalisation.
    fn default() -> Self {
        SentenceConfig {
            pooling: vec![Pooling::Mean],
            normalize: false,
            max_seq_length: None,
            do_lower_case: false,
        }
    }
}

fn read_json(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    serde_json::from_str(&text).map_err(|e| Error::Json {
        path: path.to_path_buf(),
        line: e.line(),
        col: e.column(),
        msg: e.to_string(),
    })
}

fn config_err(path: &Path, field: &str, msg: impl Into<String>) -> Error {
    Error::Config {
        path: Some(path.to_path_buf()),
        field: field.to_string(),
        msg: msg.into(),
    }
}

impl SentenceConfig {
    /// Reads the sentence-transformers files of `dir`; `Ok(None)` when the
    /// directory has no `modules.json` (a plain HF checkpoint).
    ///
    /// Supported pipelines: `Transformer`, then optionally `Pooling`, then
    /// optionally `Normalize`. Any other module (Dense, LayerNorm, ...) is an
    /// error naming it, since ignoring it would give wrong embeddings.
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Option<SentenceConfig>> {
        let dir = dir.as_ref();
        let modules_path = dir.join("modules.json");
        if !modules_path.exists() {
            return Ok(None);
        }
        let modules = read_json(&modules_path)?;
        let list = modules
            .as_array()
            .ok_or_else(|| config_err(&modules_path, "modules", "expected a JSON array"))?;
        let mut cfg = SentenceConfig::default();
        let mut saw_pooling = false;
        for (i, m) in list.iter().enumerate() {
            let field = format!("[{i}].type");
            let ty = m
                .get("type")
                .and_then(Value::as_str)
                .ok_or_else(|| config_err(&modules_path, &field, "missing or not a string"))?;
            let path = m.get("path").and_then(Value::as_str).unwrap_or("");
            let short = ty.rsplit('.').next().unwrap_or(ty);
            match short {
                "Transformer" if i == 0 => {
                    let sb = dir.join(path).join("sentence_bert_config.json");
                    if sb.exists() {
                        let v = read_json(&sb)?;
                        match v.get("max_seq_length") {
                            None | Some(Value::Null) => {}
                            Some(x) => {
                                let n = x.as_u64().filter(|&n| n > 0).ok_or_else(|| {
                                    config_err(&sb, "max_seq_length", format!("expected a positive integer, got {x}"))
                                })?;
                                cfg.max_seq_length = Some(n as usize);
                            }
                        }
                        match v.get("do_lower_case") {
                            None | Some(Value::Null) => {}
                            Some(Value::Bool(b)) => cfg.do_lower_case = *b,
                            Some(x) => {
                                return Err(config_err(&sb, "do_lower_case", format!("expected true or false, got {x}")))
                            }
                        }
                    }
                }
                "Pooling" if !saw_pooling && !cfg.normalize => {
                    saw_pooling = true;
                    cfg.pooling = parse_pooling(&dir.join(path).join("config.json"))?;
                }
                "Normalize" if !cfg.normalize => cfg.normalize = true,
                _ => {
                    return Err(config_err(
                        &modules_path,
                        &field,
                        format!("unsupported sentence-transformers module {ty:?} at position {i} (supported: Transformer, then Pooling, then Normalize)"),
                    ))
                }
            }
        }
        Ok(Some(cfg))
    }
}

/// Reads `1_Pooling/config.json`.
fn parse_pooling(path: &Path) -> Result<Vec<Pooling>> {
    let v = read_json(path)?;
    let flag = |key: &str| -> Result<bool> {
        match v.get(key) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(b)) => Ok(*b),
            Some(x) => Err(config_err(
                path,
                key,
                format!("expected true or false, got {x}"),
            )),
        }
    };
    for unsupported in ["pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken"] {
        if flag(unsupported)? {
            return Err(config_err(
                path,
                unsupported,
                "this pooling mode is not implemented",
            ));
        }
    }
    // sentence-transformers concatenates in this order.
    let mut modes = Vec::new();
    if flag("pooling_mode_cls_token")? {
        modes.push(Pooling::Cls);
    }
    if flag("pooling_mode_max_tokens")? {
        modes.push(Pooling::Max);
    }
    if flag("pooling_mode_mean_tokens")? {
        modes.push(Pooling::Mean);
    }
    if flag("pooling_mode_mean_sqrt_len_tokens")? {
        modes.push(Pooling::MeanSqrtLen);
    }
    if modes.is_empty() {
        return Err(config_err(
            path,
            "pooling_mode_*",
            "no pooling mode is enabled",
        ));
    }
    Ok(modes)
}

/// Pools `hidden[B,T,C]` into `out[B, modes·C]`, masking padding with
/// `mask[B,T]` (1 = real token) exactly as sentence-transformers does: mean
/// divides by max(count, 1e-9); max sets padding to -1e9 first.
pub fn pool(
    hidden: &[f32],
    mask: &[u8],
    b: usize,
    t: usize,
    c: usize,
    modes: &[Pooling],
    out: &mut [f32],
) {
    assert_eq!(hidden.len(), b * t * c, "pool: hidden must be [B,T,C]");
    assert_eq!(mask.len(), b * t, "pool: mask must be [B,T]");
    let d = modes.len() * c;
    assert_eq!(out.len(), b * d, "pool: out must be [B, modes*C]");
    for bi in 0..b {
        let h = &hidden[bi * t * c..(bi + 1) * t * c];
        let m = &mask[bi * t..(bi + 1) * t];
        let count = m.iter().filter(|&&x| x != 0).count() as f32;
        for (k, mode) in modes.iter().enumerate() {
            let o = &mut out[bi * d + k * c..bi * d + (k + 1) * c];
            match mode {
                Pooling::Cls => o.copy_from_slice(&h[..c]),
                Pooling::Max => {
                    o.fill(f32::NEG_INFINITY);
                    for (row, &mi) in h.chunks_exact(c).zip(m) {
                        let fill = if mi != 0 { None } else { Some(-1e9f32) };
                        for (oj, &x) in o.iter_mut().zip(row) {
                            *oj = oj.max(fill.unwrap_or(x));
                        }
                    }
                }
                Pooling::Mean | Pooling::MeanSqrtLen => {
                    o.fill(0.0);
                    for (row, &mi) in h.chunks_exact(c).zip(m) {
                        if mi != 0 {
                            for (oj, &x) in o.iter_mut().zip(row) {
                                *oj += x;
                            }
                        }
                    }
                    let div = if *mode == Pooling::Mean {
                        count.max(1e-9)
                    } else {
                        count.max(1e-9).sqrt()
                    };
                    o.iter_mut().for_each(|x| *x /= div);
                }
            }
        }
    }
}

/// `v / max(‖v‖₂, 1e-12)` in place (torch `F.normalize`).
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|&x| (x as f64) * (x as f64))
        .sum::<f64>()
        .sqrt() as f32;
    let d = norm.max(1e-12);
    v.iter_mut().for_each(|x| *x /= d);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_with_padding() {
        // B=2, T=3, C=2; second row has one padding token.
        let h = [
            1., 2., 3., 4., 5., -6., /* b1 */ 7., 8., -1., 0., 100., 100.,
        ];
        let m = [1, 1, 1, 1, 1, 0];
        let mut out = vec![0.0; 2 * 2 * 4];
        pool(
            &h,
            &m,
            2,
            3,
            2,
            &[
                Pooling::Cls,
                Pooling::Max,
                Pooling::Mean,
                Pooling::MeanSqrtLen,
            ],
            &mut out,
        );
        let s3 = 3f32.sqrt();
        let s2 = 2f32.sqrt();
        let want = [
            1.,
            2.,
            5.,
            4.,
            3.,
            0.,
            9. / s3,
            0.,
            7.,
            8.,
            7.,
            8.,
            3.,
            4.,
            6. / s2,
            8. / s2,
        ];
        for (a, b) in out.iter().zip(want) {
            assert!((a - b).abs() < 1e-6, "{out:?}");
        }
    }

    #[test]
    fn all_padding_is_finite() {
        let mut out = vec![0.0; 4];
        pool(
            &[1., 2., 3., 4.],
            &[0, 0],
            1,
            2,
            2,
            &[Pooling::Mean, Pooling::Max],
            &mut out,
        );
        assert_eq!(out, [0., 0., -1e9, -1e9]);
    }

    #[test]
    fn normalizes() {
        let mut v = [3.0, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut z = [0.0, 0.0];
        l2_normalize(&mut z);
        assert_eq!(z, [0.0, 0.0]);
    }

    fn write(dir: &Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    #[test]
    fn reads_sentence_transformers_dirs() {
        let tmp = std::env::temp_dir().join(format!("lmkit-st-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        assert_eq!(SentenceConfig::from_dir(&tmp).unwrap(), None);
        write(
            &tmp,
            "modules.json",
            r#"[{"idx":0,"name":"0","path":"","type":"sentence_transformers.models.Transformer"},
            {"idx":1,"name":"1","path":"1_Pooling","type":"sentence_transformers.models.Pooling"},
            {"idx":2,"name":"2","path":"2_Normalize","type":"sentence_transformers.models.Normalize"}]"#,
        );
        write(
            &tmp,
            "1_Pooling/config.json",
            r#"{"word_embedding_dimension": 4, "pooling_mode_cls_token": true, "pooling_mode_mean_tokens": false}"#,
        );
        write(
            &tmp,
            "sentence_bert_config.json",
            r#"{"max_seq_length": 128, "do_lower_case": false}"#,
        );
        let c = SentenceConfig::from_dir(&tmp).unwrap().unwrap();
        assert_eq!(
            c,
            SentenceConfig {
                pooling: vec![Pooling::Cls],
                normalize: true,
                max_seq_length: Some(128),
                do_lower_case: false
            }
        );

        write(
            &tmp,
            "1_Pooling/config.json",
            r#"{"pooling_mode_lasttoken": true}"#,
        );
        let e = SentenceConfig::from_dir(&tmp).unwrap_err().to_string();
        assert!(e.contains("pooling_mode_lasttoken"), "{e}");

        write(
            &tmp,
            "modules.json",
            r#"[{"path":"","type":"sentence_transformers.models.Transformer"},
            {"path":"2_Dense","type":"sentence_transformers.models.Dense"}]"#,
        );
        let e = SentenceConfig::from_dir(&tmp).unwrap_err().to_string();
        assert!(e.contains("Dense"), "{e}");

        write(&tmp, "modules.json", "[");
        let e = SentenceConfig::from_dir(&tmp).unwrap_err().to_string();
        assert!(e.contains("modules.json"), "{e}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
