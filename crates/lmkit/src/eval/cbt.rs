//! The Children's Book Test (Hill et al. 2016) the GPT-2 paper's way
//! (section 3.2): each of the candidates is put in the query's blank, and
//! the candidate whose filled-in query is most probable given the context
//! is the model's choice.
//!
//! Input: the original release's text format (`cbtest_NE_test_2500ex.txt`,
//! `cbtest_CN_…`), one question per block, blocks separated by blank
//! lines. Context lines are `N sentence` with N = 1, 2, …; the last line of
//! a block is `N query<TAB>answer<TAB><TAB>c1|c2|…|c10`, the query holding
//! the blank `XXXXX`. The release has 20 context lines and 10 candidates;
//! the reader accepts any count of at least 1 context line and 2
//! candidates, and requires the answer to be a candidate.
//!
//! What the model reads: the context lines (without their numbers) joined
//! by single spaces; what it is scored on: `" " + query` with the blank
//! replaced by the candidate, tokenized separately (so every candidate
//! shares the context's tokens). The score is the sum of the query tokens'
//! log-probabilities. The choice is the first candidate with the highest
//! score; accuracy is the share of questions whose choice is the answer.

use std::path::Path;

use crate::data::{DataError, Result};

/// The blank in a CBT query.
pub const BLANK: &str = "XXXXX";

/// Most candidates a question may have (the release has 10).
pub const MAX_CANDIDATES: usize = 64;

/// One CBT question.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbtItem {
    /// The context sentences, in order, without their line numbers.
    pub context: Vec<String>,
    /// The query, with [`BLANK`] where a candidate goes.
    pub query: String,
    pub answer: String,
    pub candidates: Vec<String>,
    /// 1-based line of the query in the file.
    pub line: usize,
}

impl CbtItem {
    /// The context as the model reads it: sentences joined by spaces.
    pub fn context_text(&self) -> String {
        self.context.join(" ")
    }

    /// `" " + query` with every blank replaced by `candidate`.
    pub fn filled_query(&self, candidate: &str) -> String {
        format!(" {}", self.query.replace(BLANK, candidate))
    }

    /// Index of the answer among the candidates.
    pub fn answer_index(&self) -> usize {
        self.candidates
            .iter()
            .position(|c| *c == self.answer)
            .unwrap_or(0)
    }
}

/// `N rest` → `(N, rest)`.
fn numbered(line: &str) -> Option<(usize, &str)> {
    let (n, rest) = line.split_once(' ').unwrap_or((line, ""));
    Some((n.parse().ok()?, rest))
}

/// Parses CBT text (see the module docs); errors name `path` and the line.
pub fn parse_cbt(text: &str, path: &Path) -> Result<Vec<CbtItem>> {
    let err = |line: usize, message: String| DataError::Parse {
        path: path.to_path_buf(),
        line,
        message,
    };
    let mut items = Vec::new();
    let mut context: Vec<String> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let raw = raw.strip_suffix('\r').unwrap_or(raw);
        if raw.trim().is_empty() {
            if !context.is_empty() {
                return Err(err(
                    line,
                    format!(
                        "the question ends after {} context lines without its query line \
                         (`N query<TAB>answer<TAB><TAB>candidates`)",
                        context.len()
                    ),
                ));
            }
            continue;
        }
        let (n, rest) = numbered(raw)
            .ok_or_else(|| err(line, "a CBT line starts with its number and a space".into()))?;
        if n != context.len() + 1 {
            return Err(err(
                line,
                format!("line number {n}, expected {}", context.len() + 1),
            ));
        }
        let Some((query, tail)) = rest.split_once('\t') else {
            context.push(rest.trim().to_string());
            continue;
        };
        // The query line: `query \t answer \t \t c1|c2|...`.
        let fields: Vec<&str> = tail.split('\t').collect();
        let [answer, "", candidates] = fields.as_slice() else {
            return Err(err(
                line,
                "the query line must be `N query<TAB>answer<TAB><TAB>c1|c2|…`".into(),
            ));
        };
        if context.is_empty() {
            return Err(err(
                line,
                "a question needs at least one context line".into(),
            ));
        }
        if !query.contains(BLANK) {
            return Err(err(line, format!("the query has no blank `{BLANK}`")));
        }
        let candidates: Vec<String> = candidates
            .split('|')
            .map(|c| c.trim().to_string())
            .collect();
        if candidates.len() < 2 || candidates.len() > MAX_CANDIDATES {
            return Err(err(
                line,
                format!(
                    "{} candidates; a question needs 2 to {MAX_CANDIDATES}",
                    candidates.len()
                ),
            ));
        }
        if candidates.iter().any(String::is_empty) {
            return Err(err(line, "an empty candidate".into()));
        }
        let answer = answer.trim().to_string();
        if !candidates.contains(&answer) {
            return Err(err(
                line,
                format!("the answer `{answer}` is not among the candidates"),
            ));
        }
        items.push(CbtItem {
            context: std::mem::take(&mut context),
            query: query.trim().to_string(),
            answer,
            candidates,
            line,
        });
    }
    if !context.is_empty() {
        return Err(err(
            text.lines().count(),
            "the file ends inside a question (no query line)".into(),
        ));
    }
    if items.is_empty() {
        return Err(DataError::Invalid(format!(
            "{}: no CBT questions",
            path.display()
        )));
    }
    Ok(items)
}

/// Reads a CBT file (plain, `.gz` or `.zst`).
pub fn read_cbt(path: &Path) -> Result<Vec<CbtItem>> {
    use std::io::Read;
    let mut text = String::new();
    crate::data::source::open_source(path)?
        .read_to_string(&mut text)
        .map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?;
    parse_cbt(&text, path)
}

/// The model's verdict on one question.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct CbtOutcome {
    /// `log p(filled query | context)` per candidate (natural log).
    pub scores: Vec<f64>,
    /// Index of the chosen candidate (the first best).
    pub choice: usize,
    pub correct: bool,
    /// Context tokens dropped from the left to fit the model.
    pub truncated_tokens: usize,
}

impl CbtOutcome {
    /// The outcome of per-candidate scores against the answer's index.
    pub fn new(scores: Vec<f64>, answer: usize, truncated_tokens: usize) -> Self {
        let choice = (0..scores.len()).fold(0, |b, k| if scores[k] > scores[b] { k } else { b });
        CbtOutcome {
            correct: choice == answer,
            scores,
            choice,
            truncated_tokens,
        }
    }
}

/// Accuracy over questions (0..=1).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct CbtScores {
    pub accuracy: f64,
    pub correct: usize,
    pub count: usize,
}

pub fn cbt_scores(outcomes: &[CbtOutcome]) -> CbtScores {
    let correct = outcomes.iter().filter(|o| o.correct).count();
    CbtScores {
        accuracy: if outcomes.is_empty() {
            0.0
        } else {
            correct as f64 / outcomes.len() as f64
        },
        correct,
        count: outcomes.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Vec<CbtItem>> {
        parse_cbt(s, Path::new("t.txt"))
    }

    #[test]
    fn reads_the_original_format() {
        let t = "1 The dog ran .\n2 It was Rex .\n3 XXXXX barked .\tRex\t\tRex|dog|cat\n\n\
                 1 A .\n2 B XXXXX .\tb\t\ta|b\n";
        let v = parse(t).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].context, ["The dog ran .", "It was Rex ."]);
        assert_eq!(v[0].filled_query("cat"), " cat barked .");
        assert_eq!(v[0].answer_index(), 0);
        assert_eq!(v[1].line, 6);
        assert_eq!(v[1].answer_index(), 1);
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            (
                "1 a\n3 b XXXXX\tx\t\tx|y\n",
                ":2: line number 3, expected 2",
            ),
            ("1 a\n2 b XXXXX\tz\t\tx|y\n", ":2: the answer `z`"),
            ("1 a\n2 b\tx\t\tx|y\n", ":2: the query has no blank"),
            ("1 a\n2 b XXXXX\tx\tx|y\n", ":2: the query line must be"),
            ("1 a\n2 b XXXXX\tx\t\tx\n", ":2: 1 candidates"),
            ("1 a\n\n", ":2: the question ends"),
            ("1 a\n", ":1: the file ends inside"),
            ("x a\n", ":1: a CBT line starts"),
            (
                "1 b XXXXX\tx\t\tx|y\n",
                ":1: a question needs at least one context",
            ),
        ];
        for (t, want) in cases {
            let e = parse(t).unwrap_err().to_string();
            assert!(e.contains(want), "{t:?}: {e}");
        }
        assert!(parse("\n\n")
            .unwrap_err()
            .to_string()
            .contains("no CBT questions"));
    }

    #[test]
    fn first_best_wins_ties() {
        let o = CbtOutcome::new(vec![-3.0, -1.0, -1.0], 2, 0);
        assert_eq!(o.choice, 1);
        assert!(!o.correct);
        let s = cbt_scores(&[o, CbtOutcome::new(vec![-1.0, -2.0], 0, 0)]);
        assert_eq!((s.correct, s.count), (1, 2));
    }
}
