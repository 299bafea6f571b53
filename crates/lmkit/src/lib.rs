//! lmkit: GPT-2 and BERT on explicit fused CPU kernels.
//!
//! Layers (arrows point down): `kernels` (flat `f32` buffers, forward and
//! backward) ← models, checkpoints, training, inference, evaluation.

pub mod checkpoint;
pub mod data;
mod error;
pub mod eval;
pub mod infer;
pub mod kernels;
pub mod model;
pub mod tasks;
pub mod train;

pub use error::{Error, Result};
