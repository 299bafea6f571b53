//! CPU compute kernels over flat, row-major `f32` buffers (llm.c style).
//!
//! Shape legend: B batch, T sequence length, C channels (d_model), NH heads,
//! HS head size (C / NH), V vocabulary, OC output channels, N = B·T rows.
//!
//! Conventions shared by every kernel:
//! - Forward kernels overwrite their outputs.
//! - Backward kernels ACCUMULATE (`+=`) into every gradient they write, so
//!   the caller zeroes gradients once per step and residual branches sum for free.
//!   Two exceptions save zeroing a scratch buffer first: a matmul's input
//!   gradient can be overwritten instead ([`GradWrite::Set`]), and
//!   [`gelu_backward`] turns its output gradient into its input gradient in place.
//! - Every fast kernel has a plain reference twin in [`mod@reference`], used by tests.
//! - Results are deterministic for a fixed rayon thread count: reductions
//!   split work in a fixed order that does not depend on scheduling.
//! - Shapes are checked with `assert!` on entry: a mismatch is a programming
//!   error in the caller, never something a user controls.

mod activation;
pub(crate) mod attention;
pub mod bf16_gemm;
mod elementwise;
mod embedding;
pub mod gemm;
pub mod int8_gemm;
pub mod kv_cache;
mod layernorm;
mod lm_head;
mod matmul;
pub mod matvec;
mod optim;
pub mod probe;
pub mod quant;
pub mod reference;
pub(crate) mod simd;
mod softmax;

pub use activation::{
    gelu_backward, gelu_forward, gelu_in_place, tanh_backward, tanh_forward, Gelu,
};
pub use attention::{
    attention_backward, attention_backward_varlen, attention_forward, attention_forward_varlen,
    AttentionProducts, AttentionShape,
};
pub use bf16_gemm::{
    matmul_backward_bf16, matmul_forward_bf16, rounded as bf16_rounded, Bf16Kernel, Bf16Panels,
    Bf16RowWriter, Bf16Weight, ROW_ALIGN as BF16_ROW_ALIGN,
};
pub use elementwise::{add_bias_rows, add_inplace, residual_forward, scale_inplace, zero_fill};
pub use embedding::{embedding_backward, embeddings_forward};
pub use int8_gemm::{Int8Kernel, PackedInt8, QuantizedRows};
pub use layernorm::{layernorm_apply, layernorm_backward, layernorm_forward};
pub use lm_head::{
    lm_head_loss, lm_head_loss_backward, lm_head_loss_backward_packed, lm_head_scratch_len,
    LM_HEAD_CHUNK_ROWS,
};
pub use matmul::{matmul_backward, matmul_forward, GradWrite, WeightLayout};
pub use optim::{
    adamw_update, adamw_update_scaled, chunk_plan, global_norm, sum_squares, AdamW, AfterChunk,
    UpdateHook,
};
pub use softmax::{
    cross_entropy_backward, cross_entropy_forward, cross_entropy_fused, softmax_rows,
};

use std::cell::RefCell;

/// Rows per rayon task for row-wise kernels: at least ~16K floats of work.
pub(crate) fn rows_per_task(row_len: usize) -> usize {
    (16_384 / row_len.max(1)).max(1)
}

/// Elements per rayon task for element-wise kernels.
pub(crate) const ELEMS_PER_TASK: usize = 1 << 14;

thread_local! {
    static SCRATCH: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on a per-thread scratch buffer of `len` floats that is reused
/// across calls (no allocation in steady state). Contents are unspecified:
/// `f` must write before it reads. A re-entrant call on the same thread
/// (possible when rayon runs a stolen job while this one waits) gets a fresh
/// buffer instead.
pub(crate) fn with_scratch<R>(len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
    SCRATCH.with(|s| match s.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < len {
                v.resize(len, 0.0);
            }
            f(&mut v[..len])
        }
        Err(_) => f(&mut vec![0.0; len]),
    })
}
