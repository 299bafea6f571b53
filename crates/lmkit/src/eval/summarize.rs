//! Zero-shot "TL;DR:" summarisation (GPT-2 paper, section 3.6): the
//! article followed by `"\nTL;DR:"` is the prompt, the model continues it
//! for up to 100 tokens (top-k 2 sampling in the paper, or greedy), and the
//! first 3 sentences of the continuation are the summary, scored with
//! ROUGE against the reference (see [`mod@super::rouge`]).

use std::path::Path;

use crate::data::classify_data::{read_jsonl_objects, string_field};
use crate::data::{DataError, Result};

/// One article with its reference summary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummarizeItem {
    pub article: String,
    pub summary: String,
    pub line: usize,
}

/// The prompt for an article: `article + "\nTL;DR:"`.
pub fn tldr_prompt(article: &str) -> String {
    format!("{}\nTL;DR:", article.trim_end())
}

/// Reads `{"article": str, "summary": str}` JSONL rows (errors name the line).
pub fn read_summarize(path: &Path) -> Result<Vec<SummarizeItem>> {
    let mut items = Vec::new();
    for (line, row) in read_jsonl_objects(path)? {
        items.push(SummarizeItem {
            article: string_field(&row, "article", path, line)?,
            summary: string_field(&row, "summary", path, line)?,
            line,
        });
    }
    if items.is_empty() {
        return Err(DataError::Invalid(format!(
            "{}: no articles",
            path.display()
        )));
    }
    Ok(items)
}

/// The first `n` sentences of generated text: cut after `.`, `!` or `?`
/// followed by whitespace or the end, or at a blank line; whitespace
/// collapsed. Text with no sentence end is returned whole (trimmed).
pub fn first_sentences(text: &str, n: usize) -> String {
    // A blank line ends the summary (the model moved on to something else).
    let text = text
        .split("\n\n")
        .find(|p| !p.trim().is_empty())
        .unwrap_or("");
    let mut out = String::new();
    let mut count = 0;
    let chars: Vec<char> = text.chars().collect();
    let mut cur = String::new();
    for (i, &c) in chars.iter().enumerate() {
        cur.push(c);
        let ends =
            matches!(c, '.' | '!' | '?') && chars.get(i + 1).is_none_or(|n| n.is_whitespace());
        if ends {
            out.push_str(&cur);
            cur.clear();
            count += 1;
            if count == n {
                break;
            }
        }
    }
    if count < n {
        out.push_str(&cur);
    }
    out.split_whitespace().collect::<Vec<_>>().join(" ")
}
