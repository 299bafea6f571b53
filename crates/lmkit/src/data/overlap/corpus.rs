//! The overlap's corpora: the training text streamed, counted and
//! hashed into a filter ([`build_filter`]), and the evaluation documents
//! read, measured ([`overlap_report`]) and written back clean.

use std::io::BufRead;
use std::path::{Path, PathBuf};

use rayon::prelude::*;
use serde_json::Value;

use super::{
    filter_bytes, ngram_hashes, segment_ngrams, word_hashes, BloomFilter, DocOverlap, NgramHash,
    BATCH_BYTES, MAX_N,
};
use crate::data::{io_err, DataError, Result};

/// One batch of training text from [`stream_training`].
enum Batch {
    /// Lines of a text file: one stream of words across lines; lmkit's
    /// form-feed page lines end a segment.
    Lines(Vec<String>),
    /// The texts of JSONL / Parquet rows, each a segment of its own.
    Rows(Vec<String>),
}

impl Batch {
    fn bytes(&self) -> u64 {
        let (Batch::Lines(v) | Batch::Rows(v)) = self;
        v.iter().map(|l| l.len() as u64).sum()
    }
}

/// Training text as the pretraining commands read it: text files and the
/// `field` of JSONL / Parquet rows, files and folders expanded as `pretrain`
/// does. `each` gets one batch of about 8 MiB at a time.
fn stream_training(
    paths: &[PathBuf],
    field: &str,
    mut each: impl FnMut(&Path, Batch) -> Result<()>,
) -> Result<()> {
    for f in crate::data::shards::list_sources(paths)? {
        if crate::data::source::is_rows(&f) {
            let (mut texts, mut bytes) = (Vec::new(), 0);
            crate::data::classify_data::for_each_jsonl_object(&f, |line, row| {
                let text = crate::data::classify_data::string_field(&row, field, &f, line)?;
                bytes += text.len();
                texts.push(text);
                if bytes >= BATCH_BYTES {
                    bytes = 0;
                    each(&f, Batch::Rows(std::mem::take(&mut texts)))?;
                }
                Ok(())
            })?;
            if !texts.is_empty() {
                each(&f, Batch::Rows(texts))?;
            }
            continue;
        }
        let mut r = crate::data::source::open_source(&f)?;
        loop {
            let (mut lines, mut bytes) = (Vec::new(), 0);
            while bytes < BATCH_BYTES {
                let mut line = String::new();
                let got = r.read_line(&mut line).map_err(io_err(&f))?;
                if got == 0 {
                    break;
                }
                bytes += got;
                lines.push(line);
            }
            if lines.is_empty() {
                break;
            }
            each(&f, Batch::Lines(lines))?;
        }
    }
    Ok(())
}

/// Counts the n-grams of the training text (the filter's size), a cheap
/// pass: words are counted, not hashed.
pub fn count_training_ngrams(paths: &[PathBuf], field: &str, n: usize) -> Result<(u64, u64)> {
    let words_in = |s: &str| -> u64 {
        s.to_lowercase()
            .split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .count() as u64
    };
    let (mut ngrams, mut bytes) = (0u64, 0u64);
    let mut run = 0u64; // words of the current text segment
    let mut last: Option<PathBuf> = None;
    stream_training(paths, field, |f, batch| {
        if last.as_deref() != Some(f) {
            ngrams += run.saturating_sub(n as u64 - 1);
            run = 0;
            last = Some(f.to_path_buf());
        }
        bytes += batch.bytes();
        match batch {
            Batch::Rows(texts) => {
                ngrams += texts
                    .par_iter()
                    .map(|t| words_in(t).saturating_sub(n as u64 - 1))
                    .sum::<u64>();
            }
            Batch::Lines(lines) => {
                let counts: Vec<u64> = lines.par_iter().map(|l| words_in(l)).collect();
                for (l, c) in lines.iter().zip(counts) {
                    if l.trim_end_matches(['\n', '\r']) == "\u{c}" {
                        ngrams += run.saturating_sub(n as u64 - 1);
                        run = 0;
                    } else {
                        run += c;
                    }
                }
            }
        }
        Ok(())
    })?;

    ngrams += run.saturating_sub(n as u64 - 1);
    Ok((ngrams, bytes))
}

/// Options of [`build_filter`].
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Words per n-gram (8 in the paper).
    pub n: usize,
    /// False-positive rate the filter is sized for (1e-8 in the paper).
    pub fp_rate: f64,
    /// Largest filter to allocate, bytes: a larger one is refused up front.
    pub max_memory: u64,
    /// The field of JSONL / Parquet training rows that holds the text.
    pub text_field: String,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions {
            n: 8,
            fp_rate: 1e-8,
            max_memory: 4 << 30,
            text_field: crate::data::DEFAULT_TEXT_FIELD.to_string(),
        }
    }
}

/// Builds the filter of the training text at `paths`: a counting pass
/// sizes it (refused if over `max_memory`), then every n-gram is hashed and
/// inserted, in parallel. `progress(bytes_done, bytes_total)` is called per
/// batch of the second pass.
pub fn build_filter(
    paths: &[PathBuf],
    opts: &BuildOptions,
    mut progress: impl FnMut(u64, u64),
) -> Result<BloomFilter> {
    if !(1..=MAX_N).contains(&opts.n) {
        return Err(DataError::Invalid(format!(
            "n-grams of {} words: n must be between 1 and {MAX_N}",
            opts.n
        )));
    }
    let (ngrams, total) = count_training_ngrams(paths, &opts.text_field, opts.n)?;
    let need = filter_bytes(ngrams, opts.fp_rate)?;
    if need > opts.max_memory {
        return Err(DataError::Invalid(format!(
            "the training text has {ngrams} {}-grams: a filter at false-positive rate {} needs {:.2} GiB, \
             over the limit of {:.2} GiB (raise the memory limit or the false-positive rate)",
            opts.n,
            opts.fp_rate,
            need as f64 / (1u64 << 30) as f64,
            opts.max_memory as f64 / (1u64 << 30) as f64
        )));
    }
    let filter = BloomFilter::new(opts.n, ngrams, opts.fp_rate)?;
    let n = opts.n;
    let mut carry: Vec<NgramHash> = Vec::new(); // last n-1 words of the text segment so far
    let mut last: Option<PathBuf> = None;
    let mut done = 0u64;
    stream_training(paths, &opts.text_field, |f, batch| {
        if last.as_deref() != Some(f) {
            carry.clear();
            last = Some(f.to_path_buf());
        }
        done += batch.bytes();
        match batch {
            Batch::Rows(texts) => {
                let rows: Vec<Vec<NgramHash>> =
                    texts.par_iter().map(|t| segment_ngrams(t, n)).collect();
                for r in rows {
                    filter.insert_all(&r);
                }
            }
            Batch::Lines(lines) => {
                let per_line: Vec<Vec<NgramHash>> = lines
                    .par_iter()
                    .map(|l| {
                        let mut w = Vec::new();
                        word_hashes(l, &mut w);
                        w
                    })
                    .collect();
                // One word stream across lines; a page line ends the segment.
                let mut stream = std::mem::take(&mut carry);
                let mut hashes = Vec::new();
                for (l, w) in lines.iter().zip(per_line) {
                    if l.trim_end_matches(['\n', '\r']) == "\u{c}" {
                        ngram_hashes(&stream, n, &mut hashes);
                        stream.clear();
                    } else {
                        stream.extend(w);
                    }
                }
                ngram_hashes(&stream, n, &mut hashes);
                carry = stream[stream.len().saturating_sub(n - 1)..].to_vec();
                filter.insert_all(&hashes);
            }
        }
        progress(done, total);
        Ok(())
    })?;

    Ok(filter)
}

/// What file an evaluation document came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DocKind {
    /// A block of a text file.
    Text,
    /// A row of a JSONL file.
    Jsonl,
    /// A question of a SQuAD JSON file (its `raw` is the question's id).
    Squad,
}

/// A document of an evaluation set: its text segments (n-grams stay
/// within one) and what `write_clean` writes back for it.
#[derive(Debug, Clone, PartialEq)]
pub struct EvalDocument {
    pub segments: Vec<String>,
    /// The document as it was in its file: a JSONL line, a text block, or
    /// a SQuAD question's id.
    pub raw: String,
    pub kind: DocKind,
}

/// Reads evaluation documents: text files (a blank line between documents),
/// JSONL (each row a document; its string fields, nested ones included, are
/// its segments — LAMBADA's `text`, TL;DR's `article` and `summary`, a
/// classification set's `text` and `text_pair`), and SQuAD JSON (`.json`:
/// each question a document of its context and question, as `eval --task
/// squad` scores them).
pub fn read_eval_documents(paths: &[PathBuf]) -> Result<Vec<EvalDocument>> {
    fn strings(v: &Value, out: &mut Vec<String>) {
        match v {
            Value::String(s) => out.push(s.clone()),
            Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
            Value::Object(o) => o.values().for_each(|x| strings(x, out)),
            _ => {}
        }
    }
    let mut docs = Vec::new();
    for f in crate::data::shards::list_sources(paths)? {
        if crate::data::source::text_extension(&f).as_deref() == Some("json") {
            for e in crate::data::squad::read_squad(&f)? {
                docs.push(EvalDocument {
                    segments: vec![e.context.to_string(), e.question],
                    raw: e.id,
                    kind: DocKind::Squad,
                });
            }
            continue;
        }
        let text = crate::data::source::read_source_text(&f)?;
        if crate::data::source::is_jsonl(&f) {
            for (i, line) in text.lines().enumerate() {
                if line.trim().is_empty() {
                    continue;
                }
                let v: Value = serde_json::from_str(line).map_err(|e| DataError::Parse {
                    path: f.clone(),
                    line: i + 1,
                    message: e.to_string(),
                })?;
                let mut segments = Vec::new();
                strings(&v, &mut segments);
                docs.push(EvalDocument {
                    segments,
                    raw: line.to_string(),
                    kind: DocKind::Jsonl,
                });
            }
        } else {
            let mut block: Vec<&str> = Vec::new();
            for line in text.lines().chain(std::iter::once("")) {
                if line.trim().is_empty() || line == "\u{c}" {
                    if !block.is_empty() {
                        let raw = block.join("\n");
                        docs.push(EvalDocument {
                            segments: vec![raw.clone()],
                            raw,
                            kind: DocKind::Text,
                        });
                        block.clear();
                    }
                } else {
                    block.push(line);
                }
            }
        }
    }
    Ok(docs)
}

/// What [`overlap_report`] finds.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct OverlapReport {
    pub n: usize,
    pub documents: usize,
    /// N-grams of the evaluation set, and those found in the filter.
    pub ngrams: usize,
    pub hits: usize,
    /// `hits / ngrams`: the paper's "percentage of test set 8-grams".
    pub share: f64,
    /// Documents by share, in tenths: `[0, 0.1)`, … `[0.9, 1]` (those with
    /// at least one n-gram).
    pub histogram: [usize; 10],
    /// Documents shorter than n words: no n-gram, share 0, not in the histogram.
    pub too_short: usize,
    /// Documents whose share is above this are "overlapping".
    pub threshold: f64,
    /// Their indices.
    pub overlapping: Vec<usize>,
    /// Each document's counts.
    pub per_document: Vec<DocOverlap>,
    /// The filter's false-positive rate at its fill.
    pub filter_fp_rate: f64,
}

/// Measures `docs` against `filter`: overall, per document, the
/// histogram, and the documents with a share above `threshold`.
pub fn overlap_report(
    filter: &BloomFilter,
    docs: &[EvalDocument],
    threshold: f64,
) -> OverlapReport {
    let per_document: Vec<DocOverlap> = docs
        .par_iter()
        .map(|d| filter.doc_overlap(&d.segments))
        .collect();
    let (ngrams, hits) = per_document
        .iter()
        .fold((0, 0), |(n, h), d| (n + d.ngrams, h + d.hits));
    let mut histogram = [0usize; 10];
    for d in per_document.iter().filter(|d| d.ngrams > 0) {
        histogram[((d.share() * 10.0) as usize).min(9)] += 1;
    }
    let too_short = per_document.iter().filter(|d| d.ngrams == 0).count();
    let overlapping = per_document
        .iter()
        .enumerate()
        .filter(|(_, d)| d.share() > threshold)
        .map(|(i, _)| i)
        .collect();
    OverlapReport {
        n: filter.n(),
        documents: docs.len(),
        ngrams,
        hits,
        share: if ngrams == 0 {
            0.0
        } else {
            hits as f64 / ngrams as f64
        },
        histogram,
        too_short,
        threshold,
        overlapping,
        per_document,
        filter_fp_rate: filter.expected_fp_rate(),
    }
}

/// The documents not in `overlapping` as the text of a file of their own
/// format (JSONL lines, or text blocks with a blank line between), and
/// their count.
pub fn clean_text(docs: &[EvalDocument], overlapping: &[usize]) -> Result<(String, usize)> {
    if docs.iter().any(|d| d.kind == DocKind::Squad) {
        return Err(DataError::Invalid(
            "a clean SQuAD file is not written: the report lists each question's overlap \
             (its id is the document's `raw`), or use `eval --task squad --overlap`"
                .into(),
        ));
    }
    if docs.windows(2).any(|w| w[0].kind != w[1].kind) {
        return Err(DataError::Invalid(
            "the evaluation files mix JSONL and text: write the clean set of each kind separately"
                .into(),
        ));
    }
    let skip: std::collections::HashSet<usize> = overlapping.iter().copied().collect();
    let kept: Vec<&EvalDocument> = docs
        .iter()
        .enumerate()
        .filter(|(i, _)| !skip.contains(i))
        .map(|(_, d)| d)
        .collect();
    let sep = if docs.first().is_some_and(|d| d.kind == DocKind::Jsonl) {
        "\n"
    } else {
        "\n\n"
    };
    let mut text = kept
        .iter()
        .map(|d| d.raw.as_str())
        .collect::<Vec<_>>()
        .join(sep);
    if !kept.is_empty() {
        text.push('\n');
    }
    Ok((text, kept.len()))
}
