//! The contiguous parameter layout: every parameter of a model is a named
//! view (offset + shape) into ONE flat `f32` buffer; gradients and AdamW
//! moments are buffers of the same length with the same views.
//!
//! Shape legend: V vocabulary, P positions, C channels (d_model), I MLP
//! width (GPT-2 `n_inner`, default 4C; BERT `intermediate_size`), TV token
//! types, L number of labels.
//!
//! Shapes are exactly the shapes HF stores, so loading is a copy:
//! - GPT-2 uses `Conv1D`: matmul weights are `[in, out]` (`c_attn` `[C, 3C]`),
//!   i.e. `y = x · W + b` with `W` row-major `[in, out]`.
//! - BERT uses `nn.Linear`: weights are `[out, in]`, i.e. `y = x · Wᵀ + b`.
//!
//! Order: HF's parameter order, except that within each BERT layer the
//! query, key and value weights are adjacent (then the three biases), so
//! they form one `[3C, C]` (out, in) matrix and one `[3C]` bias, the packed
//! q|k|v the attention kernel takes ([`bert_qkv_weight_range`]).
//!
//! Weight decay (`ParamSpec::decay`): true for 2-D matmul weights only;
//! biases, LayerNorm parameters and embeddings (`wte`, `wpe`,
//! `*_embeddings`) get none. Override with [`ParamLayout::set_decay`].

use std::collections::HashMap;
use std::ops::Range;

use crate::error::{Error, Result};
use crate::spec::config::{limits, AnyConfig, BertConfig, Gpt2Config, ModelConfig};
use crate::spec::names::{Architecture, BertHeads, Family};
use serde_json::Value;

/// One parameter: a named view into the flat buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParamSpec {
    /// Canonical HF name without the `transformer.`/`bert.` prefix.
    pub name: String,
    /// Shape as HF stores it (see the module docs for GPT-2 vs BERT).
    pub shape: Vec<usize>,
    /// Start in the flat buffer (elements, not bytes).
    pub offset: usize,
    /// Whether AdamW weight decay applies.
    pub decay: bool,
}

impl ParamSpec {
    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// `offset .. offset + numel` in the flat buffer.
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.numel()
    }
}

/// An ordered list of [`ParamSpec`]s tiling `0..total_len()` without gaps.
#[derive(Debug, Clone, Default)]
pub struct ParamLayout {
    specs: Vec<ParamSpec>,
    index: HashMap<String, usize>,
    total: usize,
}

impl PartialEq for ParamLayout {
    fn eq(&self, other: &Self) -> bool {
        self.specs == other.specs
    }
}

impl ParamLayout {
    pub fn new() -> Self {
        Self::default()
    }

    /// Appends a parameter at the current end of the buffer.
    pub fn push(&mut self, name: impl Into<String>, shape: &[usize], decay: bool) -> Result<()> {
        let name = name.into();
        if self.index.contains_key(&name) {
            return Err(Error::InvalidInput(format!(
                "parameter `{name}` declared twice"
            )));
        }
        // Checked: shapes come from config files.
        let numel = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .and_then(|n| n.checked_add(self.total).map(|end| (n, end)))
            .filter(|&(_, end)| end <= limits::PARAMS);
        let Some((_, end)) = numel else {
            return Err(Error::InvalidInput(format!(
                "parameter `{name}` of shape {shape:?} takes the model past {} scalar parameters",
                limits::PARAMS
            )));
        };
        let spec = ParamSpec {
            name: name.clone(),
            shape: shape.to_vec(),
            offset: self.total,
            decay,
        };
        self.total = end;
        self.index.insert(name, self.specs.len());
        self.specs.push(spec);
        Ok(())
    }

    /// All parameters, in buffer order.
    pub fn specs(&self) -> &[ParamSpec] {
        &self.specs
    }

    /// Number of `f32`s in the flat buffer (= number of scalar parameters).
    pub fn total_len(&self) -> usize {
        self.total
    }

    /// A zeroed buffer of `total_len()` (parameters, gradients or moments).
    pub fn zeros(&self) -> Vec<f32> {
        vec![0.0; self.total]
    }

    /// [`ParamLayout::zeros`] that reports a failed allocation as an error
    /// (sizes come from config files) instead of aborting.
    pub fn try_zeros(&self) -> Result<Vec<f32>> {
        let mut buf = Vec::new();
        buf.try_reserve_exact(self.total).map_err(|_| {
            Error::InvalidInput(format!(
                "cannot allocate {:.1} GiB for {} parameters",
                self.total as f64 * 4.0 / (1u64 << 30) as f64,
                self.total
            ))
        })?;
        buf.resize(self.total, 0.0);
        Ok(buf)
    }

    pub fn get(&self, name: &str) -> Option<&ParamSpec> {
        self.index.get(name).map(|&i| &self.specs[i])
    }

    pub fn contains(&self, name: &str) -> bool {
        self.index.contains_key(name)
    }

    pub fn range(&self, name: &str) -> Option<Range<usize>> {
        self.get(name).map(ParamSpec::range)
    }

    fn expect_range(&self, buf_len: usize, name: &str) -> Range<usize> {
        assert_eq!(
            buf_len, self.total,
            "buffer of {buf_len} f32s used with a layout of {}",
            self.total
        );
        match self.range(name) {
            Some(r) => r,
            None => panic!("parameter `{name}` is not in this layout"),
        }
    }

    /// The view of parameter `name` in `buf` (parameters, grads or moments).
    ///
    /// # Panics
    /// If `name` is not in the layout or `buf.len() != total_len()`: both are
    /// programming errors (names are constants of the model code), not input.
    pub fn view<'a>(&self, buf: &'a [f32], name: &str) -> &'a [f32] {
        &buf[self.expect_range(buf.len(), name)]
    }

    /// Mutable [`ParamLayout::view`]; same panics.
    pub fn view_mut<'a>(&self, buf: &'a mut [f32], name: &str) -> &'a mut [f32] {
        let r = self.expect_range(buf.len(), name);
        &mut buf[r]
    }

    /// Changes the weight-decay flag of `name`.
    pub fn set_decay(&mut self, name: &str, decay: bool) -> Result<()> {
        let i = *self
            .index
            .get(name)
            .ok_or_else(|| Error::InvalidInput(format!("no parameter `{name}` in the layout")))?;
        self.specs[i].decay = decay;
        Ok(())
    }

    /// Ranges of the buffer with their decay flag, adjacent equal flags
    /// merged, covering `0..total_len()` in order. Feeds
    /// `kernels::adamw_update(.., decay: &[(Range<usize>, bool)])`.
    pub fn decay_spans(&self) -> Vec<(Range<usize>, bool)> {
        let mut spans: Vec<(Range<usize>, bool)> = Vec::new();
        for s in &self.specs {
            let r = s.range();
            if r.is_empty() {
                continue;
            }
            match spans.last_mut() {
                Some((last, d)) if *d == s.decay && last.end == r.start => last.end = r.end,
                _ => spans.push((r, s.decay)),
            }
        }
        spans
    }

    /// The single range covered by `names` if they are adjacent in this
    /// order (e.g. BERT's query, key, value weights), else `None`.
    pub fn contiguous_range(&self, names: &[&str]) -> Option<Range<usize>> {
        let first = self.get(names.first()?)?;
        let mut end = first.offset;
        for n in names {
            let r = self.range(n)?;
            if r.start != end {
                return None;
            }
            end = r.end;
        }
        Some(first.offset..end)
    }
}

/// A config that knows the parameter layout of each of its architectures.
pub trait HasLayout: ModelConfig {
    /// The parameter layout of `arch` for this config.
    fn layout(&self, arch: Architecture) -> Result<ParamLayout>;
}

impl HasLayout for Gpt2Config {
    fn layout(&self, arch: Architecture) -> Result<ParamLayout> {
        if arch.family() != Family::Gpt2 {
            return Err(Error::InvalidInput(format!(
                "{arch} is not a GPT-2 architecture"
            )));
        }
        gpt2_layout_for(self, arch)
    }
}

impl HasLayout for BertConfig {
    fn layout(&self, arch: Architecture) -> Result<ParamLayout> {
        if arch.family() != Family::Bert {
            return Err(Error::InvalidInput(format!(
                "{arch} is not a BERT architecture"
            )));
        }
        bert_layout(self, arch.bert_heads())
    }
}

impl HasLayout for AnyConfig {
    fn layout(&self, arch: Architecture) -> Result<ParamLayout> {
        match self {
            AnyConfig::Gpt2(c) => c.layout(arch),
            AnyConfig::Bert(c) => c.layout(arch),
        }
    }
}

/// `h.{layer}.` — prefix of GPT-2 block parameters.
pub fn gpt2_block_prefix(layer: usize) -> String {
    format!("h.{layer}.")
}

/// `encoder.layer.{layer}.` — prefix of BERT layer parameters.
pub fn bert_layer_prefix(layer: usize) -> String {
    format!("encoder.layer.{layer}.")
}

/// GPT-2: `wte [V,C]`, `wpe [P,C]`, per block `h.{i}.`: `ln_1.{weight,bias} [C]`,
/// `attn.c_attn.weight [C,3C]`, `attn.c_attn.bias [3C]`, `attn.c_proj.weight [C,C]`,
/// `attn.c_proj.bias [C]`, `ln_2.*`, `mlp.c_fc.weight [C,I]`, `mlp.c_fc.bias [I]`,
/// `mlp.c_proj.weight [I,C]`, `mlp.c_proj.bias [C]`; then `ln_f.*`.
/// This is `GPT2LMHeadModel`'s layout: with `tie_word_embeddings` the LM
/// head is `wte`, else `lm_head.weight [V,C]` follows (see [`gpt2_layout_for`]).
pub fn gpt2_layout(cfg: &Gpt2Config) -> Result<ParamLayout> {
    gpt2_layout_for(cfg, Architecture::Gpt2LMHeadModel)
}

/// The layout of GPT-2 class `arch`: [`gpt2_layout`]'s base parameters, then
/// the heads, all `nn.Linear` `[out, in]`: `lm_head.weight [V,C]` (an LM head
/// with `tie_word_embeddings: false`), `score.weight [L,C]` (sequence
/// classification, no bias), `multiple_choice_head.summary.{weight [1,C],
/// bias [1]}` (`GPT2DoubleHeadsModel`; only HF's default summary is supported:
/// `summary_type: cls_index`, projected to one label, no activation).
pub fn gpt2_layout_for(cfg: &Gpt2Config, arch: Architecture) -> Result<ParamLayout> {
    cfg.validate()?;
    if arch.family() != Family::Gpt2 {
        return Err(Error::InvalidInput(format!(
            "{arch} is not a GPT-2 architecture"
        )));
    }
    let heads = arch.gpt2_heads();
    let (v, p, c, i) = (cfg.vocab_size, cfg.n_positions, cfg.n_embd, cfg.inner());
    let mut l = ParamLayout::new();
    l.push("wte.weight", &[v, c], false)?;
    l.push("wpe.weight", &[p, c], false)?;
    for layer in 0..cfg.n_layer {
        let h = gpt2_block_prefix(layer);
        l.push(format!("{h}ln_1.weight"), &[c], false)?;
        l.push(format!("{h}ln_1.bias"), &[c], false)?;
        l.push(format!("{h}attn.c_attn.weight"), &[c, 3 * c], true)?;
        l.push(format!("{h}attn.c_attn.bias"), &[3 * c], false)?;
        l.push(format!("{h}attn.c_proj.weight"), &[c, c], true)?;
        l.push(format!("{h}attn.c_proj.bias"), &[c], false)?;
        l.push(format!("{h}ln_2.weight"), &[c], false)?;
        l.push(format!("{h}ln_2.bias"), &[c], false)?;
        l.push(format!("{h}mlp.c_fc.weight"), &[c, i], true)?;
        l.push(format!("{h}mlp.c_fc.bias"), &[i], false)?;
        l.push(format!("{h}mlp.c_proj.weight"), &[i, c], true)?;
        l.push(format!("{h}mlp.c_proj.bias"), &[c], false)?;
    }
    l.push("ln_f.weight", &[c], false)?;
    l.push("ln_f.bias", &[c], false)?;
    if heads.lm && !cfg.tie_word_embeddings {
        l.push("lm_head.weight", &[v, c], true)?;
    }
    if heads.score {
        if cfg.num_labels() == 0 {
            return Err(Error::config(
                "id2label",
                "a classifier needs at least one label",
            ));
        }
        l.push("score.weight", &[cfg.num_labels(), c], true)?;
    }
    if heads.multiple_choice {
        check_gpt2_summary(cfg)?;
        l.push("multiple_choice_head.summary.weight", &[1, c], true)?;
        l.push("multiple_choice_head.summary.bias", &[1], false)?;
    }
    Ok(l)
}

/// `GPT2DoubleHeadsModel`'s `SequenceSummary` as HF configures it (keys
/// absent = HF's defaults): the hidden state at `mc_token_ids`, a linear
/// projection to one score, no activation. Other settings are rejected.
fn check_gpt2_summary(cfg: &Gpt2Config) -> Result<()> {
    let get = |k: &str| cfg.extra.get(k).filter(|v| !v.is_null());
    if let Some(v) = get("summary_type") {
        if v.as_str() != Some("cls_index") {
            return Err(Error::config(
                "summary_type",
                format!("{v} is not supported (only \"cls_index\")"),
            ));
        }
    }
    for key in ["summary_use_proj", "summary_proj_to_labels"] {
        if let Some(v) = get(key) {
            if v != &Value::Bool(true) {
                return Err(Error::config(
                    key,
                    format!("{v} is not supported (only true)"),
                ));
            }
        }
    }
    if let Some(v) = get("summary_activation") {
        return Err(Error::config(
            "summary_activation",
            format!("{v} is not supported (only null: no activation)"),
        ));
    }
    // HF's GPT2DoubleHeadsModel sets num_labels = 1: one score per choice.
    if cfg.num_labels() != 1 {
        return Err(Error::config(
            "id2label",
            format!(
                "GPT2DoubleHeadsModel scores each choice with one label, not {}",
                cfg.num_labels()
            ),
        ));
    }
    Ok(())
}

/// BERT, shapes `[out, in]`: `embeddings.{word_embeddings [V,C], position_embeddings [P,C],
/// token_type_embeddings [TV,C], LayerNorm [C]}`; per layer `encoder.layer.{i}.`:
/// `attention.self.{query,key,value}.weight [C,C]` (adjacent), then the three
/// biases `[C]` (adjacent), `attention.output.dense [C,C]`, `attention.output.LayerNorm`,
/// `intermediate.dense [I,C]`, `output.dense [C,I]`, `output.LayerNorm`; then the heads.
pub fn bert_layout(cfg: &BertConfig, heads: BertHeads) -> Result<ParamLayout> {
    cfg.validate()?;
    if heads.nsp && !heads.pooler {
        return Err(Error::InvalidInput("the NSP head needs the pooler".into()));
    }
    let (v, c, i) = (cfg.vocab_size, cfg.hidden_size, cfg.intermediate_size);
    let mut l = ParamLayout::new();
    let linear = |l: &mut ParamLayout, name: &str, out: usize, inp: usize| -> Result<()> {
        l.push(format!("{name}.weight"), &[out, inp], true)?;
        l.push(format!("{name}.bias"), &[out], false)
    };
    let layer_norm = |l: &mut ParamLayout, name: &str| -> Result<()> {
        l.push(format!("{name}.weight"), &[c], false)?;
        l.push(format!("{name}.bias"), &[c], false)
    };
    l.push("embeddings.word_embeddings.weight", &[v, c], false)?;
    l.push(
        "embeddings.position_embeddings.weight",
        &[cfg.max_position_embeddings, c],
        false,
    )?;
    l.push(
        "embeddings.token_type_embeddings.weight",
        &[cfg.type_vocab_size, c],
        false,
    )?;
    layer_norm(&mut l, "embeddings.LayerNorm")?;
    for layer in 0..cfg.num_hidden_layers {
        let p = bert_layer_prefix(layer);
        for qkv in ["query", "key", "value"] {
            l.push(format!("{p}attention.self.{qkv}.weight"), &[c, c], true)?;
        }
        for qkv in ["query", "key", "value"] {
            l.push(format!("{p}attention.self.{qkv}.bias"), &[c], false)?;
        }
        linear(&mut l, &format!("{p}attention.output.dense"), c, c)?;
        layer_norm(&mut l, &format!("{p}attention.output.LayerNorm"))?;
        linear(&mut l, &format!("{p}intermediate.dense"), i, c)?;
        linear(&mut l, &format!("{p}output.dense"), c, i)?;
        layer_norm(&mut l, &format!("{p}output.LayerNorm"))?;
    }
    if heads.pooler {
        linear(&mut l, "pooler.dense", c, c)?;
    }
    if heads.mlm {
        linear(&mut l, "cls.predictions.transform.dense", c, c)?;
        layer_norm(&mut l, "cls.predictions.transform.LayerNorm")?;
        l.push("cls.predictions.bias", &[v], false)?;
    }
    if heads.nsp {
        linear(&mut l, "cls.seq_relationship", 2, c)?;
    }
    if heads.multiple_choice && !heads.pooler {
        return Err(Error::InvalidInput(
            "the multiple-choice head needs the pooler".into(),
        ));
    }
    if [
        heads.classifier,
        heads.token_classifier,
        heads.multiple_choice,
    ]
    .iter()
    .filter(|&&h| h)
    .count()
        > 1
    {
        return Err(Error::InvalidInput(
            "sequence, token and multiple-choice classifiers share `classifier`: one at most"
                .into(),
        ));
    }
    if heads.multiple_choice {
        // HF's BertForMultipleChoice: Linear(hidden, 1) whatever num_labels says.
        linear(&mut l, "classifier", 1, c)?;
    }
    if heads.classifier || heads.token_classifier {
        if cfg.num_labels() == 0 {
            return Err(Error::config(
                "id2label",
                "a classifier needs at least one label",
            ));
        }
        linear(&mut l, "classifier", cfg.num_labels(), c)?;
    }
    if heads.qa {
        linear(&mut l, "qa_outputs", 2, c)?;
    }
    Ok(l)
}

/// Range of BERT layer `layer`'s packed `[3C, C]` q|k|v weight (out, in).
pub fn bert_qkv_weight_range(layout: &ParamLayout, layer: usize) -> Option<Range<usize>> {
    let p = bert_layer_prefix(layer);
    let names = ["query", "key", "value"].map(|n| format!("{p}attention.self.{n}.weight"));
    layout.contiguous_range(&names.each_ref().map(String::as_str))
}

/// Range of BERT layer `layer`'s packed `[3C]` q|k|v bias.
pub fn bert_qkv_bias_range(layout: &ParamLayout, layer: usize) -> Option<Range<usize>> {
    let p = bert_layer_prefix(layer);
    let names = ["query", "key", "value"].map(|n| format!("{p}attention.self.{n}.bias"));
    layout.contiguous_range(&names.each_ref().map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_gpt2() -> Gpt2Config {
        Gpt2Config {
            vocab_size: 11,
            n_positions: 7,
            n_embd: 8,
            n_layer: 2,
            n_head: 2,
            ..Default::default()
        }
    }

    #[test]
    fn gpt2_layout_tiles_buffer_and_matches_count() {
        let l = gpt2_layout(&tiny_gpt2()).unwrap();
        let (v, p, c, n) = (11, 7, 8, 2);
        let per_block = 2 * c
            + (c * 3 * c + 3 * c)
            + (c * c + c)
            + 2 * c
            + (c * 4 * c + 4 * c)
            + (4 * c * c + c);
        assert_eq!(l.total_len(), v * c + p * c + n * per_block + 2 * c);
        let mut end = 0;
        for s in l.specs() {
            assert_eq!(s.offset, end);
            end = s.range().end;
        }
        assert_eq!(end, l.total_len());
        assert_eq!(l.get("h.1.attn.c_attn.weight").unwrap().shape, vec![8, 24]);
        // 124M: the real GPT-2 small parameter count.
        assert_eq!(
            gpt2_layout(&Gpt2Config::default()).unwrap().total_len(),
            124_439_808
        );
    }

    #[test]
    fn decay_spans_merge_and_cover() {
        let mut l = gpt2_layout(&tiny_gpt2()).unwrap();
        let spans = l.decay_spans();
        assert_eq!(spans.first().unwrap().0.start, 0);
        assert_eq!(spans.last().unwrap().0.end, l.total_len());
        for w in spans.windows(2) {
            assert_eq!(w[0].0.end, w[1].0.start);
            assert_ne!(w[0].1, w[1].1, "adjacent equal spans must be merged");
        }
        // wte, wpe, ln_1.{w,b} are one no-decay span; c_attn.weight decays.
        assert_eq!(spans[0], (0..11 * 8 + 7 * 8 + 16, false));
        assert_eq!(spans[1], (l.range("h.0.attn.c_attn.weight").unwrap(), true));
        l.set_decay("wte.weight", true).unwrap();
        assert_eq!(l.decay_spans()[0], (0..88, true));
        assert!(l.set_decay("nope", true).is_err());
    }

    #[test]
    fn bert_qkv_packed_and_heads() {
        let cfg = BertConfig {
            vocab_size: 13,
            hidden_size: 8,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            intermediate_size: 16,
            max_position_embeddings: 10,
            ..Default::default()
        };
        let all = BertHeads {
            pooler: true,
            mlm: true,
            nsp: true,
            classifier: true,
            qa: true,
            token_classifier: false,
            multiple_choice: false,
        };
        let l = bert_layout(&cfg, all).unwrap();
        let w = bert_qkv_weight_range(&l, 1).unwrap();
        assert_eq!(w.len(), 3 * 8 * 8);
        assert_eq!(
            w.start,
            l.range("encoder.layer.1.attention.self.query.weight")
                .unwrap()
                .start
        );
        assert_eq!(bert_qkv_bias_range(&l, 0).unwrap().len(), 24);
        assert_eq!(l.get("classifier.weight").unwrap().shape, vec![2, 8]);
        assert_eq!(l.get("cls.predictions.bias").unwrap().shape, vec![13]);
        assert!(bert_layout(
            &cfg,
            BertHeads {
                nsp: true,
                ..Default::default()
            }
        )
        .is_err());
        // bert-base-uncased BertModel (with pooler): 109,482,240 parameters.
        let base = bert_layout(
            &BertConfig::default(),
            BertHeads {
                pooler: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(base.total_len(), 109_482_240);
    }

    #[test]
    fn views() {
        let l = gpt2_layout(&tiny_gpt2()).unwrap();
        let mut buf = l.zeros();
        l.view_mut(&mut buf, "ln_f.bias").fill(1.0);
        assert_eq!(l.view(&buf, "ln_f.bias"), &[1.0; 8]);
        assert_eq!(buf.iter().sum::<f32>(), 8.0);
    }
}
