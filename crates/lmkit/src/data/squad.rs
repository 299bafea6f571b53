//! SQuAD v1.1 JSON: `{"data": [{"title", "paragraphs": [{"context", "qas":
//! [{"id", "question", "answers": [{"text", "answer_start"}]}]}]}]}`.
//!
//! `answer_start` counts characters (Python string indices, i.e. Unicode
//! scalar values), not bytes; the reader converts it to a byte offset and
//! checks that the context holds the answer text there. Errors name the
//! entry as a JSON path (`data[3].paragraphs[0].qas[7]`) and the question id.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::classify_data::json_kind;
use super::{DataError, Result};

/// One gold answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SquadAnswer {
    pub text: String,
    /// `answer_start` as written (characters).
    pub char_start: usize,
    /// Byte offset of the answer in the context, when the context really
    /// holds `text` at `char_start`; `None` otherwise (such an answer can be
    /// scored against but not trained on).
    pub byte_start: Option<usize>,
}

/// One question with its paragraph.
#[derive(Debug, Clone, PartialEq)]
pub struct SquadExample {
    pub id: String,
    pub title: String,
    pub question: String,
    /// Shared by every question of the paragraph.
    pub context: Arc<str>,
    pub answers: Vec<SquadAnswer>,
    /// JSON path of the entry, for error messages.
    pub entry: String,
}

impl SquadExample {
    /// Gold answer texts (for EM/F1).
    pub fn answer_texts(&self) -> Vec<String> {
        self.answers.iter().map(|a| a.text.clone()).collect()
    }
}

/// Reads a SQuAD v1.1 file.
pub fn read_squad(path: &Path) -> Result<Vec<SquadExample>> {
    let text = super::source::read_source_text(path)?;
    parse_squad(&text, path)
}

fn err(path: &Path, entry: &str, msg: impl std::fmt::Display) -> DataError {
    DataError::Invalid(format!("{}: {entry}: {msg}", path.display()))
}

fn field<'a>(obj: &'a Value, key: &str, path: &Path, entry: &str) -> Result<&'a Value> {
    match obj {
        Value::Object(m) => m
            .get(key)
            .ok_or_else(|| err(path, entry, format!("missing field `{key}`"))),
        other => Err(err(
            path,
            entry,
            format!("expected an object, found {}", json_kind(other)),
        )),
    }
}

fn str_field<'a>(obj: &'a Value, key: &str, path: &Path, entry: &str) -> Result<&'a str> {
    match field(obj, key, path, entry)? {
        Value::String(s) => Ok(s),
        other => Err(err(
            path,
            entry,
            format!("field `{key}` must be a string, found {}", json_kind(other)),
        )),
    }
}

fn array_field<'a>(obj: &'a Value, key: &str, path: &Path, entry: &str) -> Result<&'a [Value]> {
    match field(obj, key, path, entry)? {
        Value::Array(a) => Ok(a),
        other => Err(err(
            path,
            entry,
            format!("field `{key}` must be an array, found {}", json_kind(other)),
        )),
    }
}

/// Byte offset of character `char_idx` in `s` (`s.len()` at the end), or `None` past it.
pub fn char_to_byte(s: &str, char_idx: usize) -> Option<usize> {
    if char_idx == 0 {
        return Some(0);
    }
    s.char_indices()
        .map(|(b, _)| b)
        .chain(std::iter::once(s.len()))
        .nth(char_idx)
}

/// Parses SQuAD v1.1 JSON text; `path` only labels errors.
pub fn parse_squad(text: &str, path: &Path) -> Result<Vec<SquadExample>> {
    let root: Value = serde_json::from_str(text).map_err(|e| DataError::Parse {
        path: path.to_path_buf(),
        line: e.line(),
        message: format!("invalid JSON: {e}"),
    })?;
    let mut out = Vec::new();
    for (di, article) in array_field(&root, "data", path, "top level")?
        .iter()
        .enumerate()
    {
        let a_entry = format!("data[{di}]");
        let title = match field(article, "title", path, &a_entry) {
            Ok(Value::String(s)) => s.clone(),
            _ => String::new(),
        };
        for (pi, para) in array_field(article, "paragraphs", path, &a_entry)?
            .iter()
            .enumerate()
        {
            let p_entry = format!("{a_entry}.paragraphs[{pi}]");
            let context: Arc<str> = Arc::from(str_field(para, "context", path, &p_entry)?);
            for (qi, qa) in array_field(para, "qas", path, &p_entry)?.iter().enumerate() {
                let q_entry = format!("{p_entry}.qas[{qi}]");
                let id = match field(qa, "id", path, &q_entry)? {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    other => {
                        return Err(err(
                            path,
                            &q_entry,
                            format!("field `id` must be a string, found {}", json_kind(other)),
                        ))
                    }
                };
                let q_entry = format!("{q_entry} (id {id:?})");
                let question = str_field(qa, "question", path, &q_entry)?.to_string();
                let mut answers = Vec::new();
                for (ai, ans) in array_field(qa, "answers", path, &q_entry)?
                    .iter()
                    .enumerate()
                {
                    let an_entry = format!("{q_entry}.answers[{ai}]");
                    let text = str_field(ans, "text", path, &an_entry)?.to_string();
                    let char_start = match field(ans, "answer_start", path, &an_entry)? {
                        Value::Number(n) => n.as_u64().ok_or_else(|| {
                            err(
                                path,
                                &an_entry,
                                format!("answer_start {n} is not a non-negative integer"),
                            )
                        })? as usize,
                        other => {
                            return Err(err(
                                path,
                                &an_entry,
                                format!(
                                    "field `answer_start` must be an integer, found {}",
                                    json_kind(other)
                                ),
                            ))
                        }
                    };
                    let byte_start = char_to_byte(&context, char_start)
                        .filter(|&b| context[b..].starts_with(text.as_str()));
                    answers.push(SquadAnswer {
                        text,
                        char_start,
                        byte_start,
                    });
                }
                out.push(SquadExample {
                    id,
                    title: title.clone(),
                    question,
                    context: context.clone(),
                    answers,
                    entry: q_entry,
                });
            }
        }
    }
    if out.is_empty() {
        return Err(DataError::Invalid(format!(
            "{}: no questions in the file",
            path.display()
        )));
    }
    Ok(out)
}
