//! lmkit: GPT-2 and BERT on explicit fused CPU kernels, as a library.
//!
//! Layers, bottom to top; a module imports only from layers below it
//! (`scripts/check_layers.py` enforces it, see `docs/architecture.md`):
//!
//! | layer | holds |
//! |---|---|
//! | [`util`], [`Error`] | rng, bf16 conversion, parallel helpers, fs (atomic write, sync_dir), memory |
//! | [`kernels`] | every compute kernel, forward and backward, f32/bf16/int8; KV-cache attention |
//! | [`spec`] | configs, the flat parameter layout, HF tensor names, optimizer hyper-parameters |
//! | [`checkpoint`] | safetensors in/out, config.json, hub cache, family detection, training state |
//! | [`data`] | token shards, batching, MLM/NSP, SQuAD, classification data |
//! | [`models`] | `gpt2` and `bert`: weights, forward, backward, heads, inference engines |
//! | [`train`] | the step and the [`train::Runner`]: accumulation, clipping, schedule, checkpoints, resume |
//! | [`eval`] | metrics and evaluation loops: perplexity, LAMBADA, SQuAD, classification, ROUGE |
//! | [`recipes`] | GPT-2 pretraining, BERT pretraining, fine-tuning: data + model + loss on the Runner |

pub mod checkpoint;
pub mod data;
mod error;
pub mod eval;
pub mod kernels;
pub mod models;
pub mod recipes;
pub mod spec;
pub mod tasks;
pub mod train;
pub mod util;

pub use error::{Error, Result};
