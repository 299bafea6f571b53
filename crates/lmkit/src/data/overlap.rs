//! Train–test overlap as the GPT-2 paper measures it (section 4,
//! "Generalization vs Memorization"): every n-gram (8 words by default) of
//! the training text goes into a Bloom filter sized for a false-positive
//! rate (1e-8 in the paper); an evaluation text's overlap is the share of
//! its n-grams found in the filter, overall and per document.
//!
//! Normalization, as the paper's: lower-cased, words are the runs of letters
//! and digits, everything else separates words — Python's
//! `re.findall(r"[^\W_]+", text.lower())`. N-grams never cross a segment:
//! a JSONL row's string field, a page of lmkit's page format, a training
//! file. A Bloom filter has no false negatives, so a measured share is at
//! least the exact one and exceeds it only by false positives, at most the
//! filter's rate in expectation.
//!
//! The filter is a file (`overlap.bloom`): a versioned header, the bits, a
//! checksum; written atomically, checked on load before anything is
//! allocated from its header.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;
use serde_json::Value;

use super::{io_err, DataError, Result};

/// An n-gram's two 64-bit hashes (double hashing: probe `i` is `a + i·b`).
pub type NgramHash = (u64, u64);

const MAGIC: &[u8; 8] = b"LMKBLOOM";
const VERSION: u32 = 1;
/// Id of the normalization + hash scheme of this file version.
const SCHEME: u32 = 1;
/// magic, version, scheme, n, k, m_bits, inserted, fp_rate.
const HEADER: usize = 8 + 4 * 4 + 8 * 3;
/// Longest n-gram a filter may use.
pub const MAX_N: usize = 64;
/// Most probes per n-gram (1e-19 needs 63).
const MAX_K: u32 = 64;
/// Lines read per parallel batch when streaming training text.
const BATCH_BYTES: usize = 8 << 20;

/// The words of `text` after the paper's normalization (for tests and
/// reports; hashing does not allocate per word).
pub fn normalized_words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// `splitmix64`'s finalizer: a bijective 64-bit mix.
fn fmix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A seeded 64-bit hash of bytes, 8 at a time. Fixed here (not `std`'s
/// hasher, whose output may change between Rust versions): the filter file
/// depends on it.
fn hash_bytes(bytes: &[u8], seed: u64) -> u64 {
    let mut h = fmix(seed ^ (bytes.len() as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        h = fmix(h ^ u64::from_le_bytes(w)).wrapping_add(0x9E37_79B9_7F4A_7C15);
    }
    let mut tail = [0u8; 8];
    tail[..chunks.remainder().len()].copy_from_slice(chunks.remainder());
    fmix(h ^ u64::from_le_bytes(tail) ^ 0xA076_1D64_78BD_642F)
}

const SEEDS: (u64, u64) = (0x5851_F42D_4C95_7F2D, 0x1405_7B7E_F767_814F);

/// Appends the (two) hashes of each normalized word of `text` to `out`.
fn word_hashes(text: &str, out: &mut Vec<NgramHash>) {
    let lower = text.to_lowercase();
    for w in lower.split(|c: char| !c.is_alphanumeric()) {
        if !w.is_empty() {
            out.push((
                hash_bytes(w.as_bytes(), SEEDS.0),
                hash_bytes(w.as_bytes(), SEEDS.1),
            ));
        }
    }
}

/// The n-gram hashes of a run of word hashes: one per window of `n` words.
fn ngram_hashes(words: &[NgramHash], n: usize, out: &mut Vec<NgramHash>) {
    for win in words.windows(n) {
        let (mut a, mut b) = (SEEDS.0, SEEDS.1);
        for &(x, y) in win {
            a = fmix(a ^ x);
            b = fmix(b ^ y);
        }
        out.push((a, b | 1)); // an odd step visits distinct bits
    }
}

/// The n-gram hashes of one segment of text.
fn segment_ngrams(text: &str, n: usize) -> Vec<NgramHash> {
    let mut words = Vec::new();
    word_hashes(text, &mut words);
    let mut out = Vec::with_capacity(words.len().saturating_sub(n - 1));
    ngram_hashes(&words, n, &mut out);
    out
}

/// Bits and probes of a filter for `ngrams` insertions at `fp_rate`:
/// `m = -N ln p / (ln 2)²`, `k = (m / N) ln 2`.
pub fn filter_size(ngrams: u64, fp_rate: f64) -> Result<(u64, u32)> {
    if !(fp_rate > 0.0 && fp_rate < 1.0) {
        return Err(DataError::Invalid(format!(
            "the false-positive rate must be in (0, 1), not {fp_rate}"
        )));
    }
    let n = ngrams.max(1) as f64;
    let ln2 = std::f64::consts::LN_2;
    let mut m = (-n * fp_rate.ln() / (ln2 * ln2)).ceil().max(64.0);
    let k = ((m / n) * ln2).round().clamp(1.0, MAX_K as f64);
    // k is rounded: grow m until the rate at k is within the target.
    while (1.0 - (-k * n / m).exp()).powf(k) > fp_rate {
        m = (m * 1.0005).ceil();
    }
    Ok((m as u64, k as u32))
}

/// Bytes of the filter file for `ngrams` insertions at `fp_rate`.
pub fn filter_bytes(ngrams: u64, fp_rate: f64) -> Result<u64> {
    let (m, _) = filter_size(ngrams, fp_rate)?;
    Ok(m.div_ceil(64) * 8 + HEADER as u64 + 8)
}

/// A Bloom filter of n-grams; safe to fill from many threads at once.
#[derive(Debug)]
pub struct BloomFilter {
    n: usize,
    k: u32,
    m: u64,
    bits: Vec<AtomicU64>,
    inserted: AtomicU64,
    fp_rate: f64,
}

/// How much of one document is in the filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct DocOverlap {
    /// The document's n-grams (with repeats).
    pub ngrams: usize,
    /// Those found in the filter.
    pub hits: usize,
}

impl DocOverlap {
    /// `hits / ngrams`; 0 for a document shorter than n words.
    pub fn share(&self) -> f64 {
        if self.ngrams == 0 {
            0.0
        } else {
            self.hits as f64 / self.ngrams as f64
        }
    }
}

impl BloomFilter {
    /// An empty filter of `n`-grams sized for `ngrams` insertions at `fp_rate`.
    pub fn new(n: usize, ngrams: u64, fp_rate: f64) -> Result<Self> {
        if !(1..=MAX_N).contains(&n) {
            return Err(DataError::Invalid(format!(
                "n-grams of {n} words: n must be between 1 and {MAX_N}"
            )));
        }
        let (m, k) = filter_size(ngrams, fp_rate)?;
        let words = usize::try_from(m.div_ceil(64))
            .map_err(|_| DataError::Invalid(format!("a filter of {m} bits is too large")))?;
        Ok(BloomFilter {
            n,
            k,
            m,
            bits: (0..words).map(|_| AtomicU64::new(0)).collect(),
            inserted: AtomicU64::new(0),
            fp_rate,
        })
    }

    /// Words per n-gram.
    pub fn n(&self) -> usize {
        self.n
    }

    /// Probes per n-gram.
    pub fn k(&self) -> u32 {
        self.k
    }

    /// Bits of the filter.
    pub fn bits(&self) -> u64 {
        self.m
    }

    /// N-grams inserted (repeats counted: an upper bound on distinct ones).
    pub fn inserted(&self) -> u64 {
        self.inserted.load(Ordering::Relaxed)
    }

    /// The false-positive rate it was sized for.
    pub fn target_fp_rate(&self) -> f64 {
        self.fp_rate
    }

    /// The false-positive rate its fill gives, `(1 - e^{-k·N/m})^k` (an
    /// upper bound: N counts repeats).
    pub fn expected_fp_rate(&self) -> f64 {
        let (k, n, m) = (self.k as f64, self.inserted() as f64, self.m as f64);
        (1.0 - (-k * n / m).exp()).powf(k)
    }

    fn probe(&self, (a, b): NgramHash, i: u32) -> (usize, u64) {
        let x = a.wrapping_add((i as u64).wrapping_mul(b));
        // Lemire's range reduction: uniform over [0, m) without a division.
        let bit = ((x as u128 * self.m as u128) >> 64) as u64;
        ((bit / 64) as usize, 1u64 << (bit % 64))
    }

    pub fn insert_hash(&self, h: NgramHash) {
        for i in 0..self.k {
            let (w, mask) = self.probe(h, i);
            self.bits[w].fetch_or(mask, Ordering::Relaxed);
        }
    }

    pub fn contains_hash(&self, h: NgramHash) -> bool {
        (0..self.k).all(|i| {
            let (w, mask) = self.probe(h, i);
            self.bits[w].load(Ordering::Relaxed) & mask != 0
        })
    }

    /// Inserts every n-gram of `text` (one segment), in parallel.
    pub fn insert_text(&self, text: &str) {
        self.insert_all(&segment_ngrams(text, self.n));
    }

    fn insert_all(&self, hashes: &[NgramHash]) {
        hashes
            .par_chunks(4096)
            .for_each(|c| c.iter().for_each(|&h| self.insert_hash(h)));
        self.inserted
            .fetch_add(hashes.len() as u64, Ordering::Relaxed);
    }

    /// The overlap of a document made of `segments` (n-grams within each).
    pub fn doc_overlap<S: AsRef<str>>(&self, segments: &[S]) -> DocOverlap {
        let mut d = DocOverlap::default();
        for s in segments {
            let hashes = segment_ngrams(s.as_ref(), self.n);
            d.ngrams += hashes.len();
            d.hits += hashes.iter().filter(|&&h| self.contains_hash(h)).count();
        }
        d
    }

    /// The file's bytes: header, bits (little-endian u64), checksum.
    fn to_bytes_header(&self) -> Vec<u8> {
        let mut h = Vec::with_capacity(HEADER);
        h.extend_from_slice(MAGIC);
        for v in [VERSION, SCHEME, self.n as u32, self.k] {
            h.extend_from_slice(&v.to_le_bytes());
        }
        h.extend_from_slice(&self.m.to_le_bytes());
        h.extend_from_slice(&self.inserted().to_le_bytes());
        h.extend_from_slice(&self.fp_rate.to_le_bytes());
        h
    }

    /// Writes the filter to `path` atomically.
    pub fn save(&self, path: &Path) -> Result<()> {
        crate::util::fs::atomic_write_with(path, |w| self.write_to(w))
            .map_err(|e| DataError::Invalid(e.to_string()))
    }

    /// Writes the filter in [`Self::save`]'s format (to a file or stdout).
    pub fn write_to(&self, w: &mut dyn std::io::Write) -> std::io::Result<()> {
        let header = self.to_bytes_header();
        let mut sum = Checksum::new();
        sum.update(&header);
        w.write_all(&header)?;
        let mut buf = Vec::with_capacity(1 << 16);
        for chunk in self.bits.chunks(8192) {
            buf.clear();
            for b in chunk {
                buf.extend_from_slice(&b.load(Ordering::Relaxed).to_le_bytes());
            }
            sum.update(&buf);
            w.write_all(&buf)?;
        }
        w.write_all(&sum.finish().to_le_bytes())
    }

    /// Reads a filter written by [`Self::save`].
    pub fn load(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(io_err(path))?;
        Self::from_bytes(&bytes).map_err(|message| DataError::Parse {
            path: path.to_path_buf(),
            line: 0,
            message,
        })
    }

    /// Parses a filter file; every size is checked against the file's
    /// length before anything is allocated.
    pub fn from_bytes(bytes: &[u8]) -> std::result::Result<Self, String> {
        if bytes.len() < HEADER + 8 || &bytes[..8] != MAGIC {
            return Err("not an lmkit overlap filter (no LMKBLOOM header)".into());
        }
        let u32_at =
            |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
        let u64_at = |o: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[o..o + 8]);
            u64::from_le_bytes(w)
        };
        let (version, scheme, n, k) = (u32_at(8), u32_at(12), u32_at(16) as usize, u32_at(20));
        if version != VERSION || scheme != SCHEME {
            return Err(format!(
                "filter format {version}.{scheme}; this lmkit reads {VERSION}.{SCHEME}: rebuild it"
            ));
        }
        if !(1..=MAX_N).contains(&n) || !(1..=MAX_K).contains(&k) {
            return Err(format!("bad filter header: n = {n}, k = {k}"));
        }
        let (m, inserted, fp_rate) = (u64_at(24), u64_at(32), f64::from_bits(u64_at(40)));
        let words = m.div_ceil(64);
        let want = words
            .checked_mul(8)
            .and_then(|b| b.checked_add((HEADER + 8) as u64));
        if m == 0 || want != Some(bytes.len() as u64) {
            return Err(format!(
                "a filter of {m} bits needs {} bytes, the file has {}",
                want.map_or("too many".into(), |w| w.to_string()),
                bytes.len()
            ));
        }
        if !(fp_rate > 0.0 && fp_rate < 1.0) {
            return Err(format!("bad filter header: false-positive rate {fp_rate}"));
        }
        let body = &bytes[..bytes.len() - 8];
        let mut sum = Checksum::new();
        sum.update(body);
        if sum.finish() != u64_at(bytes.len() - 8) {
            return Err("checksum mismatch: the filter file is damaged".into());
        }
        let bits = body[HEADER..]
            .chunks_exact(8)
            .map(|c| {
                let mut w = [0u8; 8];
                w.copy_from_slice(c);
                AtomicU64::new(u64::from_le_bytes(w))
            })
            .collect();
        Ok(BloomFilter {
            n,
            k,
            m,
            bits,
            inserted: AtomicU64::new(inserted),
            fp_rate,
        })
    }
}

/// A streaming checksum over the file (the 64-bit hash above, chained over
/// 64 KiB blocks, so writing never holds the whole file).
struct Checksum {
    h: u64,
    pending: Vec<u8>,
}

impl Checksum {
    const BLOCK: usize = 1 << 16;

    fn new() -> Self {
        Checksum {
            h: 0x243F_6A88_85A3_08D3,
            pending: Vec::with_capacity(Self::BLOCK),
        }
    }

    fn update(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let take = (Self::BLOCK - self.pending.len()).min(bytes.len());
            self.pending.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.pending.len() == Self::BLOCK {
                self.h = hash_bytes(&self.pending, self.h);
                self.pending.clear();
            }
        }
    }

    fn finish(mut self) -> u64 {
        if !self.pending.is_empty() {
            self.h = hash_bytes(&self.pending, self.h);
        }
        self.h
    }
}

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
    for f in super::shards::list_sources(paths)? {
        if super::source::is_rows(&f) {
            let (mut texts, mut bytes) = (Vec::new(), 0);
            super::classify_data::for_each_jsonl_object(&f, |line, row| {
                let text = super::classify_data::string_field(&row, field, &f, line)?;
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
        let mut r = super::source::open_source(&f)?;
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
            text_field: super::DEFAULT_TEXT_FIELD.to_string(),
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
    for f in super::shards::list_sources(paths)? {
        if super::source::text_extension(&f).as_deref() == Some("json") {
            for e in super::squad::read_squad(&f)? {
                docs.push(EvalDocument {
                    segments: vec![e.context.to_string(), e.question],
                    raw: e.id,
                    kind: DocKind::Squad,
                });
            }
            continue;
        }
        let text = super::source::read_source_text(&f)?;
        if super::source::is_jsonl(&f) {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_is_lowercase_alphanumeric_words() {
        assert_eq!(
            normalized_words("Hello, World! It's 2024 — naïve_café ΣΑΣ"),
            ["hello", "world", "it", "s", "2024", "naïve", "café", "σας"]
        );
    }

    #[test]
    fn ngrams_are_windows_and_found_after_insertion() {
        let f = BloomFilter::new(3, 100, 1e-6).unwrap();
        f.insert_text("a b c d");
        assert_eq!(f.inserted(), 2);
        let d = f.doc_overlap(&["A, B; c!", "b c d e", "x y"]);
        assert_eq!(d, DocOverlap { ngrams: 3, hits: 2 });
        let bytes = {
            let dir = std::env::temp_dir().join(format!("lmkit-bloom-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let p = dir.join("f.bloom");
            f.save(&p).unwrap();
            let b = std::fs::read(&p).unwrap();
            let g = BloomFilter::load(&p).unwrap();
            assert_eq!(
                g.doc_overlap(&["b c d e"]),
                DocOverlap { ngrams: 2, hits: 1 }
            );
            std::fs::remove_dir_all(&dir).unwrap();
            b
        };
        // Any damage is refused: a flipped bit, a cut file, another version.
        let mut bad = bytes.clone();
        bad[HEADER + 1] ^= 1;
        assert!(BloomFilter::from_bytes(&bad)
            .unwrap_err()
            .contains("checksum"));
        assert!(BloomFilter::from_bytes(&bytes[..bytes.len() - 9]).is_err());
        let mut v2 = bytes.clone();
        v2[8] = 2;
        assert!(BloomFilter::from_bytes(&v2).unwrap_err().contains("format"));
        let mut huge = bytes;
        huge[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(BloomFilter::from_bytes(&huge).is_err());
    }

    #[test]
    fn sizing_follows_the_bloom_formulas() {
        let (m, k) = filter_size(1_000_000, 1e-8).unwrap();
        // m/N = -ln(1e-8) / ln(2)^2 = 38.34 bits, k = 26.6 -> 27 (and m
        // grown a little so that the rate at k = 27 stays within 1e-8).
        assert!((38.34..38.4).contains(&(m as f64 / 1e6)), "{m}");
        assert_eq!(k, 27);
        let rate = (1.0 - (-27.0 * 1e6 / m as f64).exp()).powf(27.0);
        assert!(rate <= 1e-8, "{rate}");
        assert!(filter_size(10, 0.0).is_err() && filter_size(10, 1.0).is_err());
        assert!(BloomFilter::new(0, 10, 0.1).is_err());
    }
}
