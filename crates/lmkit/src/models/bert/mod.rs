//! BERT (Devlin et al. 2018): the post-LN encoder and its HF heads.
//!
//! - [`Bert`] (`model`): config, heads, the flat parameter buffer and the
//!   forward pass (→ `Result`), shared by training and inference; optional
//!   bf16 encoder weights (`weights`).
//! - `heads`: each head (pooler, MLM, NSP/classifier, QA) with one forward
//!   and one backward, used by the inference methods of `Bert` and by
//!   training alike.
//! - [`BertTrainer`] (`backward`): the heads' losses and the backward through
//!   heads, encoder and embeddings; implements [`crate::models::Trainable`].
//! - [`BertPipeline`] (`pipeline`, with `embed`, `fill_mask`, `classify`,
//!   `qa`, `batch`): text in, answers out.

mod backward;
pub mod batch;
pub mod classify;
pub mod embed;
pub mod fill_mask;
mod heads;
pub mod long_inputs;
mod model;
pub mod ner;
mod pipeline;
pub mod qa;
mod weights;

pub use backward::{hf_init, BertTargets, BertTrainBatch, BertTrainer, HeadOutputs, HeadStats};
pub use batch::plan_batches;
pub use classify::{LabelScore, ScoreFn};
pub use embed::{Pooling, SentenceConfig};
pub use fill_mask::Prediction;
pub use long_inputs::{Chunking, LongInputs};
pub use model::{Bert, BertActivations, BertBatch, HeadKind, LayerActs};
pub use ner::{group_entities, NerEntity, TokenTag};
pub use pipeline::{BertPipeline, EmbedOptions, DEFAULT_MAX_BATCH_TOKENS};
pub use qa::{qa_windows, Answer, QaOptions};
