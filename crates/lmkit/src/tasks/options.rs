//! Fine-tuning's options, shared by the CLI (flags) and Python (keyword
//! arguments), and read by the tasks and the fine-tuning recipe.

use serde::Deserialize;

use crate::models::auto_dtype::DtypeRequest;
use crate::spec::Precision;
pub use crate::train::StopRequest;

use super::error::{invalid, Result};

/// Hyper-parameters (HF Trainer defaults where it has them). Deserializes
/// from the field names (unknown ones are an error, absent ones take
/// [`Default`]): how the Python package passes its keyword arguments.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FinetuneOptions {
    pub epochs: usize,
    pub batch_size: usize,
    pub eval_batch_size: usize,
    /// Peak learning rate.
    pub lr: f32,
    /// Fraction of the steps spent warming up linearly.
    pub warmup_ratio: f64,
    /// Longest input in tokens (QA: the window length; LM: the block length).
    pub max_seq_len: usize,
    pub seed: u64,
    pub weight_decay: f32,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    /// Global gradient-norm clip (HF `max_grad_norm` 1.0); 0 = off.
    pub grad_clip: f32,
    /// QA: overlap between consecutive windows (HF run_qa `doc_stride` 128).
    pub doc_stride: usize,
    /// QA: longest answer in tokens (HF run_qa 30).
    pub max_answer_len: usize,
    /// QA: answers kept per question in the predictions (HF run_qa `n_best_size` 20).
    pub n_best: usize,
    /// Stop after this many optimizer steps (the schedule still spans all epochs).
    pub max_steps: Option<u64>,
    /// A metrics row every N steps.
    pub log_every: u64,
    /// Write into a non-empty output folder (its files are replaced).
    pub overwrite: bool,
    /// Write the model in shards of at most this many bytes; `None`: one file.
    #[serde(deserialize_with = "crate::util::size::deserialize_byte_size")]
    pub max_shard_size: Option<u64>,
    /// GPT-2 classification: λ of GPT-1's L3 = L2 + λ·L1, the weight of the
    /// LM loss on the same inputs (GPT-1 used 0.5); 0 = off.
    pub lm_coef: f32,
    /// Continue the run in the output folder from its newest checkpoint,
    /// exactly. Every option that shapes training must be the run's (an
    /// error names the one that differs); `max_steps`, `save_every`, `keep`
    /// and the evaluation settings may change.
    pub resume: bool,
    /// A checkpoint every N steps; `None`: at the end of every epoch; 0: only
    /// at the end (and when stopped).
    pub save_every: Option<u64>,
    /// Checkpoints kept (at least 1).
    pub keep: usize,
    /// Data-parallel runs ([`finetune_on`](crate::recipes::finetune::finetune_on) over several ranks): each rank
    /// keeps the optimizer moments of its share of the parameters (ZeRO
    /// stage 1); the same weights as without.
    pub shard_optimizer: bool,
    /// The number format of the matmuls of every block (GPT-2: and the LM
    /// head): f32 (exact against HF) or bf16 (mixed precision: bf16
    /// operands, f32 sums, weights and optimizer state), or auto: bf16 where
    /// this CPU runs the model's products faster in it, else f32
    /// ([`crate::models::auto_dtype`]). A resumed run must give the run's.
    pub dtype: DtypeRequest<Precision>,
    /// GPT-2: recompute activations in backward instead of keeping them
    /// ([`crate::models::gpt2::Gpt2::set_recompute`]); an error for BERT.
    /// Memory only: a resume may turn it on or off.
    pub recompute: bool,
    /// Time each step's phases ([`crate::util::profile::Phase`]):
    /// `phase_ms` in the metrics rows and the mean step in the summary's
    /// `profile`. Not part of the run: a resume may turn it on or off.
    pub profile: bool,
    /// Polled after every step; see [`StopRequest`].
    #[serde(skip)]
    pub stop: StopRequest,
}

impl Default for FinetuneOptions {
    fn default() -> Self {
        FinetuneOptions {
            epochs: 3,
            batch_size: 16,
            eval_batch_size: 64,
            lr: 5e-5,
            warmup_ratio: 0.0,
            max_seq_len: 128,
            seed: 42,
            weight_decay: 0.0,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            grad_clip: 1.0,
            doc_stride: 128,
            max_answer_len: 30,
            n_best: 20,
            max_steps: None,
            log_every: 1,
            overwrite: false,
            max_shard_size: None,
            lm_coef: 0.5,
            resume: false,
            save_every: None,
            keep: 2,
            shard_optimizer: false,
            dtype: DtypeRequest::Fixed(Precision::F32),
            recompute: false,
            profile: false,
            stop: StopRequest::default(),
        }
    }
}

impl FinetuneOptions {
    /// The options' own bounds, each error naming the option.
    pub fn check(&self) -> Result<()> {
        for (name, v) in [
            ("epochs", self.epochs),
            ("batch_size", self.batch_size),
            ("eval_batch_size", self.eval_batch_size),
        ] {
            if v == 0 {
                return Err(invalid(format!("`{name}` must be positive")));
            }
        }
        if !(0.0..1.0).contains(&self.warmup_ratio) {
            return Err(invalid(format!(
                "`warmup_ratio` {} must be in [0, 1)",
                self.warmup_ratio
            )));
        }
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(invalid(format!("`lr` {} must be positive", self.lr)));
        }
        if self.max_seq_len < 8 {
            return Err(invalid(format!(
                "`max_seq_len` {} is too short",
                self.max_seq_len
            )));
        }
        if !(self.lm_coef >= 0.0 && self.lm_coef.is_finite()) {
            return Err(invalid(format!(
                "`lm_coef` {} must be a finite number >= 0",
                self.lm_coef
            )));
        }
        Ok(())
    }
}
