//! Text-classification data: JSONL rows `{"text", "text_pair"?, "label"}`
//! and the label ↔ id map saved as `id2label` / `label2id` in config.json.
//!
//! Labels are all strings or all integers within a file. A fresh label map
//! (fine-tuning a model that has no classifier yet) numbers string labels in
//! sorted order and integer labels by their value (names `LABEL_{i}` as HF
//! does); an existing map (from the checkpoint's config) is used as it is,
//! and a label it does not know is an error naming the line.

use std::collections::{BTreeSet, HashMap};
use std::io::BufRead;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::{io_err, DataError, Result};

/// Reads a JSONL file into `(1-based line number, object)` pairs, skipping
/// blank lines. A line that is not a JSON object is an error naming it.
pub fn read_jsonl_objects(path: &Path) -> Result<Vec<(usize, Map<String, Value>)>> {
    let mut rows = Vec::new();
    for_each_jsonl_object(path, |line, map| {
        rows.push((line, map));
        Ok(())
    })?;
    Ok(rows)
}

/// [`read_jsonl_objects`] one row at a time: `f(line, object)` sees each row
/// as it is read, so a large file is never held whole and the first bad
/// line in file order (a malformed line or one `f` rejects) is the error.
pub fn for_each_jsonl_object(
    path: &Path,
    mut f: impl FnMut(usize, Map<String, Value>) -> Result<()>,
) -> Result<()> {
    if super::source::is_parquet(path) {
        for (line, map) in super::parquet::read_parquet_rows(path, None)? {
            f(line, map)?;
        }
        return Ok(());
    }
    let file = super::source::open_source(path)?;
    for (i, line) in file.lines().enumerate() {
        let line = line.map_err(io_err(path))?;
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(trimmed) {
            Ok(Value::Object(map)) => f(i + 1, map)?,
            Ok(other) => {
                return Err(parse_err(
                    path,
                    i + 1,
                    format!("expected a JSON object, found {}", json_kind(&other)),
                ))
            }
            Err(e) => return Err(parse_err(path, i + 1, format!("invalid JSON: {e}"))),
        }
    }
    Ok(())
}

pub(crate) fn parse_err(path: &Path, line: usize, message: impl Into<String>) -> DataError {
    DataError::Parse {
        path: path.to_path_buf(),
        line,
        message: message.into(),
    }
}

pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A required string field of a JSONL row.
pub(crate) fn string_field(
    row: &Map<String, Value>,
    key: &str,
    path: &Path,
    line: usize,
) -> Result<String> {
    match row.get(key) {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(parse_err(
            path,
            line,
            format!("field `{key}` must be a string, found {}", json_kind(other)),
        )),
        None => Err(parse_err(path, line, format!("missing field `{key}`"))),
    }
}

/// A label as written in the file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Label {
    Int(u64),
    Str(String),
}

impl std::fmt::Display for Label {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Label::Int(i) => write!(f, "{i}"),
            Label::Str(s) => write!(f, "{s:?}"),
        }
    }
}

/// One classification example.
#[derive(Debug, Clone, PartialEq)]
pub struct ClassifyExample {
    pub text: String,
    pub text_pair: Option<String>,
    pub label: Label,
    /// 1-based line in the source file, for error messages.
    pub line: usize,
}

/// A classification file: its examples and where it came from.
#[derive(Debug, Clone)]
pub struct ClassifyData {
    pub path: PathBuf,
    pub examples: Vec<ClassifyExample>,
}

/// Reads `{"text": str, "text_pair"?: str|null, "label": str|int}` rows.
/// Errors name the line: malformed JSON, missing/mistyped fields, negative or
/// fractional labels, string and integer labels mixed in one file, no rows.
pub fn read_classify_jsonl(path: &Path) -> Result<ClassifyData> {
    let mut examples = Vec::new();
    let mut first_kind: Option<(bool, usize)> = None;
    for (line, row) in read_jsonl_objects(path)? {
        let text = string_field(&row, "text", path, line)?;
        let text_pair = match row.get("text_pair") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => {
                return Err(parse_err(
                    path,
                    line,
                    format!(
                        "field `text_pair` must be a string, found {}",
                        json_kind(other)
                    ),
                ))
            }
        };
        let label = match row.get("label") {
            Some(Value::String(s)) => Label::Str(s.clone()),
            Some(Value::Number(n)) => match n.as_u64() {
                Some(i) => Label::Int(i),
                None => {
                    return Err(parse_err(
                        path,
                        line,
                        format!("label {n} is not a non-negative integer"),
                    ))
                }
            },
            Some(other) => {
                return Err(parse_err(
                    path,
                    line,
                    format!(
                        "field `label` must be a string or an integer, found {}",
                        json_kind(other)
                    ),
                ))
            }
            None => return Err(parse_err(path, line, "missing field `label`")),
        };
        let is_int = matches!(label, Label::Int(_));
        match first_kind {
            None => first_kind = Some((is_int, line)),
            Some((k, first)) if k != is_int => {
                return Err(parse_err(
                    path,
                    line,
                    format!(
                        "label {label} is {} but line {first} has {} labels; use one kind",
                        if is_int { "an integer" } else { "a string" },
                        if k { "integer" } else { "string" }
                    ),
                ))
            }
            _ => {}
        }
        examples.push(ClassifyExample {
            text,
            text_pair,
            label,
            line,
        });
    }
    if examples.is_empty() {
        return Err(DataError::Invalid(format!(
            "{}: no examples (empty file)",
            path.display()
        )));
    }
    Ok(ClassifyData {
        path: path.to_path_buf(),
        examples,
    })
}

/// The label ↔ id map of a classifier (`id2label` in config.json order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelMap {
    id2label: Vec<String>,
    label2id: HashMap<String, usize>,
}

impl LabelMap {
    /// From names in id order (an existing model's `id2label`). Names must be unique.
    pub fn from_names(id2label: Vec<String>) -> Result<Self> {
        let mut label2id = HashMap::new();
        for (i, name) in id2label.iter().enumerate() {
            if label2id.insert(name.clone(), i).is_some() {
                return Err(DataError::Invalid(format!(
                    "label `{name}` appears twice in id2label"
                )));
            }
        }
        if id2label.is_empty() {
            return Err(DataError::Invalid(
                "a classifier needs at least one label".into(),
            ));
        }
        Ok(LabelMap { id2label, label2id })
    }

    /// A fresh map from training examples: sorted string labels, or integer
    /// labels 0..=max named `LABEL_{i}` (at least 2 labels either way).
    pub fn from_examples(data: &ClassifyData) -> Result<Self> {
        let labels: BTreeSet<&Label> = data.examples.iter().map(|e| &e.label).collect();
        let names: Vec<String> = match labels.iter().next_back() {
            Some(Label::Int(max)) => {
                let n = (*max as usize).saturating_add(1).max(2);
                if n > 1 << 16 {
                    return Err(DataError::Invalid(format!(
                        "{}: integer label {max} implies {n} classes; labels must be 0..N-1",
                        data.path.display()
                    )));
                }
                (0..n).map(|i| format!("LABEL_{i}")).collect()
            }
            _ => labels
                .iter()
                .map(|l| match l {
                    Label::Str(s) => s.clone(),
                    Label::Int(i) => i.to_string(),
                })
                .collect(),
        };
        if names.len() < 2 {
            return Err(DataError::Invalid(format!(
                "{}: only one distinct label ({}); a classifier needs at least two",
                data.path.display(),
                names.join(", ")
            )));
        }
        Self::from_names(names)
    }

    pub fn num_labels(&self) -> usize {
        self.id2label.len()
    }

    pub fn names(&self) -> &[String] {
        &self.id2label
    }

    pub fn name(&self, id: usize) -> Option<&str> {
        self.id2label.get(id).map(String::as_str)
    }

    /// The id of `label`: a string by name, an integer as the id itself.
    /// `None` when the map does not know it.
    pub fn id(&self, label: &Label) -> Option<usize> {
        match label {
            Label::Str(s) => self.label2id.get(s).copied(),
            Label::Int(i) => {
                let i = usize::try_from(*i).ok()?;
                (i < self.id2label.len()).then_some(i)
            }
        }
    }

    /// Ids of every example; an unknown label is an error naming its line.
    pub fn ids(&self, data: &ClassifyData) -> Result<Vec<usize>> {
        data.examples
            .iter()
            .map(|e| {
                self.id(&e.label).ok_or_else(|| {
                    parse_err(
                        &data.path,
                        e.line,
                        format!(
                            "unknown label {} (the model's labels: {})",
                            e.label,
                            self.describe()
                        ),
                    )
                })
            })
            .collect()
    }

    fn describe(&self) -> String {
        let shown: Vec<String> = self
            .id2label
            .iter()
            .take(20)
            .enumerate()
            .map(|(i, n)| format!("{i}={n}"))
            .collect();
        let more = if self.id2label.len() > 20 {
            ", ..."
        } else {
            ""
        };
        format!("{}{more}", shown.join(", "))
    }
}
