//! Models: configurations, the flat parameter layout, and the HF naming table.

pub mod bert;
pub mod bert_backward;
pub mod bert_bf16;
pub mod config;
pub mod gpt2;
pub mod layout;
pub mod names;

pub use config::{Activation, AnyConfig, BertConfig, Gpt2Config, HfActivation, ModelConfig};
pub use layout::{bert_layout, gpt2_layout, BertHeads, ParamLayout, ParamSpec};
pub use names::{Architecture, Family};
