//! Zero-shot question answering the GPT-2 paper's way (sections 3.5, 3.8):
//! the model reads a context ending in `A:`, continues greedily, and its
//! output up to the first newline (trimmed) is the answer, scored with
//! SQuAD's exact match and F1 ([`super::squad`]) against the gold answers.
//!
//! Input: JSONL, two kinds of rows (a file may mix them):
//! - CoQA-style `{"story": str, "questions": [str], "answers": [str]}`:
//!   one item per question; the prompt is the story, a blank line, the
//!   conversation so far as `Q: …\nA: …\n` lines, then `Q: question\nA:`.
//! - Natural-Questions-style `{"question": str, "answers": [str, …]}`: the
//!   prompt is example pairs `Q: …\nA: …\n` (the first answer of the first
//!   `shots` such rows of the file, held out from scoring), then
//!   `Q: question\nA:`; any of the answers counts as gold.

use std::path::Path;

use serde_json::{Map, Value};

use crate::data::classify_data::{json_kind, parse_err, read_jsonl_objects, string_field};
use crate::data::{DataError, Result};

/// One row of a QA file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QaRow {
    Coqa {
        story: String,
        questions: Vec<String>,
        answers: Vec<String>,
        line: usize,
    },
    Nq {
        question: String,
        answers: Vec<String>,
        line: usize,
    },
}

/// One question to answer: its prompt and gold answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QaItem {
    pub prompt: String,
    /// The story of a CoQA-style row ("" for NQ-style rows).
    pub document: String,
    pub question: String,
    pub golds: Vec<String>,
    pub line: usize,
    /// 0-based turn within a CoQA-style row (0 for NQ-style rows).
    pub turn: usize,
}

fn one_line(s: &str, what: &str, path: &Path, line: usize) -> Result<String> {
    let t = s.trim();
    if t.is_empty() || t.contains('\n') {
        return Err(parse_err(
            path,
            line,
            format!("{what} must be one non-empty line (`{t}`)"),
        ));
    }
    Ok(t.to_string())
}

fn strings(row: &Map<String, Value>, key: &str, path: &Path, line: usize) -> Result<Vec<String>> {
    let Some(v) = row.get(key) else {
        return Err(parse_err(path, line, format!("missing field `{key}`")));
    };
    let Value::Array(a) = v else {
        return Err(parse_err(
            path,
            line,
            format!(
                "field `{key}` must be an array of strings, found {}",
                json_kind(v)
            ),
        ));
    };
    a.iter()
        .map(|x| match x {
            Value::String(s) => one_line(s, &format!("every entry of `{key}`"), path, line),
            other => Err(parse_err(
                path,
                line,
                format!("`{key}` holds {}, not a string", json_kind(other)),
            )),
        })
        .collect()
}

/// Reads a QA JSONL file (see the module docs); errors name the line.
pub fn read_qa(path: &Path) -> Result<Vec<QaRow>> {
    let mut rows = Vec::new();
    for (line, row) in read_jsonl_objects(path)? {
        let answers = strings(&row, "answers", path, line)?;
        if answers.is_empty() {
            return Err(parse_err(path, line, "`answers` is empty"));
        }
        if row.contains_key("story") {
            let story = string_field(&row, "story", path, line)?;
            let questions = strings(&row, "questions", path, line)?;
            if questions.len() != answers.len() {
                return Err(parse_err(
                    path,
                    line,
                    format!(
                        "{} questions but {} answers (CoQA-style rows pair them in order)",
                        questions.len(),
                        answers.len()
                    ),
                ));
            }
            rows.push(QaRow::Coqa {
                story: story.trim().to_string(),
                questions,
                answers,
                line,
            });
        } else {
            let question = one_line(
                &string_field(&row, "question", path, line)?,
                "`question`",
                path,
                line,
            )?;
            rows.push(QaRow::Nq {
                question,
                answers,
                line,
            });
        }
    }
    if rows.is_empty() {
        return Err(DataError::Invalid(format!(
            "{}: no questions",
            path.display()
        )));
    }
    Ok(rows)
}

/// The items to score: every CoQA-style turn, and every NQ-style row after
/// the first `shots`, which are the examples of the others' prompts.
pub fn qa_items(rows: &[QaRow], shots: usize) -> Vec<QaItem> {
    let mut examples = String::new();
    let mut held = 0;
    for r in rows {
        if let QaRow::Nq {
            question, answers, ..
        } = r
        {
            if held == shots {
                break;
            }
            examples.push_str(&format!("Q: {question}\nA: {}\n", answers[0]));
            held += 1;
        }
    }
    let mut items = Vec::new();
    let mut nq_seen = 0;
    for r in rows {
        match r {
            QaRow::Coqa {
                story,
                questions,
                answers,
                line,
            } => {
                let mut history = String::new();
                for (turn, (q, a)) in questions.iter().zip(answers).enumerate() {
                    items.push(QaItem {
                        prompt: format!("{story}\n\n{history}Q: {q}\nA:"),
                        document: story.clone(),
                        question: q.clone(),
                        golds: vec![a.clone()],
                        line: *line,
                        turn,
                    });
                    history.push_str(&format!("Q: {q}\nA: {a}\n"));
                }
            }
            QaRow::Nq {
                question,
                answers,
                line,
            } => {
                nq_seen += 1;
                if nq_seen <= held {
                    continue;
                }
                items.push(QaItem {
                    prompt: format!("{examples}Q: {question}\nA:"),
                    document: String::new(),
                    question: question.clone(),
                    golds: answers.clone(),
                    line: *line,
                    turn: 0,
                });
            }
        }
    }
    items
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prompts() {
        let rows = vec![
            QaRow::Nq {
                question: "q1".into(),
                answers: vec!["a1".into(), "b1".into()],
                line: 1,
            },
            QaRow::Coqa {
                story: "S.".into(),
                questions: vec!["x?".into(), "y?".into()],
                answers: vec!["X".into(), "Y".into()],
                line: 2,
            },
            QaRow::Nq {
                question: "q2".into(),
                answers: vec!["a2".into()],
                line: 3,
            },
        ];
        let items = qa_items(&rows, 1);
        let p: Vec<&str> = items.iter().map(|i| i.prompt.as_str()).collect();
        assert_eq!(
            p,
            [
                "S.\n\nQ: x?\nA:",
                "S.\n\nQ: x?\nA: X\nQ: y?\nA:",
                "Q: q1\nA: a1\nQ: q2\nA:"
            ]
        );
        assert_eq!(items[1].turn, 1);
        assert_eq!(qa_items(&rows, 0).len(), 4);
    }
}
