//! lmkit: GPT-2 and BERT on explicit fused CPU kernels.
//!
//! Layers (arrows point down): `kernels` (flat `f32` buffers, forward and
//! backward) ← models, checkpoints, training, inference, evaluation.

pub mod kernels;

pub mod checkpoint;
mod error;
pub mod model;
pub mod tasks;

pub use error::{Error, Result};
