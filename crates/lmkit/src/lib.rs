//! lmkit: GPT-2 and BERT on explicit fused CPU kernels.
//!
//! Layers (arrows point down): `kernels` (flat `f32` buffers, forward and
//! backward) ← models, checkpoints, training, inference, evaluation.

pub mod data;
pub mod kernels;
pub mod train;
