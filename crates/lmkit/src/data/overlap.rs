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
//!
//! This file holds the hashing and the filter; `corpus` the training and
//! evaluation texts.

mod corpus;
#[cfg(test)]
mod tests;

pub use corpus::{
    build_filter, clean_text, count_training_ngrams, overlap_report, read_eval_documents,
    BuildOptions, DocKind, EvalDocument, OverlapReport,
};

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use rayon::prelude::*;

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
