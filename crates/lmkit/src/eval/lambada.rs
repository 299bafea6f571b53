//! LAMBADA (Paperno et al. 2016) the GPT-2 paper's way: predict the last
//! word of a passage from everything before it.
//!
//! Input: the official JSONL release as OpenAI distributes it
//! (`lambada_test.jsonl`), one `{"text": passage}` per line. The target is
//! the passage's last whitespace-separated word; the context is the text
//! before the whitespace that precedes it. The model is scored on the
//! tokens of `" " + word` after the tokens of the context (GPT-2's BPE puts
//! the space in the word's first token).
//!
//! Accuracy: the whole word must be the greedy continuation, i.e. every
//! target token is the argmax of the model's distribution given the context
//! and the target tokens before it. Perplexity is per word:
//! `exp(−mean over passages of log p(word | context))`, where `log p(word)`
//! sums the log-probabilities of the word's tokens. No stop-word filter.

use std::path::Path;

use crate::data::classify_data::{read_jsonl_objects, string_field};
use crate::data::{DataError, Result};

/// One passage, split into context and target word.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LambadaItem {
    /// Everything before the whitespace preceding the last word.
    pub context: String,
    /// The last word, without the space.
    pub word: String,
    /// 1-based line in the source file.
    pub line: usize,
}

impl LambadaItem {
    /// What the model must produce after the context: `" " + word`.
    pub fn target(&self) -> String {
        format!(" {}", self.word)
    }
}

/// `(context, last word)` of a passage, trailing whitespace ignored; `None`
/// when the passage has fewer than two words.
pub fn split_last_word(text: &str) -> Option<(&str, &str)> {
    let trimmed = text.trim_end();
    let cut = trimmed.rfind(char::is_whitespace)?;
    let word = &trimmed[cut..].trim_start();
    let context = trimmed[..cut].trim_end();
    if context.is_empty() || word.is_empty() {
        return None;
    }
    Some((context, word))
}

/// Reads LAMBADA JSONL; a row without `text`, or a passage of one word, is
/// an error naming the line.
pub fn read_lambada(path: &Path) -> Result<Vec<LambadaItem>> {
    let mut items = Vec::new();
    for (line, row) in read_jsonl_objects(path)? {
        let text = string_field(&row, "text", path, line)?;
        let (context, word) = split_last_word(&text).ok_or_else(|| DataError::Parse {
            path: path.to_path_buf(),
            line,
            message: "passage needs at least two words (context and target)".into(),
        })?;
        items.push(LambadaItem {
            context: context.to_string(),
            word: word.to_string(),
            line,
        });
    }
    if items.is_empty() {
        return Err(DataError::Invalid(format!(
            "{}: no passages",
            path.display()
        )));
    }
    Ok(items)
}

/// The model's verdict on one passage.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LambadaOutcome {
    /// `log p(word | context)`: the sum over the word's tokens (natural log).
    pub logprob: f64,
    /// Every target token was the argmax.
    pub greedy_correct: bool,
}

/// Accuracy (0..=1) and per-word perplexity.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LambadaScores {
    pub accuracy: f64,
    pub perplexity: f64,
    pub count: usize,
}

/// Scores one passage from the model's log-probabilities at the target
/// positions: `logprobs[k]` is the log-softmax row `[V]` that predicts
/// `target_ids[k]`.
pub fn score_target(logprobs: &[&[f32]], target_ids: &[u32]) -> LambadaOutcome {
    assert_eq!(logprobs.len(), target_ids.len());
    let mut lp = 0.0f64;
    let mut greedy = true;
    for (row, &t) in logprobs.iter().zip(target_ids) {
        let t = t as usize;
        lp += row[t] as f64;
        // Ties count against the target only if another id is strictly larger.
        if row.iter().any(|&x| x > row[t]) {
            greedy = false;
        }
    }
    LambadaOutcome {
        logprob: lp,
        greedy_correct: greedy,
    }
}

/// Aggregates passage outcomes.
pub fn lambada_scores(outcomes: &[LambadaOutcome]) -> LambadaScores {
    let n = outcomes.len();
    if n == 0 {
        return LambadaScores {
            accuracy: 0.0,
            perplexity: f64::NAN,
            count: 0,
        };
    }
    let correct = outcomes.iter().filter(|o| o.greedy_correct).count();
    let mean_nll = -outcomes.iter().map(|o| o.logprob).sum::<f64>() / n as f64;
    LambadaScores {
        accuracy: correct as f64 / n as f64,
        perplexity: mean_nll.exp(),
        count: n,
    }
}
