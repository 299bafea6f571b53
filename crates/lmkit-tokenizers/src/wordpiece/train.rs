//! Learning a WordPiece vocabulary, the way HF's `WordPieceTrainer` does: BERT
//! normalization and pre-tokenization, word counts, then BPE merges over the
//! characters of each word where every non-initial symbol carries the `##`
//! prefix. The vocabulary is the special tokens, the alphabet, its `##`
//! forms, then one token per merge.
//!
//! Unlike HF (whose id order depends on hash-map iteration), the result is
//! deterministic: the alphabet is sorted by code point and ties between
//! equally frequent pairs go to the pair with the smaller ids.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::Path;

use rayon::prelude::*;
use rustc_hash::FxHashMap;

use super::normalizer::{BertNormalizer, WordBuf};
use super::{WordPieceOptions, WordPieceTokenizer};
use crate::{Error, Result};

/// Training settings (HF `BertWordPieceTokenizer.train` defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WordPieceTrainer {
    /// Target vocabulary size, special tokens and alphabet included.
    pub vocab_size: usize,
    /// Pairs seen fewer times than this are never merged.
    pub min_frequency: u64,
    /// Keep only this many of the most frequent characters.
    pub limit_alphabet: Option<usize>,
    /// Normalization and special tokens of the tokenizer being trained.
    pub options: WordPieceOptions,
}

impl Default for WordPieceTrainer {
    fn default() -> Self {
        Self {
            vocab_size: 30_000,
            min_frequency: 2,
            limit_alphabet: Some(1000),
            options: Default::default(),
        }
    }
}

/// Progress reports, for a progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrainProgress {
    /// Counting words: bytes of text processed so far.
    Counting { done_bytes: u64, total_bytes: u64 },
    /// Learning merges: the vocabulary has grown to `vocab_size` of `target`.
    Merging { vocab_size: usize, target: usize },
}

/// Trains on UTF-8 files; invalid UTF-8 is an error naming the file and line.
pub fn train_wordpiece_files<P: AsRef<Path>>(
    files: &[P],
    trainer: &WordPieceTrainer,
    progress: impl FnMut(TrainProgress),
) -> Result<WordPieceTokenizer> {
    let mut texts = Vec::with_capacity(files.len());
    for f in files {
        let path = f.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            let at = e.utf8_error().valid_up_to();
            let line = 1 + e.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count();
            Error::InvalidInput(format!(
                "{}:{line}: invalid UTF-8 (byte {at})",
                path.display()
            ))
        })?;
        texts.push(text);
    }
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    train_wordpiece(&refs, trainer, progress)
}

/// Trains on texts in memory.
pub fn train_wordpiece(
    texts: &[&str],
    trainer: &WordPieceTrainer,
    mut progress: impl FnMut(TrainProgress),
) -> Result<WordPieceTokenizer> {
    let o = &trainer.options;
    if trainer.vocab_size == 0 {
        return Err(Error::InvalidOption("vocab_size must be positive".into()));
    }
    if trainer.vocab_size > crate::MAX_VOCAB_SIZE {
        return Err(Error::InvalidOption(format!(
            "vocab_size {} is above the limit of {}",
            trainer.vocab_size,
            crate::MAX_VOCAB_SIZE
        )));
    }
    if o.continuing_subword_prefix.is_empty() {
        return Err(Error::InvalidOption(
            "continuing_subword_prefix must not be empty".into(),
        ));
    }
    let counts = count_words(
        texts,
        &BertNormalizer::new(o.normalizer_config()),
        &mut progress,
    );

    let (mut vocab, initial, continuing) = base_vocab(trainer, &counts);
    let (mut words, freqs) = symbol_words(counts, &initial, &continuing);
    let prefix = o.continuing_subword_prefix.as_str();

    let mut pair_counts: FxHashMap<(u32, u32), i64> = FxHashMap::default();
    let mut where_: FxHashMap<(u32, u32), Vec<u32>> = FxHashMap::default();
    for (wi, w) in words.iter().enumerate() {
        for p in w.windows(2) {
            let pair = (p[0], p[1]);
            *pair_counts.entry(pair).or_default() += freqs[wi];
            where_.entry(pair).or_default().push(wi as u32);
        }
    }
    let mut heap: BinaryHeap<(i64, Reverse<(u32, u32)>)> =
        pair_counts.iter().map(|(&p, &c)| (c, Reverse(p))).collect();

    let target = trainer.vocab_size;
    let min_freq = trainer.min_frequency.max(1) as i64;
    let mut old_pairs = Vec::new();
    let mut grown: FxHashMap<(u32, u32), ()> = FxHashMap::default();
    let mut merges = 0usize;
    while vocab.tokens.len() < target {
        let Some((count, Reverse(pair))) = heap.pop() else {
            break;
        };
        let current = pair_counts.get(&pair).copied().unwrap_or(0);
        if current != count {
            if current > 0 {
                heap.push((current, Reverse(pair)));
            }
            continue;
        }
        if count < min_freq {
            break;
        }
        let b = &vocab.tokens[pair.1 as usize];
        let new_tok = format!(
            "{}{}",
            vocab.tokens[pair.0 as usize],
            b.strip_prefix(prefix).unwrap_or(b)
        );
        let new_id = vocab.add(new_tok);

        let mut affected = where_.remove(&pair).unwrap_or_default();
        affected.sort_unstable();
        affected.dedup();
        grown.clear();
        for &wi in &affected {
            let w = &mut words[wi as usize];
            let f = freqs[wi as usize];
            old_pairs.clear();
            old_pairs.extend(w.windows(2).map(|p| (p[0], p[1])));
            if !merge_word(w, pair, new_id) {
                continue;
            }
            for p in &old_pairs {
                *pair_counts.entry(*p).or_default() -= f;
            }
            for p in w.windows(2) {
                let p = (p[0], p[1]);
                *pair_counts.entry(p).or_default() += f;
                // Only pairs holding the new symbol can have grown.
                if p.0 == new_id || p.1 == new_id {
                    where_.entry(p).or_default().push(wi);
                    grown.insert(p, ());
                }
            }
        }
        pair_counts.remove(&pair);
        for p in grown.keys() {
            if let Some(&c) = pair_counts.get(p) {
                heap.push((c, Reverse(*p)));
            }
        }
        merges += 1;
        if merges.is_multiple_of(256) {
            progress(TrainProgress::Merging {
                vocab_size: vocab.tokens.len(),
                target,
            });
        }
    }
    progress(TrainProgress::Merging {
        vocab_size: vocab.tokens.len(),
        target,
    });
    WordPieceTokenizer::from_vocab(vocab.tokens, o.clone())
}

/// A vocabulary being built: tokens by id, and each token's id.
#[derive(Default)]
struct Vocab {
    tokens: Vec<String>,
    ids: FxHashMap<String, u32>,
}

impl Vocab {
    /// The id of `tok`, added at the end if it is new.
    fn add(&mut self, tok: String) -> u32 {
        let tokens = &mut self.tokens;
        *self.ids.entry(tok).or_insert_with_key(|k| {
            tokens.push(k.clone());
            (tokens.len() - 1) as u32
        })
    }
}

/// The vocabulary before any merge: the special tokens, the alphabet (the
/// `limit_alphabet` most frequent characters of the words `counts`), then
/// the `##` forms of those that occur inside words; with the ids of the
/// alphabet's characters as first and as later symbols of a word.
fn base_vocab(
    trainer: &WordPieceTrainer,
    counts: &FxHashMap<String, u64>,
) -> (Vocab, FxHashMap<char, u32>, FxHashMap<char, u32>) {
    let o = &trainer.options;
    // Special tokens first.
    let mut vocab = Vocab::default();
    for t in [
        &o.pad_token,
        &o.unk_token,
        &o.cls_token,
        &o.sep_token,
        &o.mask_token,
    ] {
        vocab.add(t.clone());
    }

    // The alphabet: the `limit_alphabet` most frequent characters.
    let mut chars: FxHashMap<char, u64> = FxHashMap::default();
    for (w, &c) in counts {
        for ch in w.chars() {
            *chars.entry(ch).or_default() += c;
        }
    }
    let mut alphabet: Vec<(char, u64)> = chars.into_iter().collect();
    if let Some(limit) = trainer.limit_alphabet {
        if alphabet.len() > limit {
            alphabet.sort_unstable_by_key(|&(ch, n)| (Reverse(n), ch));
            alphabet.truncate(limit);
        }
    }
    alphabet.sort_unstable_by_key(|&(ch, _)| ch);
    let mut initial: FxHashMap<char, u32> = FxHashMap::default();
    for &(ch, _) in &alphabet {
        initial.insert(ch, vocab.add(ch.to_string()));
    }
    // `##` forms of the characters that occur inside words.
    let mut inner: Vec<char> = Vec::new();
    {
        let mut seen: FxHashMap<char, ()> = FxHashMap::default();
        for w in counts.keys() {
            for ch in w.chars().skip(1) {
                if initial.contains_key(&ch) && seen.insert(ch, ()).is_none() {
                    inner.push(ch);
                }
            }
        }
    }
    inner.sort_unstable();
    let prefix = o.continuing_subword_prefix.as_str();
    let mut continuing: FxHashMap<char, u32> = FxHashMap::default();
    for ch in inner {
        continuing.insert(ch, vocab.add(format!("{prefix}{ch}")));
    }
    (vocab, initial, continuing)
}

/// The words of more than one symbol as symbol ids (characters outside the
/// alphabet are dropped, as HF does), in word order, with their counts.
fn symbol_words(
    counts: FxHashMap<String, u64>,
    initial: &FxHashMap<char, u32>,
    continuing: &FxHashMap<char, u32>,
) -> (Vec<Vec<u32>>, Vec<i64>) {
    let mut words: Vec<Vec<u32>> = Vec::with_capacity(counts.len());
    let mut freqs: Vec<i64> = Vec::with_capacity(counts.len());
    let mut sorted: Vec<(String, u64)> = counts.into_iter().collect();
    sorted.sort_unstable();
    for (w, c) in sorted {
        let mut syms = Vec::with_capacity(w.len());
        for (i, ch) in w.chars().enumerate() {
            let id = if i == 0 {
                initial.get(&ch)
            } else {
                continuing.get(&ch)
            };
            if let Some(&id) = id {
                syms.push(id);
            }
        }
        if syms.len() > 1 {
            words.push(syms);
            freqs.push(c as i64);
        }
    }
    (words, freqs)
}

/// Replaces each non-overlapping `pair` (left to right) by `new_id`.
fn merge_word(w: &mut Vec<u32>, pair: (u32, u32), new_id: u32) -> bool {
    let mut out = 0;
    let mut i = 0;
    let mut changed = false;
    while i < w.len() {
        if i + 1 < w.len() && w[i] == pair.0 && w[i + 1] == pair.1 {
            w[out] = new_id;
            i += 2;
            changed = true;
        } else {
            w[out] = w[i];
            i += 1;
        }
        out += 1;
    }
    w.truncate(out);
    changed
}

/// Word counts after normalization and pre-tokenization, in parallel over
/// ~1 MB chunks cut at line ends.
fn count_words(
    texts: &[&str],
    normalizer: &BertNormalizer,
    progress: &mut impl FnMut(TrainProgress),
) -> FxHashMap<String, u64> {
    const CHUNK: usize = 1 << 20;
    let mut chunks: Vec<&str> = Vec::new();
    for text in texts {
        let mut rest = *text;
        while !rest.is_empty() {
            let mut cut = rest.len().min(CHUNK);
            if cut < rest.len() {
                cut = rest[cut..].find('\n').map_or(rest.len(), |i| cut + i + 1);
            }
            chunks.push(&rest[..cut]);
            rest = &rest[cut..];
        }
    }
    let total_bytes: u64 = texts.iter().map(|t| t.len() as u64).sum();
    let mut done_bytes = 0u64;
    progress(TrainProgress::Counting {
        done_bytes,
        total_bytes,
    });
    let mut counts: FxHashMap<String, u64> = FxHashMap::default();
    let group = 4 * rayon::current_num_threads().max(1);
    for batch in chunks.chunks(group) {
        let partial: Vec<FxHashMap<String, u64>> = batch
            .par_iter()
            .map(|chunk| {
                let mut m: FxHashMap<String, u64> = FxHashMap::default();
                let mut buf = WordBuf::default();
                normalizer.for_each_word(chunk, 0, &mut buf, |w, _| match m.get_mut(w) {
                    Some(c) => *c += 1,
                    None => {
                        m.insert(w.to_string(), 1);
                    }
                });
                m
            })
            .collect();
        for m in partial {
            for (w, c) in m {
                *counts.entry(w).or_default() += c;
            }
        }
        done_bytes += batch.iter().map(|c| c.len() as u64).sum::<u64>();
        progress(TrainProgress::Counting {
            done_bytes,
            total_bytes,
        });
    }
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_build_continuation_pieces() {
        let text = "low lower lowest low low newer newest wider";
        let trainer = WordPieceTrainer {
            vocab_size: 40,
            min_frequency: 1,
            ..Default::default()
        };
        let t = train_wordpiece(&[text], &trainer, |_| {}).unwrap();
        let v = t.vocab();
        assert_eq!(&v[..5], ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]);
        assert!(v.iter().any(|s| s == "low"), "{v:?}");
        assert!(v.iter().any(|s| s == "##es" || s == "##est"), "{v:?}");
        let e = t.encode("lowest", false).unwrap();
        assert_eq!(t.decode(&e.ids, false).unwrap(), "lowest");
    }

    #[test]
    fn merge_word_non_overlapping() {
        let mut w = vec![1, 1, 1, 2];
        assert!(merge_word(&mut w, (1, 1), 9));
        assert_eq!(w, [9, 1, 2]);
    }
}
