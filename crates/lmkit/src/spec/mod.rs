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

pub use config::{Activation, AnyConfig, BertConfig, Gpt2Config, HfActivation, ModelConfig};
pub use layout::{bert_layout, gpt2_layout, gpt2_layout_for, HasLayout, ParamLayout, ParamSpec};
pub use names::{Architecture, BertHeads, Family};
pub use optim::{LrSchedule, OptimConfig, ScheduleKind};

/// Targets (labels) equal to this carry no loss: HF's `-100`.
pub const IGNORE_INDEX: i32 = -100;
