//! Training a GPT-2-style byte-level BPE vocabulary from text.
//!
//! Text is pre-tokenized with GPT-2's pattern and the pieces counted (in
//! parallel); then merges are learned greedily, most frequent adjacent pair
//! first (ties: smaller pair ids first), with pair counts updated
//! incrementally for just the words a merge touches and a lazy max-heap of
//! pairs, so each merge costs time proportional to the words it changes.
//! Token ids: the 256 bytes in GPT-2's order, the merges in order, then the
//! special tokens (`<|endoftext|>` by default), as in GPT-2's vocabulary.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use rayon::prelude::*;

use crate::bpe::byte_level::BYTE_ORDER;
use crate::bpe::{BpeTokenizer, ENDOFTEXT};
use crate::{Error, Result};

type Map<K, V> = crate::bpe::FastMap<K, V>;

/// Options for [`BpeTrainer`].
#[derive(Debug, Clone)]
pub struct BpeTrainerOptions {
    /// Final vocabulary size: 256 byte tokens + merges + special tokens.
    pub vocab_size: usize,
    /// Stop when the most frequent pair occurs fewer times than this.
    pub min_frequency: u64,
    /// Special tokens, given the last ids in this order.
    pub special_tokens: Vec<String>,
}

impl Default for BpeTrainerOptions {
    fn default() -> Self {
        BpeTrainerOptions {
            vocab_size: 50257,
            min_frequency: 2,
            special_tokens: vec![ENDOFTEXT.to_string()],
        }
    }
}

/// Counts pre-tokenized pieces of the text it is fed, then learns merges.
pub struct BpeTrainer {
    options: BpeTrainerOptions,
    counts: Map<Vec<u8>, u64>,
}

/// Texts are split at newlines into chunks of about this many bytes, counted in parallel.
const CHUNK: usize = 1 << 20;

fn count_pieces(text: &[u8]) -> Map<&[u8], u64> {
    let mut counts: Map<&[u8], u64> = Map::default();
    for r in crate::pretokenize::split_gpt2(text) {
        *counts.entry(&text[r]).or_insert(0) += 1;
    }
    counts
}

impl BpeTrainer {
    pub fn new(options: BpeTrainerOptions) -> Result<Self> {
        let min = 256 + options.special_tokens.len();
        if options.vocab_size < min {
            return Err(Error::InvalidOption(format!(
                "vocab size {} is below {min} (256 byte tokens + {} special tokens)",
                options.vocab_size,
                options.special_tokens.len()
            )));
        }
        if options.vocab_size > crate::MAX_VOCAB_SIZE {
            return Err(Error::InvalidOption(format!(
                "vocab size {} is above the limit of {}",
                options.vocab_size,
                crate::MAX_VOCAB_SIZE
            )));
        }
        if options.special_tokens.iter().any(String::is_empty) {
            return Err(Error::InvalidOption("empty special token".into()));
        }
        Ok(BpeTrainer {
            options,
            counts: Map::default(),
        })
    }

    /// Adds a text (any bytes) to the counts. Like HF's trainer, pieces never
    /// span a chunk boundary, and chunks end at newlines.
    pub fn feed(&mut self, text: &[u8]) {
        let mut chunks = Vec::new();
        let mut start = 0;
        while start < text.len() {
            let mut end = (start + CHUNK).min(text.len());
            while end < text.len() && text[end - 1] != b'\n' {
                end += 1;
            }
            chunks.push(&text[start..end]);
            start = end;
        }
        let partial: Vec<Map<&[u8], u64>> = chunks.par_iter().map(|c| count_pieces(c)).collect();
        for counts in partial {
            for (piece, n) in counts {
                match self.counts.get_mut(piece) {
                    Some(c) => *c += n,
                    None => {
                        self.counts.insert(piece.to_vec(), n);
                    }
                }
            }
        }
    }

    /// Number of distinct pieces counted so far.
    pub fn distinct_pieces(&self) -> usize {
        self.counts.len()
    }

    /// Learns the merges; `progress(done, total)` is called as merges are made.
    pub fn train(self, mut progress: impl FnMut(usize, usize)) -> Result<BpeTokenizer> {
        let o = &self.options;
        let total = o.vocab_size - 256 - o.special_tokens.len();
        let mut byte_id = [0u32; 256];
        for (id, &b) in BYTE_ORDER.iter().enumerate() {
            byte_id[b as usize] = id as u32;
        }
        let mut tokens: Vec<Vec<u8>> = BYTE_ORDER.iter().map(|&b| vec![b]).collect();
        let mut words: Vec<Vec<u32>> = Vec::with_capacity(self.counts.len());
        let mut freqs: Vec<i64> = Vec::with_capacity(self.counts.len());
        let mut entries: Vec<(Vec<u8>, u64)> = self.counts.into_iter().collect();
        entries.sort_unstable(); // deterministic word order
        for (piece, n) in entries {
            words.push(piece.iter().map(|&b| byte_id[b as usize]).collect());
            freqs.push(n as i64);
        }

        let mut pair_count: Map<u64, i64> = Map::default();
        let mut pair_words: Map<u64, Vec<u32>> = Map::default();
        for (w, word) in words.iter().enumerate() {
            for p in word.windows(2) {
                let k = key(p[0], p[1]);
                *pair_count.entry(k).or_insert(0) += freqs[w];
                let ws = pair_words.entry(k).or_default();
                if ws.last() != Some(&(w as u32)) {
                    ws.push(w as u32);
                }
            }
        }
        let mut heap: BinaryHeap<(i64, Reverse<u64>)> =
            pair_count.iter().map(|(&k, &c)| (c, Reverse(k))).collect();

        let mut merges: Vec<(u32, u32)> = Vec::with_capacity(total);
        let mut delta: Map<u64, i64> = Map::default();
        while merges.len() < total {
            let Some((count, Reverse(k))) = heap.pop() else {
                break;
            };
            let current = pair_count.get(&k).copied().unwrap_or(0);
            if current != count {
                if current > 0 {
                    heap.push((current, Reverse(k)));
                }
                continue;
            }
            if (count as u64) < o.min_frequency.max(1) {
                break;
            }
            let (a, b) = ((k >> 32) as u32, k as u32);
            let new = tokens.len() as u32;
            let mut bytes = tokens[a as usize].clone();
            bytes.extend_from_slice(&tokens[b as usize]);
            tokens.push(bytes);
            merges.push((a, b));

            for w in pair_words.remove(&k).unwrap_or_default() {
                let word = &mut words[w as usize];
                if !word.windows(2).any(|p| p[0] == a && p[1] == b) {
                    continue; // stale entry: an earlier merge removed the pair
                }
                delta.clear();
                for p in word.windows(2) {
                    *delta.entry(key(p[0], p[1])).or_insert(0) -= 1;
                }
                let mut merged = Vec::with_capacity(word.len());
                let mut i = 0;
                while i < word.len() {
                    if i + 1 < word.len() && word[i] == a && word[i + 1] == b {
                        merged.push(new);
                        i += 2;
                    } else {
                        merged.push(word[i]);
                        i += 1;
                    }
                }
                for p in merged.windows(2) {
                    *delta.entry(key(p[0], p[1])).or_insert(0) += 1;
                }
                *word = merged;
                let f = freqs[w as usize];
                for (&pk, &d) in delta.iter() {
                    if d == 0 || pk == k {
                        continue;
                    }
                    let c = pair_count.entry(pk).or_insert(0);
                    *c += d * f;
                    if d > 0 {
                        heap.push((*c, Reverse(pk)));
                        pair_words.entry(pk).or_default().push(w);
                    }
                }
            }
            pair_count.remove(&k);
            if merges.len().is_multiple_of(64) || merges.len() == total {
                progress(merges.len(), total);
            }
        }
        progress(merges.len(), total);
        let specials: Vec<&str> = o.special_tokens.iter().map(String::as_str).collect();
        BpeTokenizer::from_parts(&tokens, &merges, &specials)
    }
}

#[inline]
fn key(a: u32, b: u32) -> u64 {
    ((a as u64) << 32) | b as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_the_frequent_pairs_and_round_trips() {
        let text = "low lower lowest newer newest wider widest\n".repeat(50);
        let mut t = BpeTrainer::new(BpeTrainerOptions {
            vocab_size: 256 + 10 + 1,
            ..Default::default()
        })
        .unwrap();
        t.feed(text.as_bytes());
        let mut calls = 0;
        let tok = t.train(|_, _| calls += 1).unwrap();
        assert!(calls > 0);
        assert_eq!(tok.vocab_size(), 267);
        assert_eq!(tok.endoftext_id(), Some(266));
        // The first merge is the most frequent pair: "e" "s"/"w" "e"... all
        // occur 150+ times; check its count is maximal by brute force.
        let (a, b) = tok.merges()[0];
        let pair = [
            tok.token_bytes(a).unwrap()[0],
            tok.token_bytes(b).unwrap()[0],
        ];
        let count = |p: &[u8]| {
            crate::pretokenize::split_gpt2(text.as_bytes())
                .map(|r| text.as_bytes()[r].windows(2).filter(|w| *w == p).count())
                .sum::<usize>()
        };
        let best = (0..=255u8)
            .flat_map(|x| (0..=255u8).map(move |y| [x, y]))
            .map(|p| count(&p))
            .max()
            .unwrap();
        assert_eq!(count(&pair), best);
        let ids = tok.encode_ordinary(text.as_bytes());
        assert!(
            ids.len() < text.len() / 2,
            "merges should compress: {}",
            ids.len()
        );
        assert_eq!(tok.decode(&ids).unwrap(), text.as_bytes());
    }

    #[test]
    fn rejects_tiny_vocab() {
        let o = BpeTrainerOptions {
            vocab_size: 100,
            ..Default::default()
        };
        assert!(matches!(BpeTrainer::new(o), Err(Error::InvalidOption(_))));
    }
}
