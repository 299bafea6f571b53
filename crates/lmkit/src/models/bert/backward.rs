//! BERT training: the heads' losses (MLM, NSP, sequence classification,
//! span QA) and the full backward through the heads, the post-LN encoder and
//! the embeddings, on the explicit kernels. Each head's forward and backward
//! is in `heads.rs`, shared with inference; `BertTrainer::run` only picks the
//! heads the targets switch on, computes their losses (`losses`: one
//! `HeadPass` over the hidden state) and chains the backward passes into
//! [`encoder_backward`] (`encoder`).
//!
//! Shape legend: B batch, T sequence (padded), C channels, NH heads,
//! I intermediate size, V vocabulary, L labels, N = B·T rows,
//! M = labelled MLM rows.
//!
//! Losses are HF's: MLM = mean cross-entropy over the labelled positions
//! (label ≠ −100; the head runs only on those M rows, which gives the same
//! loss and gradients as HF's head over all N rows); NSP and classification =
//! mean cross-entropy over the batch; regression (`problem_type`
//! regression, HF's choice for one label) = mean squared error of the
//! classifier's outputs, over all `B·L` of them (with L = 1 HF's
//! `MSELoss(logits.squeeze(), labels.squeeze())`); token classification = mean
//! cross-entropy over the tokens whose label ≠ −100; QA = (CE(start) + CE(end)) / 2 with
//! the softmax over all T positions, positions clamped to [0, T] and T
//! ignored; multiple choice = mean cross-entropy over the E examples of the
//! K scores of their choices (rows `e·K .. e·K + K`). The total is the sum of the active heads' losses (BERT
//! pretraining: MLM + NSP). Training runs with dropout off.
//!
//! Padding: when every head reads real tokens only (pooled heads; MLM and
//! token labels on real tokens) a right-padded batch runs unpadded
//! ([`Bert::forward_unpadded`]): the encoder's N rows are the R real tokens
//! and attention stays inside each sequence. HF computes the padding's rows
//! too, but none of them reaches these losses (their outputs are unread and
//! a masked key's probability is exactly 0), so the gradients are the same.
//! QA keeps the padding: its softmax runs over all T positions.
//!
//! Backward (per layer, reverse of `model::bert`'s forward):
//! ```text
//! dy → LN2ᵀ → dres2 ─┬→ output.denseᵀ → gelu' → intermediate.denseᵀ ─┐
//!                    └───────────────────────────────────────────────┴→ dln1
//! dln1 → LN1ᵀ → dres1 ─┬→ attention.output.denseᵀ → attentionᵀ → qkvᵀ ─┐
//!                      └───────────────────────────────────────────────┴→ dx
//! ```
//! then the embedding LayerNorm and scatter-adds into the three tables.

mod encoder;
mod losses;

use std::ops::Range;

use self::encoder::{encoder_backward, Grads};
use self::losses::{qa_targets, HeadPass};
use super::model::{Bert, BertActivations, BertBatch};
use crate::error::{Error, Result};
use crate::kernels::Gelu;
use crate::models::gpt2::WeightDtype;
use crate::models::{GradPieces, LossParts, Trainable};
use crate::spec::config::{Activation, ProblemType};
use crate::spec::layout::ParamLayout;
use crate::spec::Precision;
use crate::util::rng::Rng;

use crate::spec::IGNORE_INDEX;

/// Targets of one batch: one variant per combination of heads lmkit
/// trains, so that no other combination can be built. Each switches its
/// heads' losses on; `None` trains nothing (a forward only).
#[derive(Debug, Clone, Default, PartialEq)]
pub enum BertTargets {
    #[default]
    None,
    /// BERT pretraining: `mlm` `[B·T]` original ids at masked positions,
    /// −100 elsewhere; `nsp` `[B]` 0 = B follows A, 1 = random.
    Pretraining { mlm: Vec<i32>, nsp: Vec<i32> },
    /// Masked LM alone (`BertForMaskedLM`): `[B·T]`.
    Mlm(Vec<i32>),
    /// Next-sentence prediction alone (`BertForNextSentencePrediction`): `[B]`.
    Nsp(Vec<i32>),
    /// Sequence classification: `[B]` class ids.
    Classify(Vec<i32>),
    /// `[B·L]` real targets of the classifier's outputs (regression; L is
    /// `num_labels`, 1 for STS-B-style scores).
    Regression(Vec<f32>),
    /// Token classification: `[B·T]` tag ids per token, −100 = not scored.
    TokenClassify(Vec<i32>),
    /// Span QA: `[B]` answer start / end token (inclusive); outside [0, T)
    /// = no answer in this window.
    Qa { start: Vec<i32>, end: Vec<i32> },
    /// Multiple choice: `[E]` the right choice of each of E examples; the
    /// batch's B = E·K rows are each example's K choices, in order.
    MultipleChoice(Vec<i32>),
}

impl BertTargets {
    pub fn mlm_labels(&self) -> Option<&Vec<i32>> {
        match self {
            BertTargets::Pretraining { mlm, .. } | BertTargets::Mlm(mlm) => Some(mlm),
            _ => None,
        }
    }
    pub fn nsp_labels(&self) -> Option<&Vec<i32>> {
        match self {
            BertTargets::Pretraining { nsp, .. } | BertTargets::Nsp(nsp) => Some(nsp),
            _ => None,
        }
    }
    pub fn class_labels(&self) -> Option<&Vec<i32>> {
        match self {
            BertTargets::Classify(v) => Some(v),
            _ => None,
        }
    }
    pub fn regression_targets(&self) -> Option<&Vec<f32>> {
        match self {
            BertTargets::Regression(v) => Some(v),
            _ => None,
        }
    }
    pub fn token_labels(&self) -> Option<&Vec<i32>> {
        match self {
            BertTargets::TokenClassify(v) => Some(v),
            _ => None,
        }
    }
    pub fn start_positions(&self) -> Option<&Vec<i32>> {
        match self {
            BertTargets::Qa { start, .. } => Some(start),
            _ => None,
        }
    }
    pub fn end_positions(&self) -> Option<&Vec<i32>> {
        match self {
            BertTargets::Qa { end, .. } => Some(end),
            _ => None,
        }
    }
    pub fn choice_labels(&self) -> Option<&Vec<i32>> {
        match self {
            BertTargets::MultipleChoice(v) => Some(v),
            _ => None,
        }
    }
}

/// A batch with its targets (the [`Trainable::Batch`] of [`BertTrainer`]).
#[derive(Debug, Clone, Default)]
pub struct BertTrainBatch {
    pub batch: BertBatch,
    pub targets: BertTargets,
}

/// Per-head results of one forward (summed over micro-batches by the trainer).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HeadStats {
    /// Sum of the head means (the loss that was differentiated), summed over batches.
    pub loss: f64,
    pub batches: usize,
    pub mlm: LossParts,
    pub nsp: LossParts,
    pub nsp_correct: usize,
    pub classify: LossParts,
    pub classify_correct: usize,
    /// Regression: squared errors over the `B·L` outputs.
    pub regression: LossParts,
    /// Token classification over the scored tokens (label ≠ −100).
    pub token: LossParts,
    pub token_correct: usize,
    /// Start and end cross-entropies together (count = both sides' targets).
    pub qa: LossParts,
    /// Multiple choice, over the examples (not their choices).
    pub choice: LossParts,
    pub choice_correct: usize,
}

impl HeadStats {
    pub fn add(&mut self, o: &HeadStats) {
        self.loss += o.loss;
        self.batches += o.batches;
        self.mlm.add(o.mlm);
        self.nsp.add(o.nsp);
        self.nsp_correct += o.nsp_correct;
        self.classify.add(o.classify);
        self.classify_correct += o.classify_correct;
        self.regression.add(o.regression);
        self.token.add(o.token);
        self.token_correct += o.token_correct;
        self.qa.add(o.qa);
        self.choice.add(o.choice);
        self.choice_correct += o.choice_correct;
    }

    /// Mean of the per-batch total losses.
    pub fn mean_loss(&self) -> f64 {
        if self.batches == 0 {
            0.0
        } else {
            self.loss / self.batches as f64
        }
    }
}

/// Outputs kept from the last forward, for predictions at evaluation.
#[derive(Debug, Clone, Default)]
pub struct HeadOutputs {
    /// `[B,2]` NSP logits.
    pub nsp_logits: Vec<f32>,
    /// `[B,L]` classifier logits (regression: the predictions).
    pub class_logits: Vec<f32>,
    /// `[B,T,L]` token-classifier logits (0 at padding the encoder skipped).
    pub token_logits: Vec<f32>,
    /// `[B,T]` each.
    pub start_logits: Vec<f32>,
    pub end_logits: Vec<f32>,
    /// `[E,K]` one score per choice.
    pub choice_logits: Vec<f32>,
}
/// A trainable BERT: the model, a gradient buffer with its layout, and the
/// activations of the last forward.
pub struct BertTrainer {
    pub model: Bert,
    pub grads: Vec<f32>,
    acts: BertActivations,
    scratch: Grads,
    outputs: HeadOutputs,
    stats: HeadStats,
    last_tokens: usize,
    /// The encoder matmuls' number format ([`Trainable::set_precision`]).
    precision: Precision,
}

/// The loss terms of a BERT batch, each a mean over its own count (HF:
/// CE over labels ≠ −100, MSE over outputs, QA's two sides apart): the
/// order of [`BertTrainer::loss_counts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LossTerm {
    Mlm,
    Nsp,
    Classify,
    Regression,
    Choice,
    Token,
    QaStart,
    QaEnd,
}

impl LossTerm {
    pub const COUNT: usize = 8;
}
impl BertTrainer {
    pub fn new(mut model: Bert) -> Result<BertTrainer> {
        if model.dtype() != WeightDtype::F32 {
            return Err(Error::InvalidInput(format!(
                "training needs the f32 weights: the model runs {} (set its dtype to f32 first)",
                model.dtype()
            )));
        }
        // Training multiplies the parameters themselves (an inference copy
        // would go stale at the first step).
        model.drop_packed();
        let grads = model.layout.zeros();
        Ok(BertTrainer {
            model,
            grads,
            acts: BertActivations::new(true),
            scratch: Grads::default(),
            outputs: HeadOutputs::default(),
            stats: HeadStats::default(),
            last_tokens: 0,
            precision: Precision::F32,
        })
    }

    pub fn num_params(&self) -> usize {
        self.model.params.len()
    }

    /// Head outputs (logits) of the last forward.
    pub fn outputs(&self) -> &HeadOutputs {
        &self.outputs
    }

    /// Per-head statistics accumulated since the last call (then reset).
    pub fn take_stats(&mut self) -> HeadStats {
        std::mem::take(&mut self.stats)
    }

    fn gelu(&self) -> Gelu {
        match self.model.config.activation() {
            Activation::GeluErf => Gelu::Erf,
            Activation::GeluTanh => Gelu::Tanh,
        }
    }

    /// Checks targets against the batch and the model's heads.
    pub fn check(&self, b: &BertTrainBatch) -> Result<()> {
        let (bs, t) = (b.batch.b, b.batch.t);
        let h = &self.model.heads;
        let tg = &b.targets;
        let need = |ok: bool, what: &str| -> Result<()> {
            if ok {
                Ok(())
            } else {
                Err(Error::InvalidInput(format!(
                    "{what} targets given but the model has no such head"
                )))
            }
        };
        let len = |v: Option<&Vec<i32>>, want: usize, what: &str| -> Result<()> {
            match v {
                Some(v) if v.len() != want => Err(Error::InvalidInput(format!(
                    "{what}: {} targets for {want} positions",
                    v.len()
                ))),
                _ => Ok(()),
            }
        };
        if tg.mlm_labels().is_some() {
            need(h.mlm, "masked-LM")?;
        }
        if tg.nsp_labels().is_some() {
            need(h.nsp, "next-sentence")?;
        }
        if tg.class_labels().is_some() {
            need(h.classifier, "classification")?;
        }
        if tg.regression_targets().is_some() {
            need(h.classifier, "regression")?;
        }
        if tg.token_labels().is_some() {
            need(h.token_classifier, "token-classification")?;
        }
        if tg.start_positions().is_some() {
            need(h.qa, "question-answering")?;
        }
        if let Some(c) = tg.choice_labels() {
            need(h.multiple_choice, "multiple-choice")?;
            check_choice_labels(c, bs)?;
        }
        len(tg.mlm_labels(), bs * t, "MLM labels")?;
        len(tg.nsp_labels(), bs, "NSP labels")?;
        len(tg.class_labels(), bs, "class labels")?;
        if let Some(y) = tg.regression_targets() {
            let want = bs * self.model.config.num_labels();
            if y.len() != want {
                return Err(Error::InvalidInput(format!(
                    "regression targets: {} for {want} outputs ({bs} rows × {} labels)",
                    y.len(),
                    self.model.config.num_labels()
                )));
            }
            if let Some(x) = y.iter().find(|x| !x.is_finite()) {
                return Err(Error::InvalidInput(format!(
                    "regression target {x} is not a finite number"
                )));
            }
            match self.model.config.problem_type {
                Some(ProblemType::Regression) => {}
                None if self.model.config.num_labels() == 1 => {}
                p => {
                    return Err(Error::InvalidInput(format!(
                        "regression targets given to a classifier with problem_type {} and {} \
                         labels (regression needs problem_type \"regression\")",
                        p.map_or("unset".into(), |p| format!("\"{p}\"")),
                        self.model.config.num_labels()
                    )))
                }
            }
        }
        len(tg.token_labels(), bs * t, "token labels")?;
        len(tg.start_positions(), bs, "start positions")?;
        len(tg.end_positions(), bs, "end positions")?;
        let v = self.model.config.vocab_size as i32;
        let l = self.model.config.num_labels() as i32;
        let bad = |v: Option<&Vec<i32>>, hi: i32| {
            v.as_ref()
                .and_then(|x| {
                    x.iter()
                        .find(|&&y| y != IGNORE_INDEX && !(0..hi).contains(&y))
                })
                .copied()
        };
        if let Some(x) = bad(tg.mlm_labels(), v) {
            return Err(Error::TokenIdOutOfRange {
                id: x as u32,
                vocab: v as usize,
            });
        }
        if let Some(x) = bad(tg.nsp_labels(), 2) {
            return Err(Error::InvalidInput(format!("NSP label {x} is not 0 or 1")));
        }
        if let Some(x) = bad(tg.class_labels(), l) {
            return Err(Error::InvalidInput(format!(
                "class label {x} is outside the model's {l} labels"
            )));
        }
        if let Some(x) = bad(tg.token_labels(), l) {
            return Err(Error::InvalidInput(format!(
                "token label {x} is outside the model's {l} labels"
            )));
        }
        if self.model.heads.classifier && tg.class_labels().is_some() {
            match self.model.config.problem_type {
                None | Some(ProblemType::SingleLabelClassification) => {}
                Some(p) => {
                    return Err(Error::InvalidInput(format!(
                        "class labels given to a classifier with problem_type \"{p}\" (class \
                         labels train single-label classification; regression takes \
                         regression targets)"
                    )))
                }
            }
            if l < 2 {
                return Err(Error::InvalidInput(
                    "classification needs at least 2 labels (a 1-output classifier is a \
                     regression: give it regression targets)"
                        .into(),
                ));
            }
        }
        Ok(())
    }

    /// Forward (and with `backward`, backward accumulating `grad_scale` ×
    /// d loss / dθ into `grads`, handed to `ready` as it is finished (see
    /// [`GradPieces`]), and the statistics added to [`Self::take_stats`]'s).
    /// Returns this batch's head statistics. `denoms`: what each loss term
    /// is a mean over ([`LossTerm`] order) when not this batch's own counts
    /// (a data-parallel step's global counts).
    fn run<'g>(
        &'g mut self,
        tb: &BertTrainBatch,
        grad_scale: f32,
        backward: bool,
        denoms: Option<[f64; LossTerm::COUNT]>,
        ready: &mut dyn FnMut(&'g mut [f32]),
    ) -> Result<HeadStats> {
        self.check(tb)?;
        if self.precision == Precision::Bf16 {
            self.model.pack_bf16_for_training();
        }
        let batch = &tb.batch;
        let tg = &tb.targets;
        // Heads that read only real tokens (the pooled [CLS] rows, MLM and
        // token labels on real tokens) let the encoder skip the padding;
        // QA's softmax spans every position, padding included (as HF's).
        let on_real = |labels: Option<&Vec<i32>>| {
            labels.as_ref().is_none_or(|l| {
                l.iter()
                    .zip(&batch.attention_mask)
                    .all(|(&y, &m)| y == IGNORE_INDEX || m != 0)
            })
        };
        let unpad = tg.start_positions().is_none()
            && on_real(tg.mlm_labels())
            && on_real(tg.token_labels());
        if unpad {
            self.model.forward_unpadded(batch, &mut self.acts)?;
        } else {
            self.model.forward(batch, &mut self.acts)?;
        }
        let cfg = self.model.config.clone();
        let (b, t, c) = (batch.b, batch.t, cfg.hidden_size);
        let (n, i_sz) = (b * t, cfg.intermediate_size);
        let gelu = self.gelu();
        let layout = &self.model.layout;
        let params = &self.model.params;
        let grads = &mut self.grads;
        let acts = &self.acts;
        let att_len = acts.layers.first().map_or(0, |la| la.att.len());
        let nh = cfg.num_attention_heads;
        self.scratch.resize(
            (acts.rows(), n.max(acts.rows())),
            c,
            i_sz,
            (att_len, (b * nh * t * t).max(att_len)),
        );
        let s = &mut self.scratch;
        self.last_tokens = n;
        self.outputs = HeadOutputs::default();
        // d loss / d last hidden state.
        s.dy.fill(0.0);
        let mut pass = HeadPass {
            cfg: &cfg,
            layout,
            params,
            grads: &mut *grads,
            acts,
            h: acts.hidden(),
            dy: &mut s.dy,
            outputs: &mut self.outputs,
            st: HeadStats {
                batches: 1,
                ..Default::default()
            },
            gelu,
            b,
            t,
            backward,
            grad_scale,
            denoms,
        };
        pass.run(tg);
        let st = pass.st;

        if !backward {
            return Ok(st);
        }

        encoder_backward(&self.model, acts, s, GradPieces::new(grads, ready), batch)?;
        self.stats.add(&st);
        Ok(st)
    }

    /// Forward + backward; ACCUMULATES `grad_scale` · d(total loss)/dθ into
    /// `grads` and returns the batch's head statistics (also added to the
    /// running [`Self::take_stats`]).
    pub fn forward_backward(
        &mut self,
        batch: &BertTrainBatch,
        grad_scale: f32,
    ) -> Result<HeadStats> {
        self.run(batch, grad_scale, true, None, &mut |_| {})
    }

    /// What each loss term of `tb` is a mean over, in `LossTerm` order
    /// (0 for a term the batch does not train).
    pub fn loss_counts(&self, tb: &BertTrainBatch) -> [f64; LossTerm::COUNT] {
        let tg = &tb.targets;
        let labelled = |v: Option<&Vec<i32>>, ignore: i32| {
            v.as_ref()
                .map_or(0, |x| x.iter().filter(|&&y| y != ignore).count()) as f64
        };
        let t = tb.batch.t;
        let qa = |v: Option<&Vec<i32>>| {
            v.as_ref().map_or(0, |x| {
                qa_targets(x, t).iter().filter(|&&y| y != t as i32).count()
            }) as f64
        };
        let mut c = [0.0; LossTerm::COUNT];
        c[LossTerm::Mlm as usize] = labelled(tg.mlm_labels(), IGNORE_INDEX);
        c[LossTerm::Nsp as usize] = labelled(tg.nsp_labels(), IGNORE_INDEX);
        c[LossTerm::Classify as usize] = labelled(tg.class_labels(), IGNORE_INDEX);
        c[LossTerm::Regression as usize] = tg.regression_targets().map_or(0, Vec::len) as f64;
        c[LossTerm::Choice as usize] = labelled(tg.choice_labels(), IGNORE_INDEX);
        c[LossTerm::Token as usize] = labelled(tg.token_labels(), IGNORE_INDEX);
        c[LossTerm::QaStart as usize] = qa(tg.start_positions());
        c[LossTerm::QaEnd as usize] = qa(tg.end_positions());
        c
    }

    /// [`Self::forward_backward`] with each loss term a mean over
    /// `counts` ([`Self::loss_counts`] summed over a global batch) instead
    /// of this batch's own counts: its `loss` is this batch's share of the
    /// global loss, and the gradients summed over the batches of the global
    /// batch are those of the global loss.
    pub fn forward_backward_over(
        &mut self,
        batch: &BertTrainBatch,
        grad_scale: f32,
        counts: &[f64; LossTerm::COUNT],
    ) -> Result<HeadStats> {
        self.run(batch, grad_scale, true, Some(*counts), &mut |_| {})
    }

    /// Forward only: losses and [`Self::outputs`].
    pub fn evaluate_batch(&mut self, batch: &BertTrainBatch) -> Result<HeadStats> {
        self.run(batch, 0.0, false, None, &mut |_| {})
    }
}

/// Multiple-choice labels of a batch of `bs` rows: the rows split evenly
/// into one example per label, each label one of its example's choices.
fn check_choice_labels(c: &[i32], bs: usize) -> Result<()> {
    if c.is_empty() || !bs.is_multiple_of(c.len()) {
        return Err(Error::InvalidInput(format!(
            "multiple choice: {} labels for {bs} rows (each example's choices in order)",
            c.len()
        )));
    }
    let k = bs / c.len();
    if let Some(&x) = c
        .iter()
        .find(|&&y| y != IGNORE_INDEX && !(0..k as i32).contains(&y))
    {
        return Err(Error::InvalidInput(format!(
            "choice label {x} is not one of the {k} choices"
        )));
    }
    Ok(())
}

impl Trainable for BertTrainer {
    type Batch = BertTrainBatch;

    fn params(&self) -> &[f32] {
        &self.model.params
    }

    fn layout(&self) -> &ParamLayout {
        &self.model.layout
    }

    /// The caller may change the weights: the bf16 copy is packed again
    /// at the next forward.
    fn params_and_grads(&mut self) -> (&mut [f32], &mut [f32]) {
        self.model.weights_changed();
        (&mut self.model.params, &mut self.grads)
    }

    fn grads(&self) -> &[f32] {
        &self.grads
    }

    fn zero_grad(&mut self) {
        crate::kernels::zero_fill(&mut self.grads);
    }

    /// The total loss (sum of head means) as `LossParts { sum, count: 1 }`.
    fn forward_backward(&mut self, batch: &BertTrainBatch, grad_scale: f32) -> Result<LossParts> {
        let st = BertTrainer::forward_backward(self, batch, grad_scale)?;
        Ok(LossParts {
            sum: st.loss,
            count: 1,
        })
    }

    fn loss_counts(&self, batch: &BertTrainBatch) -> Vec<f64> {
        BertTrainer::loss_counts(self, batch).to_vec()
    }

    fn forward_backward_over(
        &mut self,
        batch: &BertTrainBatch,
        grad_scale: f32,
        counts: &[f64],
    ) -> Result<LossParts> {
        let counts: &[f64; LossTerm::COUNT] = counts.try_into().map_err(|_| {
            Error::InvalidInput(format!(
                "{} loss counts for BERT's {} terms",
                counts.len(),
                LossTerm::COUNT
            ))
        })?;
        let st = BertTrainer::forward_backward_over(self, batch, grad_scale, counts)?;
        Ok(LossParts {
            sum: st.loss,
            count: 1,
        })
    }

    fn forward_backward_streamed<'g>(
        &'g mut self,
        batch: &BertTrainBatch,
        grad_scale: f32,
        counts: Option<&[f64]>,
        ready: &mut dyn FnMut(&'g mut [f32]),
    ) -> Result<LossParts> {
        let denoms = counts
            .map(|c| {
                <[f64; LossTerm::COUNT]>::try_from(c).map_err(|_| {
                    Error::InvalidInput(format!(
                        "{} loss counts for BERT's {} terms",
                        c.len(),
                        LossTerm::COUNT
                    ))
                })
            })
            .transpose()?;
        let st = self.run(batch, grad_scale, true, denoms, ready)?;
        Ok(LossParts {
            sum: st.loss,
            count: 1,
        })
    }

    /// bf16: the four matmuls of every encoder layer, forward and
    /// backward, on bf16 operands with f32 sums; embeddings, LayerNorm,
    /// attention, the heads and the loss stay f32.
    fn set_precision(&mut self, precision: Precision) -> Result<()> {
        self.precision = precision;
        self.model.drop_packed();
        Ok(())
    }

    fn evaluate(&mut self, batch: &BertTrainBatch) -> Result<LossParts> {
        let st = self.evaluate_batch(batch)?;
        Ok(LossParts {
            sum: st.loss,
            count: 1,
        })
    }

    fn decay_spans(&self) -> Vec<(Range<usize>, bool)> {
        self.model.layout.decay_spans()
    }

    fn tokens_per_batch(&self) -> usize {
        self.last_tokens
    }
}
/// HF's `BertPreTrainedModel._init_weights` for the parameters `names`
/// selects: Linear weights and embeddings N(0, `std`), biases 0, LayerNorm
/// weight 1 / bias 0, the `[PAD]` row of the word embeddings 0.
pub fn hf_init(
    layout: &ParamLayout,
    params: &mut [f32],
    std: f64,
    pad_id: Option<u32>,
    rng: &mut Rng,
    names: &dyn Fn(&str) -> bool,
) {
    for spec in layout.specs() {
        let name = spec.name.as_str();
        if !names(name) {
            continue;
        }
        let buf = &mut params[spec.range()];
        if name.contains("LayerNorm.weight") {
            buf.fill(1.0);
        } else if spec.shape.len() == 2 {
            for x in buf.iter_mut() {
                *x = (rng.normal() * std) as f32;
            }
            if name == "embeddings.word_embeddings.weight" {
                if let Some(p) = pad_id {
                    let c = spec.shape[1];
                    let p = p as usize;
                    if p < spec.shape[0] {
                        buf[p * c..(p + 1) * c].fill(0.0);
                    }
                }
            }
        } else {
            buf.fill(0.0);
        }
    }
}
