//! Perplexity of a token sequence with a sliding window, as in HF's
//! perplexity guide: windows of `context` tokens starting every `stride`
//! tokens; each window scores only the tokens the previous window did not
//! (its last `end - prev_end`), conditioning them on the whole window.
//! Every token after the first is scored exactly once, and the result is
//! the exact mean over them (the guide's own loop weights windows after the
//! first by one token less; the difference vanishes for long texts).
//!
//! Shape legend: T window tokens, C channels, V vocabulary.

use crate::error::{Error, Result};
use crate::models::gpt2::engine::Gpt2Engine;

/// Rows of logits computed at once: bounds the `[rows, V]` buffer.
const LOGIT_ROWS: usize = 64;

/// Result of [`Gpt2Engine::perplexity`].
#[derive(Debug, Clone, PartialEq)]
pub struct PerplexityReport {
    /// Tokens scored (`ids.len() - 1`).
    pub tokens: usize,
    /// Σ −log p(token | window context), accumulated in f64.
    pub nll_sum: f64,
    /// `nll_sum / tokens`.
    pub mean_nll: f64,
    /// `exp(mean_nll)`.
    pub perplexity: f64,
    /// Windows run.
    pub windows: usize,
    /// −log p of every scored token (index t−1 for token t).
    pub token_nll: Vec<f32>,
}

impl Gpt2Engine {
    /// Sliding-window perplexity of `ids`. `context` (0 = `n_positions`) is
    /// the window length, `stride` (0 = `context / 2`, HF's example) the step
    /// between window starts. `progress(scored, total)` is called after
    /// each window.
    pub fn perplexity(
        &mut self,
        ids: &[u32],
        context: usize,
        stride: usize,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<PerplexityReport> {
        let cfg = self.config();
        let (n_pos, v) = (cfg.n_positions, cfg.vocab_size);
        let context = if context == 0 { n_pos } else { context };
        if context < 2 || context > n_pos {
            return Err(Error::InvalidInput(format!(
                "perplexity context must be in [2, {n_pos}] (the model's n_positions), got {context}"
            )));
        }
        let stride = if stride == 0 {
            (context / 2).max(1)
        } else {
            stride
        };
        if stride > context {
            return Err(Error::InvalidInput(format!(
                "stride {stride} is larger than the context {context}: tokens would be skipped"
            )));
        }
        if ids.len() < 2 {
            return Err(Error::InvalidInput(format!(
                "perplexity needs at least 2 tokens, the input has {}",
                ids.len()
            )));
        }
        if let Some(&id) = ids.iter().find(|&&id| id as usize >= v) {
            return Err(Error::TokenIdOutOfRange { id, vocab: v });
        }
        let total = ids.len() - 1;
        let mut token_nll = Vec::with_capacity(total);
        let mut cache = self.new_cache(1, context.min(ids.len()))?;
        let mut logits = vec![0f32; LOGIT_ROWS * v];
        let (mut begin, mut prev_end, mut windows) = (0usize, 0usize, 0usize);
        loop {
            let end = (begin + context).min(ids.len());
            let window = &ids[begin..end];
            let trg = end - prev_end;
            cache.clear();
            self.forward(&mut cache, window, None)?;
            // Targets are window positions [len - trg, len), except position 0
            // (nothing predicts it); row k - 1 predicts position k.
            let first = (window.len() - trg).max(1);
            let rows: Vec<usize> = (first - 1..window.len() - 1).collect();
            for chunk in rows.chunks(LOGIT_ROWS) {
                let out = &mut logits[..chunk.len() * v];
                self.logits(chunk, out)?;
                for (&r, row) in chunk.iter().zip(out.chunks_exact(v)) {
                    token_nll.push(nll(row, window[r + 1] as usize));
                }
            }
            windows += 1;
            prev_end = end;
            progress(token_nll.len(), total);
            if end == ids.len() {
                break;
            }
            begin += stride;
        }
        let nll_sum: f64 = token_nll.iter().map(|&x| x as f64).sum();
        let mean_nll = nll_sum / total as f64;
        Ok(PerplexityReport {
            tokens: total,
            nll_sum,
            mean_nll,
            perplexity: mean_nll.exp(),
            windows,
            token_nll,
        })
    }
}

/// −log softmax(row)[target], with the log-sum-exp in f64.
fn nll(row: &[f32], target: usize) -> f32 {
    let max = row.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    let sum: f64 = row.iter().map(|&x| ((x - max) as f64).exp()).sum();
    (max as f64 + sum.ln() - row[target] as f64) as f32
}
