//! BERT (Devlin et al. 2018) on the explicit kernels: the post-LN encoder
//! and its HF heads (pooler, MLM, NSP, sequence classification, span QA).
//!
//! Shape legend: B batch, T sequence (padded), C channels (`hidden_size`),
//! NH heads, HS = C/NH, I intermediate size, V vocabulary, L labels,
//! N = B·T rows, M = rows selected for a head (e.g. `[MASK]` positions).
//!
//! Encoder layer (HF `BertLayer`, post-LayerNorm):
//! ```text
//! qkv = x·Wqkvᵀ + b          [N,3C]   (query|key|value packed, see model::layout)
//! a   = attention(qkv, mask) [N,C]
//! h   = LN(a·Woᵀ + bo + x)   [N,C]
//! y   = LN(gelu(h·Wiᵀ + bi)·Wdᵀ + bd + h)
//! ```
//! Every intermediate lives in [`BertActivations`]; with `keep_all` each
//! layer has its own buffers (what a backward pass needs), otherwise one set
//! is reused (inference). [`Bert::forward_unpadded`] runs only the real
//! tokens of a right-padded batch: then N = R, their count, and attention
//! keeps to each sequence's rows.
//!
//! This file holds [`Bert`] (loading, weight formats, the heads' inference
//! methods) and [`BertBatch`]; `forward` the encoder forward,
//! `activations` its buffers.

mod activations;
mod forward;

pub use activations::{BertActivations, LayerActs};

use std::path::Path;

use lmkit_tokenizers::Encoding;

use crate::checkpoint::{load_params, open_model_dir_for, LoadOptions, SafeTensors};
use crate::error::{Error, Result};
use crate::kernels::Gelu;
use crate::spec::config::{Activation, AnyConfig, BertConfig};
use crate::spec::layout::ParamLayout;
use crate::spec::layout::{bert_layout, bert_qkv_bias_range, bert_qkv_weight_range};
use crate::spec::names::{canonical_name, Architecture, BertHeads, Family};

use super::heads::{linear_head, qa_forward, MlmHead, Pooler};
use super::weights::{Bf16Weights, EncoderMatmul, F32Weights, Int8Weights, PackedLinear};
use crate::models::gpt2::WeightDtype;

/// A BERT checkpoint in memory: config, which heads it has, and the flat
/// parameter buffer laid out by [`bert_layout`].
pub struct Bert {
    pub config: BertConfig,
    pub heads: BertHeads,
    /// The HF class the checkpoint declares (first of `architectures`), if known.
    pub architecture: Option<Architecture>,
    pub layout: ParamLayout,
    pub params: Vec<f32>,
    /// Inference copies of the encoder matmul weights, when enabled.
    packed: Option<Packed>,
    /// bf16 training's copy from before the last optimizer step, packed
    /// again at the next forward ([`Self::weights_changed`]).
    bf16_spare: Option<Bf16Weights>,
}

/// The encoder's matmul weights in an inference format.
#[derive(Debug, Clone)]
enum Packed {
    F32(F32Weights),
    Bf16(Bf16Weights),
    Int8(Int8Weights),
}

impl std::fmt::Debug for Bert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bert")
            .field("config", &self.config)
            .field("heads", &self.heads)
            .field("architecture", &self.architecture)
            .field("params", &self.params.len())
            .field("dtype", &self.dtype())
            .finish()
    }
}

/// A head a caller asked for; used in "checkpoint has no ... head" errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadKind {
    Pooler,
    MaskedLm,
    NextSentence,
    Classifier,
    TokenClassifier,
    QuestionAnswering,
    MultipleChoice,
}

impl HeadKind {
    fn describe(self) -> &'static str {
        match self {
            HeadKind::Pooler => "pooler (`pooler.dense.*`)",
            HeadKind::MaskedLm => "masked-LM head (`cls.predictions.*`)",
            HeadKind::NextSentence => "next-sentence head (`cls.seq_relationship.*`)",
            HeadKind::Classifier => "sequence-classification head (`classifier.*`)",
            HeadKind::TokenClassifier => {
                "token-classification head (`classifier.*` of BertForTokenClassification)"
            }
            HeadKind::QuestionAnswering => "question-answering head (`qa_outputs.*`)",
            HeadKind::MultipleChoice => {
                "multiple-choice head (`classifier.*` of BertForMultipleChoice)"
            }
        }
    }
}

/// Which heads the tensors of `file` hold (by canonical name).
fn detect_heads(file: &SafeTensors) -> BertHeads {
    let mut h = BertHeads::default();
    for key in file.names() {
        let name = canonical_name(Family::Bert, key);
        if name.starts_with("pooler.") {
            h.pooler = true;
        } else if name.starts_with("cls.predictions.") {
            h.mlm = true;
        } else if name.starts_with("cls.seq_relationship.") {
            h.nsp = true;
        } else if name.starts_with("classifier.") {
            h.classifier = true;
        } else if name.starts_with("qa_outputs.") {
            h.qa = true;
        }
    }
    h
}

impl Bert {
    /// Loads an HF model directory (`config.json` + `model.safetensors`).
    /// The heads are those whose tensors the file holds; every tensor must
    /// fit the config (errors name the key).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<Bert> {
        let dir = dir.as_ref();
        let (config, file) = open_model_dir_for(dir, Some((Family::Bert, "a BERT model")))?;
        let config = match config {
            AnyConfig::Bert(c) => c,
            _ => {
                return Err(Error::Config {
                    path: Some(dir.join("config.json")),
                    field: "model_type".into(),
                    msg: "expected a BERT model (model_type \"bert\")".into(),
                })
            }
        };
        let mut heads = detect_heads(&file);
        // `classifier.*` is per token, or one score per choice, when the
        // checkpoint says so.
        let says = |arch: Architecture| config.architectures.iter().any(|a| a == arch.hf_name());
        if heads.classifier && says(Architecture::BertForTokenClassification) {
            heads.classifier = false;
            heads.token_classifier = true;
        } else if heads.classifier && says(Architecture::BertForMultipleChoice) {
            heads.classifier = false;
            heads.multiple_choice = true;
        }
        let architecture = config
            .architectures
            .first()
            .and_then(|a| Architecture::from_hf_name(a));
        let layout = bert_layout(&config, heads)?;
        let mut params = layout.try_zeros()?;
        load_params(
            &layout,
            &mut params,
            &file,
            Family::Bert,
            LoadOptions::default(),
        )?;
        Bert::from_parts(config, heads, layout, params, architecture)
    }

    /// A model from an existing parameter buffer (e.g. fresh from training).
    pub fn from_parts(
        config: BertConfig,
        heads: BertHeads,
        layout: ParamLayout,
        params: Vec<f32>,
        architecture: Option<Architecture>,
    ) -> Result<Bert> {
        let expected = bert_layout(&config, heads)?;
        if expected != layout || params.len() != layout.total_len() {
            return Err(Error::InvalidInput(
                "parameter layout or buffer does not match the BERT config and heads".into(),
            ));
        }
        let m = Bert {
            config,
            heads,
            architecture,
            layout,
            params,
            packed: None,
            bf16_spare: None,
        };
        // The packed q|k|v views are a layout invariant; check once here.
        for l in 0..m.config.num_hidden_layers {
            if bert_qkv_weight_range(&m.layout, l).is_none()
                || bert_qkv_bias_range(&m.layout, l).is_none()
            {
                return Err(Error::InvalidInput(format!(
                    "layer {l}: query/key/value are not adjacent"
                )));
            }
        }
        Ok(m)
    }

    /// Packs the encoder's matmul weights for inference in `dtype`: f32
    /// (transposed to the orientation the gemm multiplies without repacking
    /// them on every call: MiniLM ~3× faster on one short text), bf16 (bf16
    /// operands, f32 sums) or int8 (weights per output channel, activations
    /// quantized per row as they arrive, i32 sums). Embeddings, LayerNorm,
    /// attention and the heads stay f32, and so do the parameters: the copy
    /// is extra memory (f32: the encoder's matrices once more), and stale
    /// once `params` change. A model fresh from a checkpoint, or after
    /// training, multiplies its f32 parameters as they are.
    pub fn set_dtype(&mut self, dtype: WeightDtype) -> Result<()> {
        dtype.check_inputs(self.config.hidden_size.max(self.config.intermediate_size))?;
        let (cfg, layout, params) = (&self.config, &self.layout, &self.params);
        self.packed = match dtype {
            WeightDtype::F32 => Some(Packed::F32(F32Weights::new(cfg, layout, params))),
            WeightDtype::Bf16 => Some(Packed::Bf16(Bf16Weights::new(cfg, layout, params, false))),
            WeightDtype::Int8 => Some(Packed::Int8(Int8Weights::new(cfg, layout, params))),
        };
        Ok(())
    }

    /// Attention's products in bf16 when the encoder's matmuls are
    /// (int8 engines keep them f32, as their exactness tests expect).
    pub(crate) fn attention_products(&self) -> crate::kernels::AttentionProducts {
        match self.dtype() {
            WeightDtype::Bf16 => crate::kernels::AttentionProducts::Bf16,
            WeightDtype::F32 | WeightDtype::Int8 => crate::kernels::AttentionProducts::F32,
        }
    }

    /// The format the encoder's matmuls run in.
    pub fn dtype(&self) -> WeightDtype {
        match self.packed {
            None | Some(Packed::F32(_)) => WeightDtype::F32,
            Some(Packed::Bf16(_)) => WeightDtype::Bf16,
            Some(Packed::Int8(_)) => WeightDtype::Int8,
        }
    }

    /// Layer `l`'s matmul `m` in the reduced format, when one is on.
    fn packed(&self, l: usize, m: EncoderMatmul) -> Option<&dyn PackedLinear> {
        match &self.packed {
            None => None,
            Some(Packed::F32(w)) => Some(w.get(l, m)),
            Some(Packed::Bf16(w)) => Some(w.get(l, m)),
            Some(Packed::Int8(w)) => Some(w.get(l, m)),
        }
    }

    /// Training in bf16: packs the encoder weights for forward and backward
    /// when they are not packed (after every optimizer step, [`Self::drop_packed`]).
    pub(crate) fn pack_bf16_for_training(&mut self) {
        if self.packed.is_some() {
            return;
        }
        let w = match self.bf16_spare.take() {
            Some(mut w) => {
                w.repack(&self.config, &self.layout, &self.params);
                w
            }
            None => Bf16Weights::new(&self.config, &self.layout, &self.params, true),
        };
        self.packed = Some(Packed::Bf16(w));
    }

    /// Drops the packed copy (f32 from now on, or an inference copy that
    /// training must not use).
    pub(crate) fn drop_packed(&mut self) {
        self.packed = None;
        self.bf16_spare = None;
    }

    /// The weights changed (an optimizer step): a bf16 training copy is
    /// packed again at the next forward, into the same buffers.
    pub(crate) fn weights_changed(&mut self) {
        match self.packed.take() {
            Some(Packed::Bf16(w)) => self.bf16_spare = Some(w),
            _ => self.bf16_spare = None,
        }
    }

    /// The packed encoder weights, when bf16 is on.
    pub(crate) fn bf16_weights(&self) -> Option<&Bf16Weights> {
        match &self.packed {
            Some(Packed::Bf16(w)) => Some(w),
            _ => None,
        }
    }

    /// An error unless the checkpoint has `head`.
    pub fn require(&self, head: HeadKind) -> Result<()> {
        let has = match head {
            HeadKind::Pooler => self.heads.pooler,
            HeadKind::MaskedLm => self.heads.mlm,
            HeadKind::NextSentence => self.heads.nsp,
            HeadKind::Classifier => self.heads.classifier,
            HeadKind::TokenClassifier => self.heads.token_classifier,
            HeadKind::QuestionAnswering => self.heads.qa,
            HeadKind::MultipleChoice => self.heads.multiple_choice,
        };
        if has {
            Ok(())
        } else {
            let arch = self
                .architecture
                .map(|a| a.hf_name().to_string())
                .unwrap_or_else(|| "unknown architecture".into());
            Err(Error::InvalidInput(format!(
                "this checkpoint ({arch}) has no {}",
                head.describe()
            )))
        }
    }

    /// The view of parameter `name`.
    pub fn param(&self, name: &str) -> &[f32] {
        self.layout.view(&self.params, name)
    }

    pub(crate) fn gelu(&self) -> Gelu {
        match self.config.activation() {
            Activation::GeluErf => Gelu::Erf,
            Activation::GeluTanh => Gelu::Tanh,
        }
    }

    pub(crate) fn eps(&self) -> f32 {
        self.config.layer_norm_eps as f32
    }

    /// HF `BertPooler`: `tanh(W·h[b,0] + b)` for each sequence → `[B,C]`.
    pub fn pooled(&self, acts: &BertActivations) -> Result<Vec<f32>> {
        self.require(HeadKind::Pooler)?;
        let c = self.config.hidden_size;
        let rows = acts.cls_rows();
        Ok(Pooler::forward(&self.layout, &self.params, acts.hidden(), &rows, c).pooled)
    }

    /// HF `BertOnlyMLMHead` on the rows `rows` (indices into the N = B·T
    /// positions of the last forward) → logits `[M,V]`.
    pub fn mlm_logits(&self, acts: &BertActivations, rows: &[usize]) -> Result<Vec<f32>> {
        self.require(HeadKind::MaskedLm)?;
        let (c, v, n) = (
            self.config.hidden_size,
            self.config.vocab_size,
            acts.b * acts.t,
        );
        let h = acts.hidden();
        let mut x = Vec::with_capacity(rows.len() * c);
        for &r in rows {
            if r >= n {
                return Err(Error::InvalidInput(format!(
                    "row {r} is outside the batch of {n} positions"
                )));
            }
            let Some(r) = acts.row(r / acts.t, r % acts.t) else {
                return Err(Error::InvalidInput(format!(
                    "position {r} is padding, which an unpadded forward does not compute"
                )));
            };
            x.extend_from_slice(&h[r * c..(r + 1) * c]);
        }
        let (_, logits) =
            MlmHead::forward(&self.layout, &self.params, self.gelu(), self.eps(), x, c, v);
        Ok(logits)
    }

    /// HF `BertOnlyNSPHead` on the pooled output `[B,C]` → `[B,2]`
    /// (index 0 = "B follows A").
    pub fn nsp_logits(&self, pooled: &[f32]) -> Result<Vec<f32>> {
        self.require(HeadKind::NextSentence)?;
        let c = self.config.hidden_size;
        Ok(linear_head(
            &self.layout,
            &self.params,
            "cls.seq_relationship",
            pooled,
            c,
            2,
        ))
    }

    /// `BertForSequenceClassification`'s classifier on the pooled output
    /// `[B,C]` → `[B,L]`.
    pub fn classifier_logits(&self, pooled: &[f32]) -> Result<Vec<f32>> {
        self.require(HeadKind::Classifier)?;
        let (c, l) = (self.config.hidden_size, self.config.num_labels());
        Ok(linear_head(
            &self.layout,
            &self.params,
            "classifier",
            pooled,
            c,
            l,
        ))
    }

    /// `BertForMultipleChoice`'s classifier on the pooled output of each
    /// choice `[B·K,C]` → one score per choice `[B·K]` (read as `[B,K]`).
    pub fn choice_logits(&self, pooled: &[f32]) -> Result<Vec<f32>> {
        self.require(HeadKind::MultipleChoice)?;
        let c = self.config.hidden_size;
        Ok(linear_head(
            &self.layout,
            &self.params,
            "classifier",
            pooled,
            c,
            1,
        ))
    }

    /// `BertForTokenClassification`'s classifier on every row of the last
    /// forward → `[B,T,L]`, or `[R,L]` for the R real tokens after
    /// [`Self::forward_unpadded`] packed them (as [`BertActivations::hidden`];
    /// [`BertActivations::row`] maps positions to rows either way).
    pub fn token_logits(&self, acts: &BertActivations) -> Result<Vec<f32>> {
        self.require(HeadKind::TokenClassifier)?;
        let (c, l) = (self.config.hidden_size, self.config.num_labels());
        Ok(linear_head(
            &self.layout,
            &self.params,
            "classifier",
            acts.hidden(),
            c,
            l,
        ))
    }

    /// `BertForQuestionAnswering`'s `qa_outputs` on every row → (start
    /// `[B,T]`, end `[B,T]`), or `[R]` each for the R real tokens after
    /// [`Self::forward_unpadded`] packed them (as [`Self::token_logits`]).
    pub fn qa_logits(&self, acts: &BertActivations) -> Result<(Vec<f32>, Vec<f32>)> {
        self.require(HeadKind::QuestionAnswering)?;
        Ok(qa_forward(
            &self.layout,
            &self.params,
            acts.hidden(),
            self.config.hidden_size,
        ))
    }
}

/// A padded batch of token ids `[B,T]` (right padding).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BertBatch {
    pub b: usize,
    pub t: usize,
    pub input_ids: Vec<u32>,
    pub token_type_ids: Vec<u32>,
    /// 1 = real token, 0 = padding.
    pub attention_mask: Vec<u8>,
    /// `0..T` in every row (HF's absolute position ids).
    pub position_ids: Vec<u32>,
}

impl BertBatch {
    /// A batch from `[B,T]` arrays.
    pub fn new(
        b: usize,
        t: usize,
        input_ids: Vec<u32>,
        token_type_ids: Vec<u32>,
        attention_mask: Vec<u8>,
    ) -> Result<BertBatch> {
        let n = b * t;
        if input_ids.len() != n || token_type_ids.len() != n || attention_mask.len() != n {
            return Err(Error::InvalidInput(format!(
                "batch arrays must have B·T = {n} entries (got ids {}, types {}, mask {})",
                input_ids.len(),
                token_type_ids.len(),
                attention_mask.len()
            )));
        }
        let position_ids = (0..b).flat_map(|_| 0..t as u32).collect();
        Ok(BertBatch {
            b,
            t,
            input_ids,
            token_type_ids,
            attention_mask,
            position_ids,
        })
    }

    /// Pads encodings of mixed lengths to the longest with `pad_id`
    /// (attention mask 0, token type 0).
    pub fn from_encodings(encs: &[&Encoding], pad_id: u32) -> Result<BertBatch> {
        let b = encs.len();
        let t = encs.iter().map(|e| e.len()).max().unwrap_or(0);
        let mut ids = Vec::with_capacity(b * t);
        let mut types = Vec::with_capacity(b * t);
        let mut mask = Vec::with_capacity(b * t);
        for e in encs {
            let k = e.len();
            ids.extend_from_slice(&e.ids);
            ids.extend(std::iter::repeat_n(pad_id, t - k));
            if e.type_ids.len() == k {
                types.extend_from_slice(&e.type_ids);
            } else {
                types.extend(std::iter::repeat_n(0, k));
            }
            types.extend(std::iter::repeat_n(0, t - k));
            if e.attention_mask.len() == k {
                mask.extend_from_slice(&e.attention_mask);
            } else {
                mask.extend(std::iter::repeat_n(1, k));
            }
            mask.extend(std::iter::repeat_n(0, t - k));
        }
        BertBatch::new(b, t, ids, types, mask)
    }
}
