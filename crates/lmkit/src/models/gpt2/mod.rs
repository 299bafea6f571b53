//! GPT-2 (Radford et al. 2019), training and inference.
//!
//! - [`Gpt2`] (`model`): the training model — forward with every activation
//!   saved, the full backward, over one flat parameter buffer; implements
//!   [`crate::models::Trainable`].
//! - [`Gpt2Engine`] (`engine`): the inference engine — its own weight
//!   formats (f32 as stored, bf16, int8; in huge pages) and a KV cache;
//!   generation (greedy, temperature, top-k, top-p, repetition penalty,
//!   presence/frequency penalties, seeds, EOS and stop strings, UTF-8-safe
//!   streaming, log-probabilities), sliding-window perplexity, and
//!   continuous batching ([`ContinuousBatch`]: generations joining and
//!   leaving a shared decode step, each with its own KV cache) with an
//!   optional [`PrefixCache`] (prompts reuse earlier prompts' keys and values).
//!
//! Shape legend: B batch rows, T tokens, C channels, NH heads, HS head size,
//! V vocabulary, P positions.
//!
//! The engine is separate from the training model: decode is
//! memory-bound, so it runs on matrix-vector kernels over weights stored for
//! streaming, keeps keys/values instead of activations, and never needs a
//! backward pass.
//!
//! ```no_run
//! # fn main() -> lmkit::Result<()> {
//! use lmkit::models::gpt2::{GenerationConfig, Gpt2Engine, SamplingParams, WeightDtype};
//! let mut engine = Gpt2Engine::load("assets/big/gpt2-124m-random", WeightDtype::Bf16)?;
//! let cfg = GenerationConfig { max_new_tokens: 20, sampling: SamplingParams::greedy(), ..Default::default() };
//! let out = engine.generate(&[464, 2068], &cfg, |_id| std::ops::ControlFlow::Continue(()))?;
//! println!("{:?}", out.ids);
//! # Ok(())
//! # }
//! ```

mod batch;
pub mod classify;
mod engine;
mod generate;
mod model;
mod perplexity;
pub mod prefix_cache;
pub mod sampling;
pub mod stream;
mod text;
mod weights;

pub use crate::kernels::kv_cache::KvCache;
pub use batch::{BatchEvent, ContinuousBatch, SeqId, SequenceRequest};
pub use classify::Gpt2Classifier;
pub use engine::Gpt2Engine;
pub use generate::{FinishReason, GenerationConfig, GenerationOutput};
pub use model::{Gpt2, Gpt2Activations, Gpt2TaskBatch, Gpt2TaskTrainer, TaskOutput};
pub use perplexity::PerplexityReport;
pub use prefix_cache::{PrefixCache, PrefixCacheStats, DEFAULT_BLOCK_TOKENS};
pub use sampling::{Sampler, SamplingParams, TokenLogprob};
pub use stream::{StopMatcher, TextStreamer, Utf8Stream};
pub use text::TextCompletion;
pub(crate) use weights::Matrix;
pub use weights::WeightDtype;
