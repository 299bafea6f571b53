//! What a model and a run ARE, as data: configurations read from and written
//! to HF `config.json`, the flat parameter layout with HF tensor names, the
//! naming table, and the optimizer's hyper-parameters. No compute, no I/O
//! beyond parsing a config file.
//!
//! Inside: `names` (families, architectures, heads) ← `config` ← `layout`;
//! `optim` stands alone.

pub mod config;
pub mod layout;
pub mod names;
pub mod optim;

pub use config::{
    Activation, AnyConfig, BertConfig, Gpt2Config, HfActivation, ModelConfig, ProblemType,
};
pub use layout::{bert_layout, gpt2_layout, gpt2_layout_for, HasLayout, ParamLayout, ParamSpec};
pub use names::{Architecture, BertHeads, Family};
pub use optim::{LrSchedule, OptimConfig, ScheduleKind};

/// Targets (labels) equal to this carry no loss: HF's `-100`.
pub const IGNORE_INDEX: i32 = -100;

/// The number format of a training run's matrix products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Everything in f32: exact against HF transformers.
    #[default]
    F32,
    /// Mixed precision: the matmuls of the blocks and the LM head take bf16 operands
    /// (rounded to nearest even) and sum in f32; weights, gradients,
    /// optimizer state and every reduction stay f32.
    Bf16,
}

impl Precision {
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
        }
    }

    /// A training run's matmuls in words ("" for f32), for its start line:
    /// bf16 also says where this CPU's bf16 dot product is slower than its
    /// f32 FMAs ([`crate::kernels::bf16_gemm::bf16_dot_is_fast`]), so that
    /// the products run as f32 FMAs and bf16 is no faster than f32.
    pub fn describe(self) -> &'static str {
        match self {
            Precision::F32 => "",
            Precision::Bf16 if crate::kernels::bf16_gemm::bf16_dot_is_fast() => {
                "bf16 matmuls (f32 weights, sums, optimizer)"
            }
            Precision::Bf16 => {
                "bf16 matmuls (f32 weights, sums, optimizer) as f32 FMAs: this CPU's \
                 bf16 dot product is slower than them, so bf16 is no faster than f32 here"
            }
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = crate::Error;

    fn from_str(s: &str) -> crate::Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(Precision::F32),
            "bf16" | "bfloat16" => Ok(Precision::Bf16),
            _ => Err(crate::Error::InvalidInput(format!(
                "unknown training `dtype` `{s}` (expected f32, bf16 or auto)"
            ))),
        }
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}
