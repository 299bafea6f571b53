//! Model configurations read from and written to HF `config.json`.
//!
//! Keys are HF's, with HF's aliases (`hidden_size` for `n_embd`, ...) and HF's
//! defaults for absent keys, so a `config.json` means here what it means to
//! transformers. Keys we do not model are kept in `extra` and written back
//! unchanged, except those that would change the computation to something we
//! do not implement: those are rejected, naming the field (DESIGN: unsupported
//! options are errors, never silent no-ops).
//!
//! This file holds the shared parts (size [`limits`], activations,
//! [`ModelConfig`]), [`BertConfig`] and [`AnyConfig`]; `gpt2` holds
//! [`Gpt2Config`], `json` the JSON readers and the checks every error of
//! which names its field.

mod gpt2;
mod json;
#[cfg(test)]
mod tests;

pub use gpt2::Gpt2Config;

/// HF's `problem_type` of a sequence classifier: how its outputs are
/// trained and scored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProblemType {
    /// Softmax over the labels, cross-entropy (HF's default for ≥ 2 labels).
    SingleLabelClassification,
    /// A sigmoid per label.
    MultiLabelClassification,
    /// The outputs as numbers, MSE (one output: STS-B-style scores).
    Regression,
}

impl ProblemType {
    const ALL: [ProblemType; 3] = [
        ProblemType::SingleLabelClassification,
        ProblemType::MultiLabelClassification,
        ProblemType::Regression,
    ];

    /// The name `config.json` holds.
    pub fn name(self) -> &'static str {
        match self {
            ProblemType::SingleLabelClassification => "single_label_classification",
            ProblemType::MultiLabelClassification => "multi_label_classification",
            ProblemType::Regression => "regression",
        }
    }

    /// From `config.json`'s name; another is an error naming the field.
    pub fn parse(name: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or_else(|| {
                let ok: Vec<&str> = Self::ALL.iter().map(|t| t.name()).collect();
                Error::config(
                    "problem_type",
                    format!("unknown value {name:?} (expected one of {ok:?})"),
                )
            })
    }
}

impl std::fmt::Display for ProblemType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
pub(crate) use json::{parse_json_object, read_json_object};

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::spec::names::{Architecture, Family};
use json::{
    at_most, in_vocab, non_negative_f64, positive, positive_f64, probability, reject_true,
    unsupported, Fields,
};

/// Upper bounds on config sizes, checked before anything is allocated: far
/// above every published GPT-2 and BERT, low enough that a typo or a hostile
/// `config.json` is a clear error instead of an allocation failure. The
/// parameter count as a whole is bounded by [`limits::PARAMS`] when the
/// layout is built, with checked arithmetic.
pub mod limits {
    /// `vocab_size` (the tokenizers' own bound).
    pub const VOCAB: usize = lmkit_tokenizers::MAX_VOCAB_SIZE;
    /// `n_positions` / `max_position_embeddings`.
    pub const POSITIONS: usize = 1 << 20;
    /// `n_embd` / `hidden_size`.
    pub const WIDTH: usize = 1 << 16;
    /// `n_inner` / `intermediate_size`.
    pub const INNER: usize = 1 << 18;
    /// `n_layer` / `num_hidden_layers`.
    pub const LAYERS: usize = 1 << 10;
    /// BERT `type_vocab_size`.
    pub const TYPE_VOCAB: usize = 1 << 10;
    /// BERT `num_labels`.
    pub const LABELS: usize = 1 << 16;
    /// Scalar parameters of one model: 2^34 (17 B, 64 GiB of f32).
    pub const PARAMS: usize = 1 << 34;
}

/// The GELU variant a model uses; what the kernels need to know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` (GPT-2).
    GeluTanh,
    /// `0.5·x·(1 + erf(x/√2))` (BERT).
    GeluErf,
}

/// An HF activation name we support, kept so it is written back as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HfActivation {
    GeluNew,
    GeluPytorchTanh,
    GeluFast,
    GeluAccurate,
    Gelu,
    GeluPython,
}

impl HfActivation {
    const ALL: [HfActivation; 6] = [
        HfActivation::GeluNew,
        HfActivation::GeluPytorchTanh,
        HfActivation::GeluFast,
        HfActivation::GeluAccurate,
        HfActivation::Gelu,
        HfActivation::GeluPython,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HfActivation::GeluNew => "gelu_new",
            HfActivation::GeluPytorchTanh => "gelu_pytorch_tanh",
            HfActivation::GeluFast => "gelu_fast",
            HfActivation::GeluAccurate => "gelu_accurate",
            HfActivation::Gelu => "gelu",
            HfActivation::GeluPython => "gelu_python",
        }
    }

    pub fn parse(s: &str) -> Option<HfActivation> {
        HfActivation::ALL.into_iter().find(|a| a.as_str() == s)
    }

    /// The formula. `gelu_fast`/`gelu_accurate` are the tanh formula with the
    /// constants written differently; `gelu_python` is the erf formula.
    pub fn kind(self) -> Activation {
        match self {
            HfActivation::Gelu | HfActivation::GeluPython => Activation::GeluErf,
            _ => Activation::GeluTanh,
        }
    }
}

/// What every model config offers to checkpoint saving (the layout comes
/// with [`crate::spec::layout::HasLayout`]).
pub trait ModelConfig {
    fn family(&self) -> Family;
    /// The `config.json` object (sorted keys, HF names, `model_type`).
    fn to_json_value(&self) -> Value;
    /// Pretty `config.json` text, as HF writes it.
    fn to_json(&self) -> String {
        // Serialising a Value cannot fail (all keys are strings).
        let mut s = serde_json::to_string_pretty(&self.to_json_value()).unwrap_or_default();
        s.push('\n');
        s
    }
}
/// BERT (`model_type: "bert"`). Defaults are HF's `BertConfig` defaults (base).
///
/// Rejected: `position_embedding_type` other than `"absolute"`,
/// `is_decoder: true`, `add_cross_attention: true`, `tie_word_embeddings: false`.
#[derive(Debug, Clone, PartialEq)]
pub struct BertConfig {
    pub vocab_size: usize,
    /// C.
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    /// NH.
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    pub hidden_act: HfActivation,
    pub hidden_dropout_prob: f64,
    pub attention_probs_dropout_prob: f64,
    /// Dropout before the classifier; `None` means `hidden_dropout_prob`.
    pub classifier_dropout: Option<f64>,
    pub max_position_embeddings: usize,
    pub type_vocab_size: usize,
    pub layer_norm_eps: f64,
    pub initializer_range: f64,
    pub pad_token_id: Option<u32>,
    /// Label names by id (`id2label`, whose JSON keys are strings "0", "1", ...);
    /// `num_labels()` is its length. Default: `LABEL_0`, `LABEL_1`.
    pub id2label: Vec<String>,
    /// What the classifier's outputs are (HF's `problem_type`).
    pub problem_type: Option<ProblemType>,
    pub architectures: Vec<String>,
    /// Other keys, written back unchanged.
    pub extra: Map<String, Value>,
}

impl Default for BertConfig {
    fn default() -> Self {
        BertConfig {
            vocab_size: 30522,
            hidden_size: 768,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            intermediate_size: 3072,
            hidden_act: HfActivation::Gelu,
            hidden_dropout_prob: 0.1,
            attention_probs_dropout_prob: 0.1,
            classifier_dropout: None,
            max_position_embeddings: 512,
            type_vocab_size: 2,
            layer_norm_eps: 1e-12,
            initializer_range: 0.02,
            pad_token_id: Some(0),
            id2label: default_labels(2),
            problem_type: None,
            architectures: vec!["BertModel".into()],
            extra: Map::new(),
        }
    }
}

fn default_labels(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("LABEL_{i}")).collect()
}

/// HF's `id2label` ({"0": name}) and `label2id` ({name: 0}) objects.
fn label_maps(labels: &[String]) -> (Value, Value) {
    let id2label: Map<String, Value> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| (i.to_string(), Value::from(l.clone())))
        .collect();
    let label2id: Map<String, Value> = labels
        .iter()
        .enumerate()
        .map(|(i, l)| (l.clone(), Value::from(i)))
        .collect();
    (Value::Object(id2label), Value::Object(label2id))
}

impl BertConfig {
    /// Reads and validates `config.json`; unknown keys are kept in `extra`.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let map = read_json_object(path)?;
        Self::from_map(map).map_err(|e| e.with_config_path(path))
    }

    /// Parses and validates the text of a `config.json`.
    pub fn from_json_str(text: &str) -> Result<Self> {
        Self::from_map(parse_json_object(text, Path::new("<config.json>"))?)
    }

    fn from_map(map: Map<String, Value>) -> Result<Self> {
        let mut f = Fields(map);
        f.check_model_type("bert")?;
        let d = BertConfig::default();
        let num_labels = f.opt_usize("num_labels")?;
        let id2label = f.id2label(num_labels)?;
        let c = BertConfig {
            vocab_size: f.usize_or("vocab_size", &[], d.vocab_size)?,
            hidden_size: f.usize_or("hidden_size", &[], d.hidden_size)?,
            num_hidden_layers: f.usize_or("num_hidden_layers", &[], d.num_hidden_layers)?,
            num_attention_heads: f.usize_or("num_attention_heads", &[], d.num_attention_heads)?,
            intermediate_size: f.usize_or("intermediate_size", &[], d.intermediate_size)?,
            hidden_act: f.activation("hidden_act", d.hidden_act)?,
            hidden_dropout_prob: f.f64_or("hidden_dropout_prob", d.hidden_dropout_prob)?,
            attention_probs_dropout_prob: f.f64_or(
                "attention_probs_dropout_prob",
                d.attention_probs_dropout_prob,
            )?,
            classifier_dropout: f.opt_f64("classifier_dropout")?,
            max_position_embeddings: f.usize_or(
                "max_position_embeddings",
                &[],
                d.max_position_embeddings,
            )?,
            type_vocab_size: f.usize_or("type_vocab_size", &[], d.type_vocab_size)?,
            layer_norm_eps: f.f64_or("layer_norm_eps", d.layer_norm_eps)?,
            initializer_range: f.f64_or("initializer_range", d.initializer_range)?,
            pad_token_id: f.opt_u32_or("pad_token_id", d.pad_token_id)?,
            id2label,
            problem_type: f
                .opt_string("problem_type")?
                .map(|t| ProblemType::parse(&t))
                .transpose()?,
            architectures: f.architectures()?,
            extra: f.into_extra(),
        };
        c.validate()?;
        Ok(c)
    }

    pub fn num_labels(&self) -> usize {
        self.id2label.len()
    }

    /// HS = C / NH.
    pub fn head_size(&self) -> usize {
        self.hidden_size / self.num_attention_heads.max(1)
    }

    pub fn activation(&self) -> Activation {
        self.hidden_act.kind()
    }

    /// Sets `num_labels` generic labels `LABEL_i`, as HF does for `num_labels=n`.
    pub fn set_num_labels(&mut self, n: usize) {
        self.id2label = default_labels(n);
    }

    /// Checks every value; errors name the field.
    pub fn validate(&self) -> Result<()> {
        positive("vocab_size", self.vocab_size)?;
        positive("hidden_size", self.hidden_size)?;
        positive("num_hidden_layers", self.num_hidden_layers)?;
        positive("num_attention_heads", self.num_attention_heads)?;
        at_most("vocab_size", self.vocab_size, limits::VOCAB)?;
        at_most("hidden_size", self.hidden_size, limits::WIDTH)?;
        at_most("num_hidden_layers", self.num_hidden_layers, limits::LAYERS)?;
        at_most("num_labels", self.num_labels(), limits::LABELS)?;
        if !self.hidden_size.is_multiple_of(self.num_attention_heads) {
            return Err(Error::config(
                "hidden_size",
                format!(
                    "{} is not divisible by num_attention_heads = {}",
                    self.hidden_size, self.num_attention_heads
                ),
            ));
        }
        positive("intermediate_size", self.intermediate_size)?;
        positive("max_position_embeddings", self.max_position_embeddings)?;
        positive("type_vocab_size", self.type_vocab_size)?;
        at_most("intermediate_size", self.intermediate_size, limits::INNER)?;
        at_most(
            "max_position_embeddings",
            self.max_position_embeddings,
            limits::POSITIONS,
        )?;
        at_most("type_vocab_size", self.type_vocab_size, limits::TYPE_VOCAB)?;
        probability("hidden_dropout_prob", self.hidden_dropout_prob)?;
        probability(
            "attention_probs_dropout_prob",
            self.attention_probs_dropout_prob,
        )?;
        if let Some(p) = self.classifier_dropout {
            probability("classifier_dropout", p)?;
        }
        positive_f64("layer_norm_eps", self.layer_norm_eps)?;
        non_negative_f64("initializer_range", self.initializer_range)?;
        in_vocab("pad_token_id", self.pad_token_id, self.vocab_size)?;
        match self.extra.get("position_embedding_type") {
            None | Some(Value::Null) => {}
            Some(Value::String(s)) if s == "absolute" => {}
            Some(v) => {
                return Err(unsupported(
                    "position_embedding_type",
                    &format!("{v} (only \"absolute\" is implemented)"),
                ))
            }
        }
        reject_true(&self.extra, "is_decoder")?;
        reject_true(&self.extra, "add_cross_attention")?;
        if matches!(
            self.extra.get("tie_word_embeddings"),
            Some(Value::Bool(false))
        ) {
            return Err(unsupported(
                "tie_word_embeddings",
                "false (an untied MLM decoder)",
            ));
        }
        Ok(())
    }
}

impl ModelConfig for BertConfig {
    fn family(&self) -> Family {
        Family::Bert
    }

    fn to_json_value(&self) -> Value {
        let mut m = self.extra.clone();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        put("model_type", "bert".into());
        put("architectures", self.architectures.clone().into());
        put("vocab_size", self.vocab_size.into());
        put("hidden_size", self.hidden_size.into());
        put("num_hidden_layers", self.num_hidden_layers.into());
        put("num_attention_heads", self.num_attention_heads.into());
        put("intermediate_size", self.intermediate_size.into());
        put("hidden_act", self.hidden_act.as_str().into());
        put("hidden_dropout_prob", self.hidden_dropout_prob.into());
        put(
            "attention_probs_dropout_prob",
            self.attention_probs_dropout_prob.into(),
        );
        put("classifier_dropout", self.classifier_dropout.into());
        put(
            "max_position_embeddings",
            self.max_position_embeddings.into(),
        );
        put("type_vocab_size", self.type_vocab_size.into());
        put("layer_norm_eps", self.layer_norm_eps.into());
        put("initializer_range", self.initializer_range.into());
        put("pad_token_id", self.pad_token_id.into());
        let (id2label, label2id) = label_maps(&self.id2label);
        put("id2label", id2label);
        put("label2id", label2id);
        if let Some(t) = self.problem_type {
            put("problem_type", t.name().into());
        }
        Value::Object(m)
    }
}

/// A config of either family, detected from `model_type` (else `architectures`).
#[derive(Debug, Clone, PartialEq)]
pub enum AnyConfig {
    Gpt2(Gpt2Config),
    Bert(BertConfig),
}

impl AnyConfig {
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let map = read_json_object(path)?;
        Self::from_map(map).map_err(|e| e.with_config_path(path))
    }

    pub fn from_json_str(text: &str) -> Result<Self> {
        Self::from_map(parse_json_object(text, Path::new("<config.json>"))?)
    }

    fn from_map(map: Map<String, Value>) -> Result<Self> {
        let family = match map.get("model_type") {
            Some(Value::String(t)) if t == "gpt2" => Family::Gpt2,
            Some(Value::String(t)) if t == "bert" => Family::Bert,
            Some(v) if !v.is_null() => {
                return Err(Error::config(
                    "model_type",
                    format!("unsupported model type {v} (expected \"gpt2\" or \"bert\")"),
                ))
            }
            _ => {
                let archs: Vec<&str> = match map.get("architectures") {
                    Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
                    _ => vec![],
                };
                if archs.iter().any(|a| a.starts_with("GPT2")) {
                    Family::Gpt2
                } else if archs.iter().any(|a| a.starts_with("Bert")) {
                    Family::Bert
                } else {
                    return Err(Error::config(
                        "model_type",
                        "absent, and `architectures` names no GPT2*/Bert* class",
                    ));
                }
            }
        };
        Ok(match family {
            Family::Gpt2 => AnyConfig::Gpt2(Gpt2Config::from_map(map)?),
            Family::Bert => AnyConfig::Bert(BertConfig::from_map(map)?),
        })
    }

    pub fn architectures(&self) -> &[String] {
        match self {
            AnyConfig::Gpt2(c) => &c.architectures,
            AnyConfig::Bert(c) => &c.architectures,
        }
    }

    /// The first class in `architectures` we implement, else the family's
    /// base default (`GPT2LMHeadModel`, `BertModel`).
    pub fn architecture(&self) -> Architecture {
        let family = self.family();
        self.architectures()
            .iter()
            .filter_map(|a| Architecture::from_hf_name(a))
            .find(|a| a.family() == family)
            .unwrap_or(match family {
                Family::Gpt2 => Architecture::Gpt2LMHeadModel,
                Family::Bert => Architecture::BertModel,
            })
    }

    pub fn validate(&self) -> Result<()> {
        match self {
            AnyConfig::Gpt2(c) => c.validate(),
            AnyConfig::Bert(c) => c.validate(),
        }
    }
}

impl ModelConfig for AnyConfig {
    fn family(&self) -> Family {
        match self {
            AnyConfig::Gpt2(_) => Family::Gpt2,
            AnyConfig::Bert(_) => Family::Bert,
        }
    }

    fn to_json_value(&self) -> Value {
        match self {
            AnyConfig::Gpt2(c) => c.to_json_value(),
            AnyConfig::Bert(c) => c.to_json_value(),
        }
    }
}

impl From<Gpt2Config> for AnyConfig {
    fn from(c: Gpt2Config) -> Self {
        AnyConfig::Gpt2(c)
    }
}

impl From<BertConfig> for AnyConfig {
    fn from(c: BertConfig) -> Self {
        AnyConfig::Bert(c)
    }
}
