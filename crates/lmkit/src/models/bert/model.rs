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

use std::path::Path;

use lmkit_tokenizers::Encoding;

use crate::checkpoint::{load_params, open_model_dir_for, LoadOptions, SafeTensors};
use crate::error::{Error, Result};
use crate::kernels::{self, AttentionShape, Gelu, WeightLayout};
use crate::spec::config::{Activation, AnyConfig, BertConfig};
use crate::spec::layout::ParamLayout;
use crate::spec::layout::{
    bert_layer_prefix, bert_layout, bert_qkv_bias_range, bert_qkv_weight_range,
};
use crate::spec::names::{canonical_name, Architecture, BertHeads, Family};
use crate::util::alloc::resize_scratch;
use crate::util::parallel::on_pool;

use super::heads::{linear_head, qa_forward, MlmHead, Pooler};
use super::weights::{Bf16Weights, EncoderMatmul, F32Weights, Int8Weights, PackedLinear};
use crate::models::gpt2::WeightDtype;
use crate::models::packed::PackedSeqs;

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
        if self.packed.is_none() {
            self.packed = Some(Packed::Bf16(Bf16Weights::new(
                &self.config,
                &self.layout,
                &self.params,
                true,
            )));
        }
    }

    /// Drops the packed copy (the weights changed, or f32 from now on).
    pub(crate) fn drop_packed(&mut self) {
        self.packed = None;
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

    /// `out[N,OC] = inp[N,C]·Wᵀ + b` for the `nn.Linear` parameter `name`
    /// (`name.weight` `[OC,C]`, `name.bias` `[OC]`).
    fn linear(&self, out: &mut [f32], inp: &[f32], name: &str, n: usize, c: usize, oc: usize) {
        let w = self.param(&format!("{name}.weight"));
        let b = self.param(&format!("{name}.bias"));
        kernels::matmul_forward(out, inp, w, Some(b), n, c, oc, WeightLayout::OutIn);
    }

    /// Runs the encoder on `batch`; the last hidden state ends up in
    /// `acts.hidden()` `[B,T,C]`. `acts` is resized as needed.
    pub fn forward(&self, batch: &BertBatch, acts: &mut BertActivations) -> Result<()> {
        self.check_batch(batch)?;
        on_pool(|| self.encode(batch, acts, false));
        Ok(())
    }

    /// [`Self::forward`] without the padding: when every row of `batch` is
    /// right-padded (mask `1…1 0…0`, at least one real token) and some row
    /// is padded, only the real tokens run through the encoder, each
    /// sequence attending to its own tokens (the same arithmetic for them
    /// as the padded forward, minus the masked keys' zero terms). `acts`'
    /// rows are then those tokens, packed ([`BertActivations::row`] maps
    /// positions to rows); the padding's own outputs, which HF computes and
    /// no loss or pooling of real tokens reads, are not computed.
    pub fn forward_unpadded(&self, batch: &BertBatch, acts: &mut BertActivations) -> Result<()> {
        self.check_batch(batch)?;
        on_pool(|| self.encode(batch, acts, true));
        Ok(())
    }

    /// [`Self::forward`] on a checked batch; `unpad`: see
    /// [`Self::forward_unpadded`].
    fn encode(&self, batch: &BertBatch, acts: &mut BertActivations, unpad: bool) {
        let cfg = &self.config;
        let (c, nh) = (cfg.hidden_size, cfg.num_attention_heads);
        // The rows the encoder runs on: the batch, or its real tokens.
        let mut packed = std::mem::take(&mut acts.packed);
        packed.clear();
        if let Some(lens) = unpad.then(|| right_padded_lens(batch)).flatten() {
            packed.gather(batch, &lens);
        }
        let (input, att_len) = match packed.lens() {
            Some(lens) => (&packed.batch, lens.iter().map(|&l| nh * l * l).sum()),
            None => (batch, batch.b * nh * batch.t * batch.t),
        };
        let n = input.b * input.t;
        let (i_sz, nl) = (cfg.intermediate_size, cfg.num_hidden_layers);
        acts.prepare(cfg, batch.b, batch.t, n, att_len);
        let eps = self.eps();
        let batch = input;
        // Embeddings: word + position + token type, then LayerNorm into slot 0.
        kernels::embeddings_forward(
            &mut acts.emb,
            &[
                (
                    &batch.input_ids,
                    self.param("embeddings.word_embeddings.weight"),
                ),
                (
                    &batch.position_ids,
                    self.param("embeddings.position_embeddings.weight"),
                ),
                (
                    &batch.token_type_ids,
                    self.param("embeddings.token_type_embeddings.weight"),
                ),
            ],
            c,
        );
        kernels::layernorm_forward(
            &mut acts.hs[..n * c],
            &mut acts.emb_mean,
            &mut acts.emb_rstd,
            &acts.emb,
            self.param("embeddings.LayerNorm.weight"),
            self.param("embeddings.LayerNorm.bias"),
            n,
            c,
            eps,
        );
        let slots = acts.slots;
        let shape = AttentionShape {
            b: batch.b,
            t: batch.t,
            c,
            nh,
        };
        for l in 0..nl {
            let (src, dst) = (l % slots, (l + 1) % slots);
            // Split the slot buffer into the layer's input and output.
            let (x, y) = if src < dst {
                let (lo, hi) = acts.hs.split_at_mut(dst * n * c);
                (&lo[src * n * c..(src + 1) * n * c], &mut hi[..n * c])
            } else {
                let (lo, hi) = acts.hs.split_at_mut(src * n * c);
                (&hi[..n * c], &mut lo[dst * n * c..(dst + 1) * n * c])
            };
            let li = l.min(acts.layers.len() - 1);
            let la = &mut acts.layers[li];
            let p = bert_layer_prefix(l);
            // Attention block.
            match self.packed(l, EncoderMatmul::Qkv) {
                Some(w) => w.forward(&mut la.qkv, x, n),
                None => {
                    // Ranges checked in from_parts.
                    let wr = bert_qkv_weight_range(&self.layout, l).unwrap_or_default();
                    let br = bert_qkv_bias_range(&self.layout, l).unwrap_or_default();
                    kernels::matmul_forward(
                        &mut la.qkv,
                        x,
                        &self.params[wr],
                        Some(&self.params[br]),
                        n,
                        c,
                        3 * c,
                        WeightLayout::OutIn,
                    );
                }
            }
            match packed.lens() {
                Some(lens) => kernels::attention_forward_varlen(
                    &mut la.atty,
                    &mut la.att,
                    &la.qkv,
                    lens,
                    c,
                    nh,
                    false,
                ),
                None => kernels::attention_forward(
                    &mut la.atty,
                    &mut la.att,
                    &la.qkv,
                    shape,
                    false,
                    Some(&batch.attention_mask),
                ),
            }
            match self.packed(l, EncoderMatmul::AttnOut) {
                Some(w) => w.forward(&mut la.res1, &la.atty, n),
                None => self.linear(
                    &mut la.res1,
                    &la.atty,
                    &format!("{p}attention.output.dense"),
                    n,
                    c,
                    c,
                ),
            }
            kernels::add_inplace(&mut la.res1, x);
            kernels::layernorm_forward(
                &mut la.ln1,
                &mut la.ln1_mean,
                &mut la.ln1_rstd,
                &la.res1,
                self.param(&format!("{p}attention.output.LayerNorm.weight")),
                self.param(&format!("{p}attention.output.LayerNorm.bias")),
                n,
                c,
                eps,
            );
            // Feed-forward block.
            match self.packed(l, EncoderMatmul::Inter) {
                Some(w) => w.forward(&mut la.fch, &la.ln1, n),
                None => self.linear(
                    &mut la.fch,
                    &la.ln1,
                    &format!("{p}intermediate.dense"),
                    n,
                    c,
                    i_sz,
                ),
            }
            kernels::gelu_forward(&mut la.fch_gelu, &la.fch, self.gelu());
            match self.packed(l, EncoderMatmul::Out) {
                Some(w) => w.forward(&mut la.res2, &la.fch_gelu, n),
                None => self.linear(
                    &mut la.res2,
                    &la.fch_gelu,
                    &format!("{p}output.dense"),
                    n,
                    i_sz,
                    c,
                ),
            }
            kernels::add_inplace(&mut la.res2, &la.ln1);
            kernels::layernorm_forward(
                y,
                &mut la.ln2_mean,
                &mut la.ln2_rstd,
                &la.res2,
                self.param(&format!("{p}output.LayerNorm.weight")),
                self.param(&format!("{p}output.LayerNorm.bias")),
                n,
                c,
                eps,
            );
        }
        acts.out_slot = nl % slots;
        acts.packed = packed;
    }

    fn check_batch(&self, batch: &BertBatch) -> Result<()> {
        let cfg = &self.config;
        // The fields are public: a hand-built batch may disagree with its shape.
        let n = batch.b.checked_mul(batch.t);
        for (what, len) in [
            ("input ids", batch.input_ids.len()),
            ("token type ids", batch.token_type_ids.len()),
            ("attention mask", batch.attention_mask.len()),
            ("position ids", batch.position_ids.len()),
        ] {
            if n != Some(len) {
                return Err(Error::InvalidInput(format!(
                    "batch of {} x {}: {len} {what}",
                    batch.b, batch.t
                )));
            }
        }
        if let Some(&p) = batch
            .position_ids
            .iter()
            .find(|&&p| p as usize >= cfg.max_position_embeddings)
        {
            return Err(Error::ContextTooLong {
                len: p as usize + 1,
                max: cfg.max_position_embeddings,
            });
        }
        if batch.t > cfg.max_position_embeddings {
            return Err(Error::ContextTooLong {
                len: batch.t,
                max: cfg.max_position_embeddings,
            });
        }
        if let Some(&id) = batch
            .input_ids
            .iter()
            .find(|&&id| id as usize >= cfg.vocab_size)
        {
            return Err(Error::TokenIdOutOfRange {
                id,
                vocab: cfg.vocab_size,
            });
        }
        if let Some(&tt) = batch
            .token_type_ids
            .iter()
            .find(|&&tt| tt as usize >= cfg.type_vocab_size)
        {
            return Err(Error::InvalidInput(format!(
                "token type id {tt} is out of range for type_vocab_size {}",
                cfg.type_vocab_size
            )));
        }
        Ok(())
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

/// One encoder layer's intermediates (see the module docs for the names).
#[derive(Debug, Clone, Default)]
pub struct LayerActs {
    /// `[N,3C]`.
    pub qkv: Vec<f32>,
    /// Attention probabilities `[B,NH,T,T]` (packed: `[NH,Tₛ,Tₛ]` per sequence).
    pub att: Vec<f32>,
    /// Attention output before the projection `[N,C]`.
    pub atty: Vec<f32>,
    /// Projection + residual, input of LN1 `[N,C]`.
    pub res1: Vec<f32>,
    /// `[N,C]`, with LN statistics `[N]`.
    pub ln1: Vec<f32>,
    pub ln1_mean: Vec<f32>,
    pub ln1_rstd: Vec<f32>,
    /// Intermediate pre-activation and GELU output `[N,I]`.
    pub fch: Vec<f32>,
    pub fch_gelu: Vec<f32>,
    /// Output projection + residual, input of LN2 `[N,C]`.
    pub res2: Vec<f32>,
    pub ln2_mean: Vec<f32>,
    pub ln2_rstd: Vec<f32>,
}

impl LayerActs {
    /// For `rows` and `att` attention probabilities (`.0` now, `.1` the
    /// padded batch's: a buffer that grows is given room for those).
    fn resize(&mut self, cfg: &BertConfig, rows: (usize, usize), att: (usize, usize)) {
        let (c, i) = (cfg.hidden_size, cfg.intermediate_size);
        let fit = |v: &mut Vec<f32>, k: usize| resize_scratch(v, rows.0 * k, rows.1 * k);
        fit(&mut self.qkv, 3 * c);
        for v in [
            &mut self.atty,
            &mut self.res1,
            &mut self.ln1,
            &mut self.res2,
        ] {
            fit(v, c);
        }
        for v in [&mut self.fch, &mut self.fch_gelu] {
            fit(v, i);
        }
        for v in [
            &mut self.ln1_mean,
            &mut self.ln1_rstd,
            &mut self.ln2_mean,
            &mut self.ln2_rstd,
        ] {
            fit(v, 1);
        }
        resize_scratch(&mut self.att, att.0, att.1);
    }
}

/// Buffers of one forward pass. With `keep_all`, `hidden_state(l)` is the
/// input of layer `l` (0 = embeddings output) for every `l`, and
/// `layers[l]` holds layer `l`'s intermediates: what a backward needs.
#[derive(Debug, Clone, Default)]
pub struct BertActivations {
    pub b: usize,
    pub t: usize,
    keep_all: bool,
    /// Embedding sum before LayerNorm `[N,C]` and its LN statistics `[N]`.
    pub emb: Vec<f32>,
    pub emb_mean: Vec<f32>,
    pub emb_rstd: Vec<f32>,
    /// Hidden-state slots `[S,N,C]`: S = L+1 with `keep_all`, else 2.
    hs: Vec<f32>,
    slots: usize,
    out_slot: usize,
    /// Per-layer intermediates (L with `keep_all`, else 1 reused).
    pub layers: Vec<LayerActs>,
    /// The real tokens the rows hold after [`Bert::forward_unpadded`].
    packed: PackedRows,
}

/// The real tokens of a right-padded batch, packed (what
/// [`Bert::forward_unpadded`] runs on).
#[derive(Debug, Clone, Default)]
pub(crate) struct PackedRows {
    /// `[1,R]`: the real tokens' ids, token types and positions (mask all 1).
    pub(crate) batch: BertBatch,
    /// Each sequence's length and first row; empty: not packed.
    seqs: PackedSeqs,
}

impl PackedRows {
    fn clear(&mut self) {
        self.seqs.clear();
    }

    /// Packs the first `lens[b]` positions of each row of `batch`.
    fn gather(&mut self, batch: &BertBatch, lens: &[usize]) {
        let r = self.seqs.set(lens);
        let p = &mut self.batch;
        for v in [&mut p.input_ids, &mut p.token_type_ids, &mut p.position_ids] {
            v.clear();
            v.reserve(r);
        }
        for (bi, &len) in lens.iter().enumerate() {
            let span = bi * batch.t..bi * batch.t + len;
            p.input_ids
                .extend_from_slice(&batch.input_ids[span.clone()]);
            p.token_type_ids
                .extend_from_slice(&batch.token_type_ids[span.clone()]);
            p.position_ids.extend_from_slice(&batch.position_ids[span]);
        }
        p.attention_mask.clear();
        p.attention_mask.resize(r, 1);
        (p.b, p.t) = (1, r);
    }

    /// Each sequence's rows, in order.
    pub(crate) fn spans(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        self.seqs.spans()
    }

    /// Each sequence's length when packed.
    pub(crate) fn lens(&self) -> Option<&[usize]> {
        self.seqs.lens()
    }
}

/// Each row's real length when `batch` is right-padded with at least one
/// real token per row and some padding; `None` otherwise (nothing to gain,
/// or a mask that packing would not reproduce).
fn right_padded_lens(batch: &BertBatch) -> Option<Vec<usize>> {
    let (b, t) = (batch.b, batch.t);
    if b == 0 || t == 0 {
        return None;
    }
    let mut lens = Vec::with_capacity(b);
    for row in batch.attention_mask.chunks_exact(t) {
        let len = row.iter().take_while(|&&m| m != 0).count();
        if len == 0 || row[len..].iter().any(|&m| m != 0) {
            return None;
        }
        lens.push(len);
    }
    (lens.iter().sum::<usize>() < b * t).then_some(lens)
}

impl BertActivations {
    /// Empty buffers; `keep_all` keeps every layer's activations.
    pub fn new(keep_all: bool) -> Self {
        BertActivations {
            keep_all,
            ..Default::default()
        }
    }

    /// Sizes the buffers for a `[B,T]` batch run on `n` rows with `att`
    /// attention probabilities per layer.
    /// The unpadded row counts vary from batch to batch: a buffer that
    /// grows gets room for the padded batch, so it grows rarely.
    fn prepare(&mut self, cfg: &BertConfig, b: usize, t: usize, n: usize, att: usize) {
        let (c, nl, nh) = (
            cfg.hidden_size,
            cfg.num_hidden_layers,
            cfg.num_attention_heads,
        );
        self.b = b;
        self.t = t;
        self.slots = if self.keep_all { nl + 1 } else { 2 };
        let rows = (n, (b * t).max(n));
        resize_scratch(&mut self.emb, n * c, rows.1 * c);
        resize_scratch(&mut self.emb_mean, n, rows.1);
        resize_scratch(&mut self.emb_rstd, n, rows.1);
        resize_scratch(&mut self.hs, self.slots * n * c, self.slots * rows.1 * c);
        let nlayers = if self.keep_all { nl } else { 1 };
        self.layers.resize_with(nlayers, LayerActs::default);
        let att = (att, (b * nh * t * t).max(att));
        for la in &mut self.layers {
            la.resize(cfg, rows, att);
        }
    }

    /// The row of position `j` of sequence `bi` (`bi·T + j`, or its packed
    /// row after [`Bert::forward_unpadded`]; `None` for padding not run).
    pub fn row(&self, bi: usize, j: usize) -> Option<usize> {
        if bi >= self.b || j >= self.t {
            return None;
        }
        match self.packed.lens() {
            Some(_) => self.packed.seqs.row(bi, j),
            None => Some(bi * self.t + j),
        }
    }

    /// The rows of positions `0..len` of sequence `bi`, which lie end to
    /// end either way; an error if one of them was not run (padding).
    pub fn span(&self, bi: usize, len: usize) -> Result<std::ops::Range<usize>> {
        let first = match len {
            0 => Some(0),
            _ => self.row(bi, 0).filter(|_| self.row(bi, len - 1).is_some()),
        };
        first.map(|r| r..r + len).ok_or_else(|| {
            Error::InvalidInput(format!(
                "positions 0..{len} of sequence {bi} were not all run (the batch is {}×{}{})",
                self.b,
                self.t,
                if self.packed.lens().is_some() {
                    ", padding skipped"
                } else {
                    ""
                }
            ))
        })
    }

    /// Rows of the hidden state: B·T, or the real tokens when packed.
    pub fn rows(&self) -> usize {
        match self.packed.lens() {
            Some(_) => self.packed.batch.t,
            None => self.b * self.t,
        }
    }

    /// The `[CLS]` (first) row of each sequence `[B]`.
    pub fn cls_rows(&self) -> Vec<usize> {
        match self.packed.lens() {
            Some(_) => self.packed.seqs.offs().to_vec(),
            None => (0..self.b).map(|bi| bi * self.t).collect(),
        }
    }

    /// The packed real tokens, after [`Bert::forward_unpadded`] packed them.
    pub(crate) fn packed(&self) -> Option<&PackedRows> {
        self.packed.lens().map(|_| &self.packed)
    }

    /// The encoder output (HF `last_hidden_state`) `[B,T,C]`, or `[R,C]`
    /// for the R real tokens after [`Bert::forward_unpadded`] packed them.
    pub fn hidden(&self) -> &[f32] {
        self.hidden_state_slot(self.out_slot)
    }

    /// With `keep_all`: HF `hidden_states[l]` (0 = embeddings, L = output;
    /// `[R,C]` when packed, as [`Self::hidden`]).
    pub fn hidden_state(&self, l: usize) -> Option<&[f32]> {
        (self.keep_all && l < self.slots).then(|| self.hidden_state_slot(l))
    }

    fn hidden_state_slot(&self, s: usize) -> &[f32] {
        let nc = self.hs.len().checked_div(self.slots).unwrap_or(0);
        &self.hs[s * nc..(s + 1) * nc]
    }
}
