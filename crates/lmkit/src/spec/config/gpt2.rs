//! GPT-2's `config.json` ([`Gpt2Config`]).

use std::path::Path;

use serde_json::{Map, Value};

use super::json::{
    at_most, non_negative_f64, parse_json_object, positive, positive_f64, probability,
    read_json_object, reject_true, unsupported, Fields,
};
use super::{default_labels, label_maps, limits, Activation, HfActivation, ModelConfig};
use crate::error::{Error, Result};
use crate::spec::names::Family;

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

    pub(super) fn from_map(map: Map<String, Value>) -> Result<Self> {
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
