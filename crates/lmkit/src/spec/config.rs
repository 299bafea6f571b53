//! Model configurations read from and written to HF `config.json`.
//!
//! Keys are HF's, with HF's aliases (`hidden_size` for `n_embd`, ...) and HF's
//! defaults for absent keys, so a `config.json` means here what it means to
//! transformers. Keys we do not model are kept in `extra` and written back
//! unchanged, except those that would change the computation to something we
//! do not implement: those are rejected, naming the field (DESIGN: unsupported
//! options are errors, never silent no-ops).

use std::path::Path;

use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::spec::names::{Architecture, Family};

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

/// GPT-2 (`model_type: "gpt2"`). Defaults are HF's `GPT2Config` defaults (124M).
///
/// Ignored with a reason: `reorder_and_upcast_attn` only changes fp16
/// precision (we compute attention in f32); dropout and `summary_*` keys of
/// other heads are kept in `extra` (`GPT2DoubleHeadsModel` checks its
/// `summary_*` keys). Rejected: `scale_attn_by_inverse_layer_idx: true`,
/// `add_cross_attention: true`, `scale_attn_weights: false`.
#[derive(Debug, Clone, PartialEq)]
pub struct Gpt2Config {
    pub vocab_size: usize,
    /// Context length (alias `n_ctx`, `max_position_embeddings`).
    pub n_positions: usize,
    /// C (alias `hidden_size`).
    pub n_embd: usize,
    /// alias `num_hidden_layers`.
    pub n_layer: usize,
    /// NH (alias `num_attention_heads`).
    pub n_head: usize,
    /// MLP width; `None` means 4·C (see [`Gpt2Config::inner`]).
    pub n_inner: Option<usize>,
    pub activation_function: HfActivation,
    pub resid_pdrop: f64,
    pub embd_pdrop: f64,
    pub attn_pdrop: f64,
    pub layer_norm_epsilon: f64,
    pub initializer_range: f64,
    pub bos_token_id: Option<u32>,
    pub eos_token_id: Option<u32>,
    /// Pooled token of `GPT2ForSequenceClassification`: the rightmost
    /// token != `pad_token_id` (lmkit writes eos here when it fine-tunes).
    pub pad_token_id: Option<u32>,
    /// True: the LM head is `wte`; false: its own `lm_head.weight` [V, C].
    pub tie_word_embeddings: bool,
    /// Label names of `GPT2ForSequenceClassification` (`id2label`; HF's
    /// default `LABEL_0`, `LABEL_1`); `num_labels()` is its length.
    pub id2label: Vec<String>,
    /// Must be true (scores are divided by √HS).
    pub scale_attn_weights: bool,
    pub architectures: Vec<String>,
    /// Other keys, written back unchanged.
    pub extra: Map<String, Value>,
}

impl Default for Gpt2Config {
    fn default() -> Self {
        Gpt2Config {
            vocab_size: 50257,
            n_positions: 1024,
            n_embd: 768,
            n_layer: 12,
            n_head: 12,
            n_inner: None,
            activation_function: HfActivation::GeluNew,
            resid_pdrop: 0.1,
            embd_pdrop: 0.1,
            attn_pdrop: 0.1,
            layer_norm_epsilon: 1e-5,
            initializer_range: 0.02,
            bos_token_id: Some(50256),
            eos_token_id: Some(50256),
            pad_token_id: None,
            tie_word_embeddings: true,
            id2label: default_labels(2),
            scale_attn_weights: true,
            architectures: vec!["GPT2LMHeadModel".into()],
            extra: Map::new(),
        }
    }
}

impl Gpt2Config {
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
        f.check_model_type("gpt2")?;
        let d = Gpt2Config::default();
        let num_labels = f.opt_usize("num_labels")?;
        let c = Gpt2Config {
            vocab_size: f.usize_or("vocab_size", &[], d.vocab_size)?,
            n_positions: f.usize_or(
                "n_positions",
                &["n_ctx", "max_position_embeddings"],
                d.n_positions,
            )?,
            n_embd: f.usize_or("n_embd", &["hidden_size"], d.n_embd)?,
            n_layer: f.usize_or("n_layer", &["num_hidden_layers"], d.n_layer)?,
            n_head: f.usize_or("n_head", &["num_attention_heads"], d.n_head)?,
            n_inner: f.opt_usize("n_inner")?,
            activation_function: f.activation("activation_function", d.activation_function)?,
            resid_pdrop: f.f64_or("resid_pdrop", d.resid_pdrop)?,
            embd_pdrop: f.f64_or("embd_pdrop", d.embd_pdrop)?,
            attn_pdrop: f.f64_or("attn_pdrop", d.attn_pdrop)?,
            layer_norm_epsilon: f.f64_or("layer_norm_epsilon", d.layer_norm_epsilon)?,
            initializer_range: f.f64_or("initializer_range", d.initializer_range)?,
            bos_token_id: f.opt_u32_or("bos_token_id", d.bos_token_id)?,
            eos_token_id: f.opt_u32_or("eos_token_id", d.eos_token_id)?,
            pad_token_id: f.opt_u32_or("pad_token_id", d.pad_token_id)?,
            tie_word_embeddings: f.bool_or("tie_word_embeddings", true)?,
            id2label: f.id2label(num_labels)?,
            scale_attn_weights: f.bool_or("scale_attn_weights", true)?,
            architectures: f.architectures()?,
            extra: f.into_extra(),
        };
        c.validate()?;
        Ok(c)
    }

    /// The MLP width: `n_inner`, or 4·C when unset.
    pub fn inner(&self) -> usize {
        self.n_inner.unwrap_or(4 * self.n_embd)
    }

    /// HS = C / NH.
    pub fn head_size(&self) -> usize {
        self.n_embd / self.n_head.max(1)
    }

    pub fn activation(&self) -> Activation {
        self.activation_function.kind()
    }

    /// Checks every value; errors name the field.
    pub fn validate(&self) -> Result<()> {
        positive("vocab_size", self.vocab_size)?;
        positive("n_positions", self.n_positions)?;
        positive("n_embd", self.n_embd)?;
        positive("n_layer", self.n_layer)?;
        positive("n_head", self.n_head)?;
        at_most("vocab_size", self.vocab_size, limits::VOCAB)?;
        at_most("n_positions", self.n_positions, limits::POSITIONS)?;
        at_most("n_embd", self.n_embd, limits::WIDTH)?;
        at_most("n_layer", self.n_layer, limits::LAYERS)?;
        if !self.n_embd.is_multiple_of(self.n_head) {
            return Err(Error::config(
                "n_embd",
                format!(
                    "{} is not divisible by n_head = {}",
                    self.n_embd, self.n_head
                ),
            ));
        }
        if let Some(n) = self.n_inner {
            positive("n_inner", n)?;
            at_most("n_inner", n, limits::INNER)?;
        }
        // bos/eos/pad ids are not checked against the vocabulary here: HF's
        // defaults (50256) stay in configs of smaller test models; what uses
        // them checks them (generation, padding).
        probability("resid_pdrop", self.resid_pdrop)?;
        probability("embd_pdrop", self.embd_pdrop)?;
        probability("attn_pdrop", self.attn_pdrop)?;
        positive_f64("layer_norm_epsilon", self.layer_norm_epsilon)?;
        non_negative_f64("initializer_range", self.initializer_range)?;
        at_most("num_labels", self.num_labels(), limits::LABELS)?;
        if !self.scale_attn_weights {
            return Err(unsupported(
                "scale_attn_weights",
                "false (unscaled attention)",
            ));
        }
        reject_true(&self.extra, "scale_attn_by_inverse_layer_idx")?;
        reject_true(&self.extra, "add_cross_attention")?;
        Ok(())
    }

    pub fn num_labels(&self) -> usize {
        self.id2label.len()
    }

    /// Sets `num_labels` generic labels `LABEL_i`, as HF does for `num_labels=n`.
    pub fn set_num_labels(&mut self, n: usize) {
        self.id2label = default_labels(n);
    }
}

impl ModelConfig for Gpt2Config {
    fn family(&self) -> Family {
        Family::Gpt2
    }

    fn to_json_value(&self) -> Value {
        let mut m = self.extra.clone();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        put("model_type", "gpt2".into());
        put("architectures", self.architectures.clone().into());
        put("vocab_size", self.vocab_size.into());
        put("n_positions", self.n_positions.into());
        put("n_embd", self.n_embd.into());
        put("n_layer", self.n_layer.into());
        put("n_head", self.n_head.into());
        put("n_inner", self.n_inner.into());
        put(
            "activation_function",
            self.activation_function.as_str().into(),
        );
        put("resid_pdrop", self.resid_pdrop.into());
        put("embd_pdrop", self.embd_pdrop.into());
        put("attn_pdrop", self.attn_pdrop.into());
        put("layer_norm_epsilon", self.layer_norm_epsilon.into());
        put("initializer_range", self.initializer_range.into());
        put("bos_token_id", self.bos_token_id.into());
        put("eos_token_id", self.eos_token_id.into());
        put("pad_token_id", self.pad_token_id.into());
        put("tie_word_embeddings", self.tie_word_embeddings.into());
        put("scale_attn_weights", self.scale_attn_weights.into());
        let (id2label, label2id) = label_maps(&self.id2label);
        put("id2label", id2label);
        put("label2id", label2id);
        Value::Object(m)
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
    /// `single_label_classification` | `multi_label_classification` | `regression`.
    pub problem_type: Option<String>,
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
            problem_type: f.opt_string("problem_type")?,
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
        if let Some(t) = &self.problem_type {
            const OK: [&str; 3] = [
                "single_label_classification",
                "multi_label_classification",
                "regression",
            ];
            if !OK.contains(&t.as_str()) {
                return Err(Error::config(
                    "problem_type",
                    format!("unknown value {t:?} (expected one of {OK:?})"),
                ));
            }
        }
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
        if let Some(t) = &self.problem_type {
            put("problem_type", t.clone().into());
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

// ---------------------------------------------------------------------------
// JSON reading helpers: every error names the field.

pub(crate) fn read_json_object(path: &Path) -> Result<Map<String, Value>> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    parse_json_object(&text, path)
}

pub(crate) fn parse_json_object(text: &str, path: &Path) -> Result<Map<String, Value>> {
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(other) => Err(Error::Json {
            path: path.to_path_buf(),
            line: 1,
            col: 1,
            msg: format!("expected a JSON object, found {}", kind_of(&other)),
        }),
        Err(e) => Err(json_error(path, &e)),
    }
}

/// Converts a serde_json error, dropping its own " at line L column C" suffix.
pub(crate) fn json_error(path: &Path, e: &serde_json::Error) -> Error {
    let msg = e.to_string();
    let msg = match msg.rfind(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg,
    };
    Error::Json {
        path: path.to_path_buf(),
        line: e.line(),
        col: e.column(),
        msg,
    }
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn positive(field: &str, v: usize) -> Result<()> {
    if v == 0 {
        return Err(Error::config(field, "must be at least 1, found 0"));
    }
    Ok(())
}

fn at_most(field: &str, v: usize, max: usize) -> Result<()> {
    if v > max {
        return Err(Error::config(
            field,
            format!("{v} is above the limit of {max}"),
        ));
    }
    Ok(())
}

fn in_vocab(field: &str, id: Option<u32>, vocab_size: usize) -> Result<()> {
    match id {
        Some(id) if id as usize >= vocab_size => Err(Error::config(
            field,
            format!("{id} is outside the vocabulary of {vocab_size}"),
        )),
        _ => Ok(()),
    }
}

fn positive_f64(field: &str, v: f64) -> Result<()> {
    if !(v.is_finite() && v > 0.0) {
        return Err(Error::config(
            field,
            format!("must be a positive number, found {v}"),
        ));
    }
    Ok(())
}

fn non_negative_f64(field: &str, v: f64) -> Result<()> {
    if !(v.is_finite() && v >= 0.0) {
        return Err(Error::config(
            field,
            format!("must be a non-negative number, found {v}"),
        ));
    }
    Ok(())
}

fn probability(field: &str, v: f64) -> Result<()> {
    if !(0.0..1.0).contains(&v) {
        return Err(Error::config(
            field,
            format!("must be in [0, 1), found {v}"),
        ));
    }
    Ok(())
}

fn unsupported(field: &str, what: &str) -> Error {
    Error::config(field, format!("unsupported value {what}"))
}

fn reject_true(extra: &Map<String, Value>, field: &str) -> Result<()> {
    match extra.get(field) {
        None | Some(Value::Null) | Some(Value::Bool(false)) => Ok(()),
        Some(Value::Bool(true)) => Err(unsupported(field, "true")),
        Some(v) => Err(Error::config(
            field,
            format!("expected a boolean, found {}", kind_of(v)),
        )),
    }
}

/// The keys of a config object; typed getters remove what they read, the
/// rest becomes `extra`.
struct Fields(Map<String, Value>);

impl Fields {
    /// Removes `key` and its aliases; two present with different values is an error.
    fn take(&mut self, key: &str, aliases: &[&str]) -> Result<Option<(String, Value)>> {
        let mut found: Option<(String, Value)> = self.0.remove(key).map(|v| (key.to_string(), v));
        for alias in aliases {
            if let Some(v) = self.0.remove(*alias) {
                match &found {
                    Some((k, prev)) if *prev != v && !prev.is_null() && !v.is_null() => {
                        return Err(Error::config(
                            key,
                            format!("`{k}` = {prev} and its alias `{alias}` = {v} disagree"),
                        ))
                    }
                    Some((_, prev)) if !prev.is_null() => {}
                    _ => found = Some((alias.to_string(), v)),
                }
            }
        }
        Ok(found.filter(|(_, v)| !v.is_null()))
    }

    fn usize_or(&mut self, key: &str, aliases: &[&str], default: usize) -> Result<usize> {
        match self.take(key, aliases)? {
            None => Ok(default),
            Some((k, v)) => as_usize(&k, &v),
        }
    }

    fn opt_usize(&mut self, key: &str) -> Result<Option<usize>> {
        self.take(key, &[])?
            .map(|(k, v)| as_usize(&k, &v))
            .transpose()
    }

    /// An optional id: absent → `default`, explicit `null` → `None`.
    fn opt_u32_or(&mut self, key: &str, default: Option<u32>) -> Result<Option<u32>> {
        match self.0.remove(key) {
            None => Ok(default),
            Some(Value::Null) => Ok(None),
            Some(v) => {
                let n = as_usize(key, &v)?;
                u32::try_from(n)
                    .map(Some)
                    .map_err(|_| Error::config(key, format!("{n} does not fit in 32 bits")))
            }
        }
    }

    fn f64_or(&mut self, key: &str, default: f64) -> Result<f64> {
        Ok(self.opt_f64(key)?.unwrap_or(default))
    }

    fn opt_f64(&mut self, key: &str) -> Result<Option<f64>> {
        match self.take(key, &[])? {
            None => Ok(None),
            Some((k, v)) => v.as_f64().map(Some).ok_or_else(|| {
                Error::config(k, format!("expected a number, found {}", kind_of(&v)))
            }),
        }
    }

    fn bool_or(&mut self, key: &str, default: bool) -> Result<bool> {
        match self.take(key, &[])? {
            None => Ok(default),
            Some((k, Value::Bool(b))) => {
                let _ = k;
                Ok(b)
            }
            Some((k, v)) => Err(Error::config(
                k,
                format!("expected a boolean, found {}", kind_of(&v)),
            )),
        }
    }

    fn opt_string(&mut self, key: &str) -> Result<Option<String>> {
        match self.take(key, &[])? {
            None => Ok(None),
            Some((_, Value::String(s))) => Ok(Some(s)),
            Some((k, v)) => Err(Error::config(
                k,
                format!("expected a string, found {}", kind_of(&v)),
            )),
        }
    }

    fn activation(&mut self, key: &str, default: HfActivation) -> Result<HfActivation> {
        match self.opt_string(key)? {
            None => Ok(default),
            Some(s) => HfActivation::parse(&s).ok_or_else(|| {
                let ok: Vec<&str> = HfActivation::ALL.iter().map(|a| a.as_str()).collect();
                Error::config(
                    key,
                    format!(
                        "unsupported activation {s:?} (supported: {})",
                        ok.join(", ")
                    ),
                )
            }),
        }
    }

    fn check_model_type(&mut self, expected: &str) -> Result<()> {
        match self.0.remove("model_type") {
            None | Some(Value::Null) => Ok(()),
            Some(Value::String(s)) if s == expected => Ok(()),
            Some(v) => Err(Error::config(
                "model_type",
                format!("expected \"{expected}\", found {v}"),
            )),
        }
    }

    fn architectures(&mut self) -> Result<Vec<String>> {
        match self.take("architectures", &[])? {
            None => Ok(vec![]),
            Some((_, Value::Array(a))) => a
                .into_iter()
                .map(|v| match v {
                    Value::String(s) => Ok(s),
                    v => Err(Error::config(
                        "architectures",
                        format!("expected strings, found {}", kind_of(&v)),
                    )),
                })
                .collect(),
            Some((_, v)) => Err(Error::config(
                "architectures",
                format!("expected an array of strings, found {}", kind_of(&v)),
            )),
        }
    }

    /// `id2label` (keys "0".."n-1"), else inverted `label2id`, else
    /// `num_labels` generic labels, else 2 (HF's default).
    fn id2label(&mut self, num_labels: Option<usize>) -> Result<Vec<String>> {
        let id2label = self.take("id2label", &[])?;
        let label2id = self.take("label2id", &[])?;
        let labels = if let Some((_, v)) = id2label {
            let Value::Object(m) = v else {
                return Err(Error::config(
                    "id2label",
                    format!("expected an object, found {}", kind_of(&v)),
                ));
            };
            let mut labels: Vec<Option<String>> = vec![None; m.len()];
            for (k, v) in m {
                let id: usize = k
                    .parse()
                    .ok()
                    .filter(|&i| i < labels.len())
                    .ok_or_else(|| {
                        Error::config(
                            "id2label",
                            format!("key {k:?} is not an id in 0..{}", labels.len()),
                        )
                    })?;
                let Value::String(name) = v else {
                    return Err(Error::config(
                        "id2label",
                        format!("label of id {k} is not a string"),
                    ));
                };
                labels[id] = Some(name);
            }
            // m.len() distinct keys all < len: every slot is filled.
            labels.into_iter().map(Option::unwrap_or_default).collect()
        } else if let Some((_, v)) = label2id {
            let Value::Object(m) = v else {
                return Err(Error::config(
                    "label2id",
                    format!("expected an object, found {}", kind_of(&v)),
                ));
            };
            let mut labels: Vec<Option<String>> = vec![None; m.len()];
            for (name, v) in m {
                let id = as_usize("label2id", &v)?;
                match labels.get_mut(id) {
                    Some(slot @ None) => *slot = Some(name),
                    _ => {
                        return Err(Error::config(
                            "label2id",
                            format!(
                                "ids must be 0..{} each used once; bad id {id} for {name:?}",
                                labels.len()
                            ),
                        ))
                    }
                }
            }
            labels.into_iter().map(Option::unwrap_or_default).collect()
        } else {
            let n = num_labels.unwrap_or(2);
            at_most("num_labels", n, limits::LABELS)?;
            default_labels(n)
        };
        if let Some(n) = num_labels {
            if n != labels.len() {
                return Err(Error::config(
                    "num_labels",
                    format!("{n} disagrees with the {} labels of id2label", labels.len()),
                ));
            }
        }
        Ok(labels)
    }

    /// What is left, minus keys describing the file rather than the model.
    fn into_extra(mut self) -> Map<String, Value> {
        for k in [
            "transformers_version",
            "dtype",
            "torch_dtype",
            "_name_or_path",
        ] {
            self.0.remove(k);
        }
        self.0
    }
}

fn as_usize(key: &str, v: &Value) -> Result<usize> {
    v.as_u64()
        .and_then(|n| usize::try_from(n).ok())
        .ok_or_else(|| Error::config(key, format!("expected a non-negative integer, found {v}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_aliases_defaults_and_errors() {
        let c = Gpt2Config::from_json_str(r#"{"n_ctx": 64, "n_positions": 64, "hidden_size": 32, "n_head": 4, "n_layer": 2, "foo": [1]}"#).unwrap();
        assert_eq!(
            (c.n_positions, c.n_embd, c.inner(), c.vocab_size),
            (64, 32, 128, 50257)
        );
        assert_eq!(c.extra.get("foo"), Some(&serde_json::json!([1])));
        let e = Gpt2Config::from_json_str(r#"{"n_ctx": 64, "n_positions": 32}"#).unwrap_err();
        assert!(e.to_string().contains("n_ctx"), "{e}");
        let e = Gpt2Config::from_json_str(r#"{"n_embd": 30, "n_head": 4}"#).unwrap_err();
        assert!(
            matches!(&e, Error::Config { field, .. } if field == "n_embd"),
            "{e}"
        );
        let e = Gpt2Config::from_json_str(r#"{"activation_function": "relu"}"#).unwrap_err();
        assert!(e.to_string().contains("\"relu\""), "{e}");
        let e = Gpt2Config::from_json_str(r#"{"n_layer": -1}"#).unwrap_err();
        assert!(
            matches!(&e, Error::Config { field, .. } if field == "n_layer"),
            "{e}"
        );
        let e =
            Gpt2Config::from_json_str(r#"{"scale_attn_by_inverse_layer_idx": true}"#).unwrap_err();
        assert!(
            e.to_string().contains("scale_attn_by_inverse_layer_idx"),
            "{e}"
        );
        assert!(Gpt2Config::from_json_str(r#"{"reorder_and_upcast_attn": true}"#).is_ok());
        let e = Gpt2Config::from_json_str(r#"{"model_type": "bert"}"#).unwrap_err();
        assert!(e.to_string().contains("model_type"), "{e}");
    }

    #[test]
    fn bert_labels_and_rejections() {
        let c = BertConfig::from_json_str(
            r#"{"id2label": {"1": "pos", "0": "neg"}, "label2id": {"neg": 0, "pos": 1}}"#,
        )
        .unwrap();
        assert_eq!(c.id2label, vec!["neg", "pos"]);
        let c = BertConfig::from_json_str(r#"{"num_labels": 3}"#).unwrap();
        assert_eq!(c.num_labels(), 3);
        let e = BertConfig::from_json_str(r#"{"id2label": {"0": "a", "2": "b"}}"#).unwrap_err();
        assert!(e.to_string().contains("id2label"), "{e}");
        let e = BertConfig::from_json_str(r#"{"position_embedding_type": "relative_key"}"#)
            .unwrap_err();
        assert!(e.to_string().contains("position_embedding_type"), "{e}");
        let e = BertConfig::from_json_str(r#"{"hidden_dropout_prob": 1.5}"#).unwrap_err();
        assert!(e.to_string().contains("hidden_dropout_prob"), "{e}");
        let e = BertConfig::from_json_str(r#"{"is_decoder": true}"#).unwrap_err();
        assert!(e.to_string().contains("is_decoder"), "{e}");
    }

    #[test]
    fn json_round_trip_and_detection() {
        let g = Gpt2Config {
            n_layer: 3,
            ..Default::default()
        };
        let back = AnyConfig::from_json_str(&g.to_json()).unwrap();
        assert_eq!(back, AnyConfig::Gpt2(g));
        let mut b = BertConfig {
            hidden_size: 64,
            num_attention_heads: 4,
            ..Default::default()
        };
        b.set_num_labels(3);
        let back = AnyConfig::from_json_str(&b.to_json()).unwrap();
        assert_eq!(back.family(), Family::Bert);
        assert_eq!(back, AnyConfig::Bert(b));
        let a = AnyConfig::from_json_str(r#"{"architectures": ["BertForMaskedLM"]}"#).unwrap();
        assert_eq!(a.architecture(), Architecture::BertForMaskedLM);
        let e = AnyConfig::from_json_str(r#"{"model_type": "llama"}"#).unwrap_err();
        assert!(e.to_string().contains("llama"), "{e}");
        let e = AnyConfig::from_json_str("{\n  \"a\": 1,\n}").unwrap_err();
        assert!(matches!(e, Error::Json { line: 3, .. }), "{e}");
    }
}
