//! Multiple-choice data (RocStories / story cloze, SWAG, RACE shapes): JSONL
//! or Parquet rows of one of two forms,
//!
//! - `{"context"?: str, "question"?: str, "choices": [str, ...], "label": int}`
//!   (at least one of `context` and `question`);
//! - HF's SWAG columns `{"sent1", "sent2", "ending0", "ending1", ..., "label"}`
//!   (`sent1` is the context, `sent2` the question: the start of the ending
//!   sentence; the endings are `ending0`, `ending1`, ... up to the first
//!   missing one). A Parquet file takes this form only (its readers skip
//!   list columns such as `choices`).
//!
//! `label` is the 0-based index of the right choice. Every example of a file
//! has the same number of choices K, 2 ≤ K ≤ [`MAX_CHOICES`]: a batch is
//! `[B, K, T]` as HF's `*ForMultipleChoice` take it, so a row with another
//! count is an error naming its line (pad the file's choices to one K with
//! distractors, and the model never sees a fake choice).

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::classify_data::{json_kind, parse_err, read_jsonl_objects, string_field};
use super::{DataError, Result};

/// Most choices an example may have (SWAG 4, RACE 4, CommonsenseQA 5,
/// HellaSwag 4): a file of more is more likely a mistake, and each choice is
/// a sequence of the batch.
pub const MAX_CHOICES: usize = 16;

/// One multiple-choice example.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChoiceExample {
    /// The passage every choice continues (`context` / `sent1`); empty when
    /// the row has only a question.
    pub context: String,
    /// A question or the start of the ending (`question` / `sent2`).
    pub question: Option<String>,
    /// `[K]` the candidate answers or endings.
    pub choices: Vec<String>,
    /// Index of the right choice, `< K`.
    pub label: usize,
    /// 1-based line (JSONL) or row (Parquet), for error messages.
    pub line: usize,
}

impl ChoiceExample {
    /// HF run_swag's pair for choice `k` (BERT): the context as segment A
    /// (the question when there is no context), `question + " " + choice`
    /// as segment B.
    pub fn bert_pair(&self, k: usize) -> (&str, String) {
        match (&self.question, self.context.is_empty()) {
            (Some(q), false) => (&self.context, format!("{q} {}", self.choices[k])),
            (Some(q), true) => (q, self.choices[k].clone()),
            (None, _) => (&self.context, self.choices[k].clone()),
        }
    }

    /// GPT-1 §3.2's `[z; q]`, the text before the delimiter (GPT-2): the
    /// context and the question joined by a space.
    pub fn gpt2_prefix(&self) -> String {
        match &self.question {
            Some(q) if !self.context.is_empty() => format!("{} {q}", self.context),
            Some(q) => q.clone(),
            None => self.context.clone(),
        }
    }
}

/// A multiple-choice file: its examples and their common number of choices.
#[derive(Debug, Clone)]
pub struct ChoiceData {
    pub path: PathBuf,
    pub examples: Vec<ChoiceExample>,
    /// K, the same for every example.
    pub num_choices: usize,
}

impl ChoiceData {
    /// The right choice of every example.
    pub fn labels(&self) -> Vec<usize> {
        self.examples.iter().map(|e| e.label).collect()
    }
}

fn opt_string(
    row: &Map<String, Value>,
    key: &str,
    path: &Path,
    line: usize,
) -> Result<Option<String>> {
    match row.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(other) => Err(parse_err(
            path,
            line,
            format!("field `{key}` must be a string, found {}", json_kind(other)),
        )),
    }
}

/// The choices of one row: its `choices` array, else its SWAG `endingN` columns.
fn row_choices(row: &Map<String, Value>, path: &Path, line: usize) -> Result<Vec<String>> {
    let too_many = || {
        parse_err(
            path,
            line,
            format!("more than {MAX_CHOICES} choices (the most an example may have)"),
        )
    };
    match row.get("choices") {
        Some(Value::Array(items)) => {
            if items.len() > MAX_CHOICES {
                return Err(too_many());
            }
            items
                .iter()
                .enumerate()
                .map(|(k, v)| match v {
                    Value::String(s) => Ok(s.clone()),
                    other => Err(parse_err(
                        path,
                        line,
                        format!("choice {k} must be a string, found {}", json_kind(other)),
                    )),
                })
                .collect()
        }
        Some(other) => Err(parse_err(
            path,
            line,
            format!(
                "field `choices` must be an array of strings, found {}",
                json_kind(other)
            ),
        )),
        None => {
            let mut out = Vec::new();
            while let Some(s) = opt_string(row, &format!("ending{}", out.len()), path, line)? {
                if out.len() == MAX_CHOICES {
                    return Err(too_many());
                }
                out.push(s);
            }
            if out.is_empty() {
                return Err(parse_err(
                    path,
                    line,
                    "missing field `choices` (or SWAG's `ending0`, `ending1`, ...)",
                ));
            }
            Ok(out)
        }
    }
}

/// Reads a multiple-choice file (see the module docs). Errors name the line:
/// malformed JSON, missing or mistyped fields, fewer than 2 or more than
/// [`MAX_CHOICES`] choices, a choice count other than the first row's, a
/// label that is not an index of the choices, no rows.
pub fn read_multiple_choice(path: &Path) -> Result<ChoiceData> {
    let mut examples = Vec::new();
    let mut first: Option<(usize, usize)> = None; // (K, line)
    for (line, row) in read_jsonl_objects(path)? {
        let swag = row.contains_key("sent1") && !row.contains_key("choices");
        let (context, question) = if swag {
            (
                string_field(&row, "sent1", path, line)?,
                opt_string(&row, "sent2", path, line)?,
            )
        } else {
            let c = opt_string(&row, "context", path, line)?;
            let q = opt_string(&row, "question", path, line)?;
            if c.is_none() && q.is_none() {
                return Err(parse_err(
                    path,
                    line,
                    "missing field `context` (or `question`, or SWAG's `sent1`)",
                ));
            }
            (c.unwrap_or_default(), q)
        };
        let choices = row_choices(&row, path, line)?;
        let k = choices.len();
        if k < 2 {
            return Err(parse_err(
                path,
                line,
                format!("{k} choice(s): an example needs at least 2"),
            ));
        }
        match first {
            None => first = Some((k, line)),
            Some((k0, l0)) if k0 != k => {
                return Err(parse_err(
                    path,
                    line,
                    format!(
                        "{k} choices, but line {l0} has {k0}: every example of a file needs \
                         the same number (a batch is [examples, choices, tokens])"
                    ),
                ))
            }
            _ => {}
        }
        let label = match row.get("label") {
            Some(Value::Number(n)) => match n.as_u64() {
                Some(i) if i < k as u64 => i as usize,
                _ => {
                    return Err(parse_err(
                        path,
                        line,
                        format!("label {n} is not the index of one of the {k} choices (0..{k})"),
                    ))
                }
            },
            Some(other) => {
                return Err(parse_err(
                    path,
                    line,
                    format!(
                        "field `label` must be an integer (the right choice's index), found {}",
                        json_kind(other)
                    ),
                ))
            }
            None => return Err(parse_err(path, line, "missing field `label`")),
        };
        examples.push(ChoiceExample {
            context,
            question,
            choices,
            label,
            line,
        });
    }
    let Some((num_choices, _)) = first else {
        return Err(DataError::Invalid(format!(
            "{}: no examples (empty file)",
            path.display()
        )));
    };
    Ok(ChoiceData {
        path: path.to_path_buf(),
        examples,
        num_choices,
    })
}
