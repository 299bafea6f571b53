//! Deterministic shuffled batches over a token shard.
//!
//! The shard is cut into non-overlapping windows of T+1 tokens (stride T:
//! inputs are tokens `[s, s+T)`, targets `[s+1, s+T+1)`). Each epoch visits
//! the windows in a permutation drawn from `(seed, epoch)`, B windows per
//! batch (a remainder smaller than B is skipped). The position
//! `(epoch, cursor)` is all the state there is, so resuming reproduces the
//! exact batch sequence.

use super::{DataError, Result, TokenShard};
pub use crate::checkpoint::state::DataPosition;
use crate::util::rng::Rng;

/// One batch of next-token examples: `inputs` and `targets` are [B, T].
#[derive(Debug, Clone)]
pub struct TokenBatch {
    pub b: usize,
    pub t: usize,
    pub inputs: Vec<u32>,
    pub targets: Vec<i32>,
}

impl TokenBatch {
    pub fn new(b: usize, t: usize) -> Self {
        TokenBatch {
            b,
            t,
            inputs: vec![0; b * t],
            targets: vec![0; b * t],
        }
    }

    /// Fills row `row` from the window starting at token `start`.
    fn fill_row(&mut self, shard: &TokenShard, row: usize, start: usize) {
        let t = self.t;
        for k in 0..t {
            self.inputs[row * t + k] = shard.get(start + k);
            self.targets[row * t + k] = shard.get(start + k + 1) as i32;
        }
    }
}

/// Number of T+1 windows at stride T in a shard of `len` tokens.
pub fn window_count(len: usize, t: usize) -> usize {
    if len == 0 || t == 0 {
        0
    } else {
        (len - 1) / t
    }
}

pub struct BatchSampler {
    n_windows: usize,
    b: usize,
    t: usize,
    seed: u64,
    pos: DataPosition,
    perm: Vec<u32>,
}

impl BatchSampler {
    /// A sampler over a shard of `shard_len` tokens; an error when the shard
    /// holds fewer than B windows of T+1 tokens.
    pub fn new(shard_len: usize, b: usize, t: usize, seed: u64) -> Result<Self> {
        let n_windows = window_count(shard_len, t);
        if b == 0 || t == 0 {
            return Err(DataError::Invalid(
                "batch size and sequence length must be > 0".into(),
            ));
        }
        if n_windows < b {
            return Err(DataError::Invalid(format!(
                "the training data has {shard_len} tokens, fewer than one batch needs \
                 ({b} sequences of {t}+1 tokens = {}); add data or lower `batch_size` / `seq_len`",
                b * t + 1
            )));
        }
        if n_windows > u32::MAX as usize {
            return Err(DataError::Invalid(
                "training shard too large (> 2^32 windows)".into(),
            ));
        }
        let mut s = BatchSampler {
            n_windows,
            b,
            t,
            seed,
            pos: DataPosition::default(),
            perm: Vec::new(),
        };
        s.shuffle();
        Ok(s)
    }

    fn shuffle(&mut self) {
        self.perm = (0..self.n_windows as u32).collect();
        Rng::derive(self.seed, self.pos.epoch).shuffle(&mut self.perm);
    }

    pub fn position(&self) -> DataPosition {
        self.pos
    }

    /// Batches per epoch.
    pub fn batches_per_epoch(&self) -> usize {
        self.n_windows / self.b
    }

    /// Jumps to a saved position (from a checkpoint of the same data).
    pub fn set_position(&mut self, pos: DataPosition) -> Result<()> {
        if pos.cursor as usize > self.n_windows {
            return Err(DataError::Invalid(format!(
                "saved data position {} is past the {} windows of this data; \
                 was the checkpoint trained on other data or another `seq_len`?",
                pos.cursor, self.n_windows
            )));
        }
        let epoch_changed = pos.epoch != self.pos.epoch;
        self.pos = pos;
        if epoch_changed {
            self.shuffle();
        }
        Ok(())
    }

    /// Fills `batch` ([B, T]) with the next B windows.
    pub fn next_batch(&mut self, shard: &TokenShard, batch: &mut TokenBatch) {
        self.next_batch_part(shard, batch, 0, 1);
    }

    /// Data-parallel: draws the next B windows (the global batch) and fills
    /// `batch` ([B / parts, T]) with part `part` of them, rows
    /// `[part · B/parts, (part+1) · B/parts)`. Every rank draws the same
    /// windows and takes its own disjoint rows, so the ranks together see
    /// exactly the batch one process would, and the position stays global
    /// (a checkpoint resumes with any number of ranks that divides B).
    pub fn next_batch_part(
        &mut self,
        shard: &TokenShard,
        batch: &mut TokenBatch,
        part: usize,
        parts: usize,
    ) {
        debug_assert_eq!((batch.b * parts, batch.t), (self.b, self.t));
        debug_assert!(part < parts);
        if self.pos.cursor as usize + self.b > self.n_windows {
            self.pos = DataPosition {
                epoch: self.pos.epoch + 1,
                cursor: 0,
            };
            self.shuffle();
        }
        let first = self.pos.cursor as usize + part * batch.b;
        for row in 0..batch.b {
            let w = self.perm[first + row] as usize;
            batch.fill_row(shard, row, w * self.t);
        }
        self.pos.cursor += self.b as u64;
    }
}

/// Fixed validation batches: the first windows of the validation shard in
/// order, so every evaluation sees the same tokens. Returns how many full
/// batches (at most `max_batches`) the shard holds.
pub fn eval_batch_count(shard: &TokenShard, b: usize, t: usize, max_batches: usize) -> usize {
    (window_count(shard.len(), t) / b.max(1)).min(max_batches)
}

/// Fills `batch` with validation batch `index` (see [`eval_batch_count`]).
pub fn fill_eval_batch(shard: &TokenShard, index: usize, batch: &mut TokenBatch) {
    fill_eval_rows(shard, index * batch.b, batch);
}

/// Fills `batch` with the validation windows `first..first + B` (one rank's
/// rows of a global validation batch: `first = index · B_global + rank · B`).
pub fn fill_eval_rows(shard: &TokenShard, first: usize, batch: &mut TokenBatch) {
    for row in 0..batch.b {
        batch.fill_row(shard, row, (first + row) * batch.t);
    }
}
