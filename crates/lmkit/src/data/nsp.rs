//! Next-sentence-prediction pairs, sentence- and document-aware, after
//! Google's `create_instances_from_document`.
//!
//! A corpus is a list of documents, each a list of tokenized segments
//! (sentences). Walking a document, segments are gathered into a chunk until
//! it reaches the target length (`max_seq_len − 3` for `[CLS] A [SEP] B
//! [SEP]`; with probability `short_seq_prob` a random shorter target, so the
//! model also sees short inputs). The chunk is cut at a random segment
//! boundary into A and B. With probability 1/2, B is instead taken from a
//! random position of another document (label 1, "random"), and the segments
//! of the chunk that B would have used are put back for the next pair.
//! Finally the pair is truncated to fit, one token at a time from the longer
//! side, at its front or back at random.
//!
//! Changes from Google's code, so that the label balance really is 50/50
//! (Google forces a random B whenever the chunk holds a single segment,
//! which skews real corpora to ~52–56% random): the coin is tossed first,
//! and an "actual next" pair with a one-segment chunk takes the document's
//! following segment as B. A document's last lone segment still has to get
//! a random B; each such forced pair is paid back by turning the next pair
//! whose coin says "random" (and that can be a true pair) into a true pair.

use std::path::PathBuf;

use crate::util::rng::Rng;

use super::{DataError, Result};

/// Pair-building hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct NspConfig {
    /// Total length including `[CLS]` and two `[SEP]` (≥ 5).
    pub max_seq_len: usize,
    /// Probability of a shorter random target length (Google: 0.1).
    pub short_seq_prob: f64,
    /// Probability that B comes from another document (0.5).
    pub random_next_prob: f64,
}

impl NspConfig {
    pub fn new(max_seq_len: usize) -> Self {
        NspConfig {
            max_seq_len,
            short_seq_prob: 0.1,
            random_next_prob: 0.5,
        }
    }
}

/// One pretraining pair before masking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NspPair {
    pub tokens_a: Vec<u32>,
    pub tokens_b: Vec<u32>,
    /// NSP label: `false` (0) = B follows A, `true` (1) = B is random.
    pub is_random_next: bool,
}

impl NspPair {
    /// `[CLS] A [SEP] B [SEP]` and its token types (0 up to the first `[SEP]`, 1 after).
    pub fn to_input(&self, cls_id: u32, sep_id: u32) -> (Vec<u32>, Vec<u32>) {
        let n = self.tokens_a.len() + self.tokens_b.len() + 3;
        let mut ids = Vec::with_capacity(n);
        let mut types = Vec::with_capacity(n);
        ids.push(cls_id);
        ids.extend_from_slice(&self.tokens_a);
        ids.push(sep_id);
        types.resize(ids.len(), 0);
        ids.extend_from_slice(&self.tokens_b);
        ids.push(sep_id);
        types.resize(ids.len(), 1);
        (ids, types)
    }
}

/// Uniform integer in `lo..=hi` (Python's `randint`).
fn randint(rng: &mut Rng, lo: usize, hi: usize) -> usize {
    lo + rng.below((hi - lo + 1) as u64) as usize
}

/// Google's `truncate_seq_pair`: trims the longer side, front or back at random.
fn truncate_pair(a: &mut Vec<u32>, b: &mut Vec<u32>, max_tokens: usize, rng: &mut Rng) {
    while a.len() + b.len() > max_tokens {
        let t = if a.len() > b.len() { &mut *a } else { &mut *b };
        if rng.next_f64() < 0.5 {
            t.remove(0);
        } else {
            t.pop();
        }
    }
}

/// Builds the pairs of every document (in document order; shuffle them
/// afterwards). Empty segments and documents must already be removed.
/// Needs at least two documents (random B comes from another one).
pub fn build_nsp_pairs(
    docs: &[Vec<Vec<u32>>],
    cfg: &NspConfig,
    rng: &mut Rng,
) -> Result<Vec<NspPair>> {
    if cfg.max_seq_len < 5 {
        return Err(DataError::Invalid(format!(
            "sequence length {} is too short for [CLS] A [SEP] B [SEP] (need ≥ 5)",
            cfg.max_seq_len
        )));
    }
    if docs.len() < 2 {
        return Err(DataError::Invalid(format!(
            "next-sentence prediction needs at least 2 documents, found {}",
            docs.len()
        )));
    }
    if let Some(i) = docs
        .iter()
        .position(|d| d.is_empty() || d.iter().any(Vec::is_empty))
    {
        return Err(DataError::Invalid(format!(
            "document {i} is empty or has an empty segment"
        )));
    }
    let mut out = Vec::new();
    let mut owed_next = 0usize;
    for di in 0..docs.len() {
        pairs_of_document(docs, di, cfg, rng, &mut owed_next, &mut out);
    }
    Ok(out)
}

fn pairs_of_document(
    docs: &[Vec<Vec<u32>>],
    di: usize,
    cfg: &NspConfig,
    rng: &mut Rng,
    owed_next: &mut usize,
    out: &mut Vec<NspPair>,
) {
    let doc = &docs[di];
    let max_tokens = cfg.max_seq_len - 3;
    let target_len = if rng.next_f64() < cfg.short_seq_prob {
        randint(rng, 2, max_tokens)
    } else {
        max_tokens
    };
    let mut chunk: Vec<usize> = Vec::new();
    let mut chunk_len = 0usize;
    let mut i = 0usize;
    while i < doc.len() {
        chunk.push(i);
        chunk_len += doc[i].len();
        if i + 1 == doc.len() || chunk_len >= target_len {
            let mut random_next = rng.next_f64() < cfg.random_next_prob;
            let can_be_next = chunk.len() >= 2 || i + 1 < doc.len();
            if random_next && can_be_next && *owed_next > 0 {
                random_next = false;
                *owed_next -= 1;
            } else if !random_next && !can_be_next {
                *owed_next += 1;
            }
            if !random_next && chunk.len() == 1 && i + 1 < doc.len() {
                // The following segment is the true next one.
                i += 1;
                chunk.push(i);
            }
            let a_end = if chunk.len() >= 2 {
                randint(rng, 1, chunk.len() - 1)
            } else {
                1
            };
            let mut a: Vec<u32> = chunk[..a_end]
                .iter()
                .flat_map(|&s| doc[s].iter().copied())
                .collect();
            let mut b: Vec<u32> = Vec::new();
            let is_random_next = random_next || chunk.len() == 1;
            if is_random_next {
                let target_b = target_len.saturating_sub(a.len()).max(1);
                let mut rd = di;
                for _ in 0..10 {
                    rd = randint(rng, 0, docs.len() - 1);
                    if rd != di {
                        break;
                    }
                }
                if rd == di {
                    rd = (di + 1) % docs.len();
                }
                let other = &docs[rd];
                let start = randint(rng, 0, other.len() - 1);
                for seg in &other[start..] {
                    b.extend_from_slice(seg);
                    if b.len() >= target_b {
                        break;
                    }
                }
                // Segments this pair did not use start the next chunk.
                i -= chunk.len() - a_end;
            } else {
                b = chunk[a_end..]
                    .iter()
                    .flat_map(|&s| doc[s].iter().copied())
                    .collect();
            }
            truncate_pair(&mut a, &mut b, max_tokens, rng);
            out.push(NspPair {
                tokens_a: a,
                tokens_b: b,
                is_random_next,
            });
            chunk.clear();
            chunk_len = 0;
        }
        i += 1;
    }
}

/// Splits a document into sentences: paragraphs at blank lines, line breaks
/// inside a paragraph joined with a space, then each paragraph cut as
/// [`split_line`] cuts a line. For hard-wrapped prose (lmkit's page format).
pub fn split_sentences(doc: &str) -> Vec<String> {
    let mut out = Vec::new();
    for para in doc.split("\n\n") {
        cut_sentences(
            &para.split_whitespace().collect::<Vec<_>>().join(" "),
            &mut out,
        );
    }
    out
}

/// Splits one line into sentences: a cut after `.`, `!` or `?` (plus
/// closing quotes/brackets) that is followed by whitespace and an upper-case
/// letter, digit or opening quote. A heuristic (abbreviations such as
/// "e.g. The" over-split). Runs of whitespace become one space; a line with
/// one sentence comes back whole, a blank line as nothing.
pub fn split_line(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    cut_sentences(
        &line.split_whitespace().collect::<Vec<_>>().join(" "),
        &mut out,
    );
    out
}

/// The sentence cut of [`split_line`] on text already joined by single spaces.
fn cut_sentences(joined: &str, out: &mut Vec<String>) {
    if joined.is_empty() {
        return;
    }
    let chars: Vec<(usize, char)> = joined.char_indices().collect();
    let mut start = 0usize;
    let mut k = 0usize;
    while k < chars.len() {
        let (_, c) = chars[k];
        if matches!(c, '.' | '!' | '?') {
            let mut e = k + 1;
            while e < chars.len() && matches!(chars[e].1, '"' | '\'' | ')' | ']' | '”' | '’') {
                e += 1;
            }
            let next = chars.get(e + 1).map(|&(_, c)| c);
            if e < chars.len()
                && chars[e].1 == ' '
                && next.is_some_and(|n| {
                    n.is_uppercase() || n.is_ascii_digit() || matches!(n, '"' | '“' | '(')
                })
            {
                let end = chars[e].0;
                out.push(joined[start..end].to_string());
                start = end + 1;
                k = e + 1;
                continue;
            }
        }
        k += 1;
    }
    if start < joined.len() {
        out.push(joined[start..].to_string());
    }
}

/// Whether a text file is in lmkit's page format: documents between
/// form-feed lines (what `data::html` writes for the quickstart corpus).
fn is_paged(text: &str) -> bool {
    text.starts_with("\u{c}\n") || text.contains("\n\u{c}\n")
}

/// Reads BERT pretraining documents as lists of sentences, in the
/// convention of Google's `create_pretraining_data.py` and HF's
/// `TextDatasetForNextSentencePrediction`: one sentence per line, a blank
/// line between documents, and every file ends a document. A line holding
/// several sentences is cut into them ([`split_line`]). JSONL and Parquet
/// files: each row's `field` (`text` as a rule) is a document, its lines
/// read the same way. Text files in
/// lmkit's page format (documents between form-feed lines) keep it: each
/// page is a document of hard-wrapped paragraphs ([`split_sentences`]).
/// Documents without a sentence are dropped.
pub fn read_bert_documents(paths: &[PathBuf], field: &str) -> Result<Vec<Vec<String>>> {
    let lines_doc = |text: &str| -> Vec<String> { text.lines().flat_map(split_line).collect() };
    let mut docs: Vec<Vec<String>> = Vec::new();
    for f in super::shards::list_sources(paths)? {
        if super::source::is_rows(&f) {
            super::classify_data::for_each_jsonl_object(&f, |line, row| {
                let text = super::classify_data::string_field(&row, field, &f, line)?;
                docs.push(lines_doc(&text));
                Ok(())
            })?;
            continue;
        }
        let text = super::source::read_source_text(&f)?;
        if is_paged(&text) {
            docs.extend(text.split("\n\u{c}\n").map(split_sentences));
            continue;
        }
        let mut doc = Vec::new();
        for line in text.lines() {
            if line.trim().is_empty() {
                docs.push(std::mem::take(&mut doc));
            } else {
                doc.extend(split_line(line));
            }
        }
        docs.push(doc);
    }
    docs.retain(|d| !d.is_empty());
    Ok(docs)
}

/// Reads documents from text files (split at form-feed lines `\n\f\n`) and
/// JSONL and Parquet files (the `text` field of each row), files and directories
/// expanded as `prepare_shards` does.
pub fn read_documents(paths: &[PathBuf]) -> Result<Vec<String>> {
    read_documents_field(paths, "text")
}

/// [`read_documents`] with the text of JSONL rows in `field`.
pub fn read_documents_field(paths: &[PathBuf], field: &str) -> Result<Vec<String>> {
    let mut docs = Vec::new();
    for f in super::shards::list_sources(paths)? {
        docs.extend(super::shards::file_documents(&f, field)?);
    }
    Ok(docs)
}
