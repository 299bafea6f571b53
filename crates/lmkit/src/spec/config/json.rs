//! Reading `config.json`: the JSON object, typed fields ([`Fields`]) and
//! the value checks; every error names the field.

use std::path::Path;

use serde_json::{Map, Value};

use super::{default_labels, limits, HfActivation};
use crate::error::{Error, Result};

// ---------------------------------------------------------------------------
// JSON reading helpers: every error names the field.

pub(crate) fn read_json_object(path: &Path) -> Result<Map<String, Value>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    parse_json_object(&text, path)
}

pub(crate) fn parse_json_object(text: &str, path: &Path) -> Result<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(Error::Json {
            path: path.to_path_buf(),
            line: 1,
            col: 1,
            msg: format!("expected a JSON object, found {}", kind_of(&other)),
        }),
        Err(e) => Err(json_error(path, &e)),
    }
}

/// Converts a serde_json error, dropping its own " at line L column C" suffix.
pub(crate) fn json_error(path: &Path, e: &serde_json::Error) -> Error {
    let msg = e.to_string();
    let msg = match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg,
    };
    Error::Json {
        path: path.to_path_buf(),
        line: e.line(),
        col: e.column(),
        msg,
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(super) fn positive(field: &str, v: usize) -> Result<()> {
    if v == 0 {
        return Err(Error::config(field, "must be at least 1, found 0"));
    }
    Ok(())
}

pub(super) fn at_most(field: &str, v: usize, max: usize) -> Result<()> {
    if v > max {
        return Err(Error::config(
            field,
            format!("{v} is above the limit of {max}"),
        ));
    }
    Ok(())
}

pub(super) fn in_vocab(field: &str, id: Option<u32>, vocab_size: usize) -> Result<()> {
    match id {
        Some(id) if id as usize >= vocab_size => Err(Error::config(
            field,
            format!("{id} is outside the vocabulary of {vocab_size}"),
        )),
        _ => Ok(()),
    }
}

pub(super) fn positive_f64(field: &str, v: f64) -> Result<()> {
    if !(v.is_finite() && v > 0.0) {
        return Err(Error::config(
            field,
            format!("must be a positive number, found {v}"),
        ));
    }
    Ok(())
}

pub(super) fn non_negative_f64(field: &str, v: f64) -> Result<()> {
    if !(v.is_finite() && v >= 0.0) {
        return Err(Error::config(
            field,
            format!("must be a non-negative number, found {v}"),
        ));
    }
    Ok(())
}

pub(super) fn probability(field: &str, v: f64) -> Result<()> {
    if !(0.0..1.0).contains(&v) {
        return Err(Error::config(
            field,
            format!("must be in [0, 1), found {v}"),
        ));
    }
    Ok(())
}

pub(super) fn unsupported(field: &str, what: &str) -> Error {
    Error::config(field, format!("unsupported value {what}"))
}

pub(super) fn reject_true(extra: &Map<String, Value>, field: &str) -> Result<()> {
    match extra.get(field) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(()),
        Some(Value::Bool(true)) => Err(unsupported(field, "true")),
        Some(v) => Err(Error::config(
            field,
            format!("expected a boolean, found {}", kind_of(v)),
        )),
    }
}

/// The keys of a config object; typed getters remove what they read, the
/// rest becomes `extra`.
pub(super) struct Fields(pub(super) Map<String, Value>);

impl Fields {
    /// Removes `key` and its aliases; two present with different values is an error.
    pub(super) fn take(&mut self, key: &str, aliases: &[&str]) -> Result<Option<(String, Value)>> {
        let mut found: Option<(String, Value)> = self.0.remove(key).map(|v| (key.to_string(), v));
        for alias in aliases {
            if let Some(v) = self.0.remove(*alias) {
                match &found {
                    Some((k, prev)) if *prev != v && !prev.is_null() && !v.is_null() => {
                        return Err(Error::config(
                            key,
                            format!("`{k}` = {prev} and its alias `{alias}` = {v} disagree"),
                        ))
                    }
                    Some((_, prev)) if !prev.is_null() => {}
                    _ => found = Some((alias.to_string(), v)),
                }
            }
        }
        Ok(found.filter(|(_, v)| !v.is_null()))
    }

    pub(super) fn usize_or(
        &mut self,
        key: &str,
        aliases: &[&str],
        default: usize,
    ) -> Result<usize> {
        match self.take(key, aliases)? {
            None => Ok(default),
            Some((k, v)) => as_usize(&k, &v),
        }
    }

    pub(super) fn opt_usize(&mut self, key: &str) -> Result<Option<usize>> {
        self.take(key, &[])?
            .map(|(k, v)| as_usize(&k, &v))
            .transpose()
    }

    /// An optional id: absent → `default`, explicit `null` → `None`.
    pub(super) fn opt_u32_or(&mut self, key: &str, default: Option<u32>) -> Result<Option<u32>> {
        match self.0.remove(key) {
            None => Ok(default),
            Some(Value::Null) => Ok(None),
            Some(v) => {
                let n = as_usize(key, &v)?;
                u32::try_from(n)
                    .map(Some)
                    .map_err(|_| Error::config(key, format!("{n} does not fit in 32 bits")))
            }
        }
    }

    pub(super) fn f64_or(&mut self, key: &str, default: f64) -> Result<f64> {
        Ok(self.opt_f64(key)?.unwrap_or(default))
    }

    pub(super) fn opt_f64(&mut self, key: &str) -> Result<Option<f64>> {
        match self.take(key, &[])? {
            None => Ok(None),
            Some((k, v)) => v.as_f64().map(Some).ok_or_else(|| {
                Error::config(k, format!("expected a number, found {}", kind_of(&v)))
            }),
        }
    }

    pub(super) fn bool_or(&mut self, key: &str, default: bool) -> Result<bool> {
        match self.take(key, &[])? {
            None => Ok(default),
            Some((k, Value::Bool(b))) => {
                let _ = k;
                Ok(b)
            }
            Some((k, v)) => Err(Error::config(
                k,
                format!("expected a boolean, found {}", kind_of(&v)),
            )),
        }
    }

    pub(super) fn opt_string(&mut self, key: &str) -> Result<Option<String>> {
        match self.take(key, &[])? {
            None => Ok(None),
            Some((_, Value::String(s))) => Ok(Some(s)),
            Some((k, v)) => Err(Error::config(
                k,
                format!("expected a string, found {}", kind_of(&v)),
            )),
        }
    }

    pub(super) fn activation(&mut self, key: &str, default: HfActivation) -> Result<HfActivation> {
        match self.opt_string(key)? {
            None => Ok(default),
            Some(s) => HfActivation::parse(&s).ok_or_else(|| {
                let ok: Vec<&str> = HfActivation::ALL.iter().map(|a| a.as_str()).collect();
                Error::config(
                    key,
                    format!(
                        "unsupported activation {s:?} (supported: {})",
                        ok.join(", ")
                    ),
                )
            }),
        }
    }

    pub(super) fn check_model_type(&mut self, expected: &str) -> Result<()> {
        match self.0.remove("model_type") {
            None | Some(Value::Null) => Ok(()),
            Some(Value::String(s)) if s == expected => Ok(()),
            Some(v) => Err(Error::config(
                "model_type",
                format!("expected \"{expected}\", found {v}"),
            )),
        }
    }

    pub(super) fn architectures(&mut self) -> Result<Vec<String>> {
        match self.take("architectures", &[])? {
            None => Ok(vec![]),
            Some((_, Value::Array(a))) => a
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s),
                    v => Err(Error::config(
                        "architectures",
                        format!("expected strings, found {}", kind_of(&v)),
                    )),
                })
                .collect(),
            Some((_, v)) => Err(Error::config(
                "architectures",
                format!("expected an array of strings, found {}", kind_of(&v)),
            )),
        }
    }

    /// `id2label` (keys "0".."n-1"), else inverted `label2id`, else
    /// `num_labels` generic labels, else 2 (HF's default).
    pub(super) fn id2label(&mut self, num_labels: Option<usize>) -> Result<Vec<String>> {
        let id2label = self.take("id2label", &[])?;
        let label2id = self.take("label2id", &[])?;
        let labels = if let Some((_, v)) = id2label {
            let Value::Object(m) = v else {
                return Err(Error::config(
                    "id2label",
                    format!("expected an object, found {}", kind_of(&v)),
                ));
            };
            let mut labels: Vec<Option<String>> = vec![None; m.len()];
            for (k, v) in m {
                let id: usize = k
                    .parse()
                    .ok()
                    .filter(|&i| i < labels.len())
                    .ok_or_else(|| {
                        Error::config(
                            "id2label",
                            format!("key {k:?} is not an id in 0..{}", labels.len()),
                        )
                    })?;
                let Value::String(name) = v else {
                    return Err(Error::config(
                        "id2label",
                        format!("label of id {k} is not a string"),
                    ));
                };
                labels[id] = Some(name);
            }
            // m.len() distinct keys all < len: every slot is filled.
            labels.into_iter().map(Option::unwrap_or_default).collect()
        } else if let Some((_, v)) = label2id {
            let Value::Object(m) = v else {
                return Err(Error::config(
                    "label2id",
                    format!("expected an object, found {}", kind_of(&v)),
                ));
            };
            let mut labels: Vec<Option<String>> = vec![None; m.len()];
            for (name, v) in m {
                let id = as_usize("label2id", &v)?;
                match labels.get_mut(id) {
                    Some(slot @ None) => *slot = Some(name),
                    _ => {
                        return Err(Error::config(
                            "label2id",
                            format!(
                                "ids must be 0..{} each used once; bad id {id} for {name:?}",
                                labels.len()
                            ),
                        ))
                    }
                }
            }
            labels.into_iter().map(Option::unwrap_or_default).collect()
        } else {
            let n = num_labels.unwrap_or(2);
            at_most("num_labels", n, limits::LABELS)?;
            default_labels(n)
        };
        if let Some(n) = num_labels {
            if n != labels.len() {
                return Err(Error::config(
                    "num_labels",
                    format!("{n} disagrees with the {} labels of id2label", labels.len()),
                ));
            }
        }
        Ok(labels)
    }

    /// What is left, minus keys describing the file rather than the model.
    pub(super) fn into_extra(mut self) -> Map<String, Value> {
        for k in [
            "transformers_version",
            "dtype",
            "torch_dtype",
            "_name_or_path",
        ] {
            self.0.remove(k);
        }
        self.0
    }
}

fn as_usize(key: &str, v: &Value) -> Result<usize> {
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| Error::config(key, format!("expected a non-negative integer, found {v}")))
}
