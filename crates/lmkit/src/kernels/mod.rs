//! CPU compute kernels over flat, row-major `f32` buffers (llm.c style).
//!
//! Shape legend: B batch, T sequence length, C channels (d_model), NH heads,
//! HS head size (C / NH), V vocabulary, OC output channels, N = B·T rows.
//!
//! Conventions shared by every kernel:
//! - Forward kernels overwrite their outputs.
//! - Backward kernels ACCUMULATE (`+=`) into every gradient they write, so
//!   the caller zeroes gradients once per step and residual branches sum for free.
//! - Every fast kernel has a plain reference twin in [`reference`], used by tests.
//! - Results are deterministic for a fixed rayon thread count: reductions
//!   split work in a fixed order that does not depend on scheduling.

pub mod matvec;
pub mod quant;
