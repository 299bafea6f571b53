//! Masked-LM masking (BERT, Devlin et al. 2018; Google's `create_pretraining_data.py`).
//!
//! Per sequence: the candidates are the non-special tokens (never `[CLS]`,
//! `[SEP]`, `[PAD]`, `[UNK]`, `[MASK]`). The number to predict is 15% of the
//! candidates with stochastic rounding (`floor(x)` plus one with probability
//! `frac(x)`, so the expected count is exactly 15%; at least 1), optionally
//! capped by `max_predictions`. Candidates are visited in a random order and
//! taken while they fit. Each chosen token becomes `[MASK]` with probability
//! 0.8, a random token with probability 0.1 (drawn uniformly from the
//! non-special vocabulary, so a `[CLS]` never appears mid-sequence), and
//! stays unchanged otherwise. The label is the original id at chosen
//! positions and [`IGNORE_INDEX`] elsewhere: the loss is taken only there.
//!
//! Whole-word masking: a word is a token not starting with `##` plus the
//! `##` tokens after it; words are chosen as units (a word that would
//! overflow the count is skipped, as Google does), and the 80/10/10 choice is
//! still made per token.
//!
//! The caller passes the RNG: derive it from `(seed, epoch, example)` to get
//! fresh, reproducible masks each epoch.

use crate::util::rng::Rng;

use super::{DataError, Result};

pub use crate::spec::IGNORE_INDEX;

/// Masking hyper-parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct MlmConfig {
    /// Fraction of candidate tokens to predict (0.15).
    pub mask_prob: f64,
    /// Of those, the fraction replaced by `[MASK]` (0.8).
    pub mask_token_prob: f64,
    /// Of those, the fraction replaced by a random token (0.1); the rest is kept.
    pub random_token_prob: f64,
    /// Choose whole words (`##` continuations with their head).
    pub whole_word: bool,
    /// Upper bound on predictions per sequence (Google's `max_predictions_per_seq`).
    pub max_predictions: Option<usize>,
}

impl Default for MlmConfig {
    fn default() -> Self {
        MlmConfig {
            mask_prob: 0.15,
            mask_token_prob: 0.8,
            random_token_prob: 0.1,
            whole_word: false,
            max_predictions: None,
        }
    }
}

/// What happened to one sequence.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MaskCounts {
    /// Non-special tokens in the sequence.
    pub candidates: usize,
    /// Chosen positions (carry a label).
    pub chosen: usize,
    /// Chosen and replaced by `[MASK]`.
    pub masked: usize,
    /// Chosen and replaced by a random token (which may equal the original).
    pub random: usize,
    /// Chosen and left as they were.
    pub kept: usize,
}

impl std::ops::AddAssign for MaskCounts {
    fn add_assign(&mut self, o: Self) {
        self.candidates += o.candidates;
        self.chosen += o.chosen;
        self.masked += o.masked;
        self.random += o.random;
        self.kept += o.kept;
    }
}

/// Applies MLM masking to token sequences of one vocabulary.
#[derive(Debug, Clone)]
pub struct MlmMasker {
    cfg: MlmConfig,
    mask_id: u32,
    special: Vec<bool>,
    continuation: Vec<bool>,
    random_pool: Vec<u32>,
}

impl MlmMasker {
    /// `vocab`: token strings in id order; `special_ids`: ids never chosen
    /// nor drawn as random replacements (must include `mask_id`);
    /// `continuation_prefix`: WordPiece's `##`.
    pub fn new(
        cfg: MlmConfig,
        vocab: &[String],
        special_ids: &[u32],
        mask_id: u32,
        continuation_prefix: &str,
    ) -> Result<Self> {
        let probs = [cfg.mask_prob, cfg.mask_token_prob, cfg.random_token_prob];
        if probs.iter().any(|p| !(0.0..=1.0).contains(p))
            || cfg.mask_token_prob + cfg.random_token_prob > 1.0
        {
            return Err(DataError::Invalid(format!(
                "MLM probabilities out of range: mask_prob {}, mask_token_prob {}, random_token_prob {}",
                cfg.mask_prob, cfg.mask_token_prob, cfg.random_token_prob
            )));
        }
        let v = vocab.len();
        if mask_id as usize >= v {
            return Err(DataError::Invalid(format!(
                "[MASK] id {mask_id} is outside the vocabulary of {v}"
            )));
        }
        let mut special = vec![false; v];
        for &id in special_ids.iter().chain(std::iter::once(&mask_id)) {
            if let Some(s) = special.get_mut(id as usize) {
                *s = true;
            }
        }
        let continuation = vocab
            .iter()
            .map(|t| !continuation_prefix.is_empty() && t.starts_with(continuation_prefix))
            .collect();
        let random_pool: Vec<u32> = (0..v as u32).filter(|&i| !special[i as usize]).collect();
        if random_pool.is_empty() {
            return Err(DataError::Invalid(
                "the vocabulary has no non-special tokens to mask".into(),
            ));
        }
        Ok(MlmMasker {
            cfg,
            mask_id,
            special,
            continuation,
            random_pool,
        })
    }

    pub fn config(&self) -> &MlmConfig {
        &self.cfg
    }

    pub fn mask_id(&self) -> u32 {
        self.mask_id
    }

    fn is_special(&self, id: u32) -> bool {
        // Ids outside the vocabulary are never chosen (the model rejects them later).
        self.special.get(id as usize).copied().unwrap_or(true)
    }

    /// Masks `ids` in place and writes `labels` (same length): the original id
    /// at chosen positions, [`IGNORE_INDEX`] elsewhere.
    pub fn mask(&self, ids: &mut [u32], labels: &mut [i32], rng: &mut Rng) -> MaskCounts {
        assert_eq!(ids.len(), labels.len(), "ids and labels differ in length");
        labels.fill(IGNORE_INDEX);
        // Units to choose from: (start, len) of a token or a whole word.
        let mut units: Vec<(usize, usize)> = Vec::new();
        let mut candidates = 0usize;
        for (i, &id) in ids.iter().enumerate() {
            if self.is_special(id) {
                continue;
            }
            candidates += 1;
            let joins = self.cfg.whole_word
                && self.continuation[id as usize]
                && units.last().is_some_and(|&(s, l)| s + l == i);
            match units.last_mut() {
                Some(last) if joins => last.1 += 1,
                _ => units.push((i, 1)),
            }
        }
        let mut counts = MaskCounts {
            candidates,
            ..Default::default()
        };
        if candidates == 0 {
            return counts;
        }
        let x = candidates as f64 * self.cfg.mask_prob;
        let mut target = x.floor() as usize + usize::from(rng.next_f64() < x.fract());
        target = target.max(1);
        if let Some(m) = self.cfg.max_predictions {
            target = target.min(m);
        }
        rng.shuffle(&mut units);
        for (start, len) in units {
            if counts.chosen >= target {
                break;
            }
            if counts.chosen + len > target {
                continue;
            }
            for i in start..start + len {
                labels[i] = ids[i] as i32;
                counts.chosen += 1;
                let r = rng.next_f64();
                if r < self.cfg.mask_token_prob {
                    ids[i] = self.mask_id;
                    counts.masked += 1;
                } else if r < self.cfg.mask_token_prob + self.cfg.random_token_prob {
                    ids[i] = self.random_pool[rng.below(self.random_pool.len() as u64) as usize];
                    counts.random += 1;
                } else {
                    counts.kept += 1;
                }
            }
        }
        counts
    }
}
