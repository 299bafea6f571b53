//! Task heads on the GPT-2 trunk: sequence classification (`score`) and
//! multiple choice (`multiple_choice_head.summary`), either with GPT-1's
//! auxiliary LM loss; [`Gpt2TaskTrainer`] trains them.

use super::Gpt2;
use crate::kernels::{self, GradWrite, WeightLayout};
use crate::models::{LossParts, Trainable};
use crate::spec::layout::ParamLayout;
use crate::spec::Precision;
use crate::spec::IGNORE_INDEX;
use crate::util::profile::{timed, Phase};
use crate::util::slice::two_mut;
use std::ops::Range;

/// A batch for a task head: `rows` sequences of `t` tokens, right-padded.
///
/// Sequence classification: one row per example, `labels` `[rows]`.
/// Multiple choice: `choices` consecutive rows per example (each the context,
/// a delimiter and one ending), `labels` [rows / choices] the right choice.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Gpt2TaskBatch {
    /// [rows, t] token ids, each row's padding after its `lens` real tokens.
    pub inputs: Vec<u32>,
    /// `[rows]` real tokens per row (≥ 1).
    pub lens: Vec<usize>,
    pub rows: usize,
    pub t: usize,
    /// Class ids (classification) or right-choice indices (multiple choice).
    pub labels: Vec<u32>,
    /// Choices per example (multiple choice); 1 for classification.
    pub choices: usize,
}

/// Losses and scores of one task batch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TaskOutput {
    /// [examples, L] class logits, or [examples, choices] choice scores.
    pub logits: Vec<f32>,
    /// Summed task cross-entropy over the examples.
    pub task: LossParts,
    /// Summed auxiliary LM loss over the real next tokens (zero count when `lm_coef` is 0).
    pub lm: LossParts,
}

impl TaskOutput {
    /// GPT-1's L3 = L2 + λ·L1 of means: task mean + `lm_coef` · LM mean.
    pub fn loss(&self, lm_coef: f32) -> f64 {
        self.task.mean() + lm_coef as f64 * self.lm.mean()
    }
}

impl Gpt2 {
    /// Where `GPT2ForSequenceClassification` pools each row of `inputs`
    /// [B, T]: HF's `argmax(arange(T) · (ids != pad_token_id))`, the rightmost
    /// token that is not the pad token (0 if every token is); without a pad
    /// token, the last position (HF allows that for one row only).
    pub fn last_non_pad(&self, inputs: &[u32], b: usize, t: usize) -> crate::Result<Vec<usize>> {
        match self.config.pad_token_id {
            Some(pad) => Ok(inputs
                .chunks(t)
                .take(b)
                .map(|row| row.iter().rposition(|&x| x != pad).unwrap_or(0))
                .collect()),
            None if b == 1 => Ok(vec![t - 1]),
            None => Err(crate::Error::InvalidInput(
                "GPT-2 sequence classification of more than one row needs `pad_token_id` \
                 in the config (HF's rule: the last token that is not padding)"
                    .into(),
            )),
        }
    }

    fn check_task_batch(&self, batch: &Gpt2TaskBatch) -> crate::Result<usize> {
        let (rows, t) = (batch.rows, batch.t);
        let k = batch.choices.max(1);
        let bad = |m: String| Err(crate::Error::InvalidInput(m));
        if batch.lens.len() != rows || batch.lens.iter().any(|&l| l == 0 || l > t) {
            return bad(format!(
                "task batch: {} lengths for {rows} rows of {t} tokens (each in 1..={t})",
                batch.lens.len()
            ));
        }
        if !rows.is_multiple_of(k) || batch.labels.len() != rows / k {
            return bad(format!(
                "task batch: {} labels for {rows} rows of {k} choice(s) each",
                batch.labels.len()
            ));
        }
        let classes = match (self.idx.score.is_some(), self.idx.mc_w.is_some()) {
            (true, _) if k == 1 => self.config.num_labels(),
            (_, true) => k,
            _ => {
                return bad(format!(
                    "{} has no head for this task (choices = {k})",
                    self.arch
                ))
            }
        };
        if let Some(&l) = batch.labels.iter().find(|&&l| l as usize >= classes) {
            return bad(format!("label {l} is not below {classes}"));
        }
        Ok(classes)
    }

    /// Forward (and with `grad_scale`, backward) of a task head plus
    /// `lm_coef` times the LM loss on the same rows; gradients ACCUMULATE
    /// d(`grad_scale` · (task mean + `lm_coef` · LM mean)).
    ///
    /// `den`: what the task and LM losses are means over, when not this
    /// batch's own counts ([`Gpt2::task_loss_counts`] of a global batch).
    /// `ready` gets the gradients as backward finishes them
    /// ([`Trainable::forward_backward_streamed`]).
    fn task_pass<'g>(
        &'g mut self,
        batch: &Gpt2TaskBatch,
        lm_coef: f32,
        grad_scale: Option<f32>,
        den: Option<[f64; 2]>,
        ready: &mut dyn FnMut(&'g mut [f32]),
    ) -> crate::Result<TaskOutput> {
        let classes = self.check_task_batch(batch)?;
        if !(lm_coef >= 0.0 && lm_coef.is_finite()) {
            return Err(crate::Error::InvalidInput(format!(
                "lm_coef {lm_coef} must be a finite number ≥ 0"
            )));
        }
        if lm_coef > 0.0
            && !self.config.tie_word_embeddings
            && !self.layout.contains("lm_head.weight")
        {
            return Err(crate::Error::InvalidInput(format!(
                "the auxiliary LM loss needs an LM head: {} has none with \
                 tie_word_embeddings false (use lm_coef 0)",
                self.arch
            )));
        }
        let (rows, t) = (batch.rows, batch.t);
        let mc = batch.choices > 1 || self.idx.score.is_none();
        let pooled_at: Vec<usize> = if mc {
            batch.lens.iter().map(|&l| l - 1).collect()
        } else {
            self.last_non_pad(&batch.inputs, rows, t)?
        };
        // Everything read lies in the rows' real tokens (the pooled token
        // and the LM targets): the padding need not run. A row pooled past
        // its length (a hand-built batch whose padding is not `pad_token_id`)
        // keeps it.
        let padded = batch.lens.iter().any(|&l| l < t);
        let inside = pooled_at.iter().zip(&batch.lens).all(|(&i, &l)| i < l);
        let lens = (padded && inside).then_some(&batch.lens[..]);
        self.forward_body(&batch.inputs, rows, t, lens)?;
        let acts = self.acts.as_mut().expect("allocated");
        timed(Phase::Copy, || acts.dc.fill(0.0));
        let mut out = TaskOutput::default();
        if lm_coef > 0.0 {
            // HF shifts: position i predicts token i+1, real tokens only.
            let mut targets = vec![IGNORE_INDEX; acts.n];
            for (r, &len) in batch.lens.iter().enumerate() {
                for i in 0..len - 1 {
                    targets[acts.row(r, i)] = batch.inputs[r * t + i + 1] as i32;
                }
            }
            // lm_loss means over this batch's targets: rescale to `den`'s.
            let local = batch.lens.iter().map(|&l| l - 1).sum::<usize>() as f64;
            let adj = den.map_or(1.0, |d| if d[1] > 0.0 { local / d[1] } else { 0.0 });
            // The head's products inside are their own phase.
            let scale = grad_scale.map(|g| g * lm_coef * adj as f32);
            out.lm = timed(Phase::LmHeadLoss, || self.lm_loss(&targets, scale));
        }
        // Head: pooled [rows, C] → logits [rows, OC] (OC = L, or 1 per choice).
        let c = self.config.n_embd;
        let (w, bias) = if mc {
            (self.idx.mc_w.clone(), self.idx.mc_b.clone())
        } else {
            (self.idx.score.clone(), None)
        };
        let w = w.expect("checked by check_task_batch");
        let oc = if mc { 1 } else { classes };
        let acts = self.acts.as_mut().expect("allocated");
        let mut pooled = vec![0.0f32; rows * c];
        for (r, &i) in pooled_at.iter().enumerate() {
            let src = acts.row(r, i) * c;
            pooled[r * c..(r + 1) * c].copy_from_slice(&acts.lnf[src..src + c]);
        }
        let mut logits = vec![0.0f32; rows * oc];
        kernels::matmul_forward(
            &mut logits,
            &pooled,
            &self.params[w.clone()],
            bias.clone().map(|b| &self.params[b]),
            rows,
            c,
            oc,
            WeightLayout::OutIn,
        );
        out.logits = logits.clone();
        // Cross-entropy over groups of `classes`: [examples, classes].
        let examples = rows * oc / classes;
        let targets: Vec<i32> = batch.labels.iter().map(|&l| l as i32).collect();
        let mut losses = vec![0.0f32; examples];
        let Some(grad_scale) = grad_scale else {
            let (sum, count) = kernels::cross_entropy_forward(
                &mut losses,
                &logits,
                &targets,
                examples,
                classes,
                IGNORE_INDEX,
            );
            out.task = LossParts { sum, count };
            return Ok(out);
        };
        let (sum, count) = kernels::cross_entropy_fused(
            &mut logits,
            &mut losses,
            &targets,
            examples,
            classes,
            IGNORE_INDEX,
            (grad_scale as f64 / den.map_or(examples as f64, |d| d[0])) as f32,
        );
        out.task = LossParts { sum, count };
        let mut dpooled = vec![0.0f32; rows * c];
        {
            let (gw, gb) = match bias.clone() {
                Some(b) => {
                    let (gw, gb) = two_mut(&mut self.grads, w.clone(), b);
                    (gw, Some(gb))
                }
                None => (&mut self.grads[w.clone()], None),
            };
            kernels::matmul_backward(
                Some((&mut dpooled, GradWrite::Add)),
                Some(gw),
                gb,
                &logits,
                &pooled,
                &self.params[w],
                rows,
                c,
                oc,
                WeightLayout::OutIn,
            );
        }
        for (r, &i) in pooled_at.iter().enumerate() {
            let dst = acts.row(r, i) * c;
            for (d, s) in acts.dc[dst..dst + c].iter_mut().zip(&dpooled[r * c..]) {
                *d += s;
            }
        }
        self.backward_body(ready);
        Ok(out)
    }

    /// Task logits and losses of `batch` (no gradients): for classification
    /// `logits` [B, L] (HF `GPT2ForSequenceClassification.logits`), for
    /// multiple choice [B, K] (`GPT2DoubleHeadsModel.mc_logits`).
    pub fn forward_task(
        &mut self,
        batch: &Gpt2TaskBatch,
        lm_coef: f32,
    ) -> crate::Result<TaskOutput> {
        self.task_pass(batch, lm_coef, None, None, &mut |_| {})
    }

    /// What the task loss and the LM loss of `batch` are means over: its
    /// examples and (with `lm_coef` > 0) its LM targets.
    pub fn task_loss_counts(batch: &Gpt2TaskBatch, lm_coef: f32) -> [f64; 2] {
        let lm = if lm_coef > 0.0 {
            batch
                .lens
                .iter()
                .map(|&l| l.saturating_sub(1))
                .sum::<usize>()
        } else {
            0
        };
        [batch.labels.len() as f64, lm as f64]
    }

    /// [`Gpt2::forward_task`] and its backward: ACCUMULATES into `grads`
    /// d(`grad_scale` · (task mean + `lm_coef` · LM mean)) / dθ.
    pub fn forward_backward_task(
        &mut self,
        batch: &Gpt2TaskBatch,
        lm_coef: f32,
        grad_scale: f32,
    ) -> crate::Result<TaskOutput> {
        self.task_pass(batch, lm_coef, Some(grad_scale), None, &mut |_| {})
    }
}

/// A GPT-2 task model for the training loop: its head's loss plus
/// `lm_coef` times the auxiliary LM loss (GPT-1 §3.2; 0 = off).
pub struct Gpt2TaskTrainer {
    pub model: Gpt2,
    pub lm_coef: f32,
}

impl Trainable for Gpt2TaskTrainer {
    type Batch = Gpt2TaskBatch;

    fn params(&self) -> &[f32] {
        &self.model.params
    }

    fn layout(&self) -> &ParamLayout {
        &self.model.layout
    }

    fn params_and_grads(&mut self) -> (&mut [f32], &mut [f32]) {
        self.model.weights_changed();
        (&mut self.model.params, &mut self.model.grads)
    }

    fn params_grads_hooked(
        &mut self,
    ) -> (
        &mut [f32],
        &mut [f32],
        Option<crate::kernels::UpdateHook<'_>>,
    ) {
        self.model.params_grads_hooked()
    }

    fn grads(&self) -> &[f32] {
        &self.model.grads
    }

    fn zero_grad(&mut self) {
        crate::kernels::zero_fill(&mut self.model.grads);
    }

    /// The reported loss is the combined mean, as one part per example.
    fn forward_backward(
        &mut self,
        batch: &Gpt2TaskBatch,
        grad_scale: f32,
    ) -> crate::Result<LossParts> {
        Trainable::forward_backward_streamed(self, batch, grad_scale, None, &mut |_| {})
    }

    fn loss_counts(&self, batch: &Gpt2TaskBatch) -> Vec<f64> {
        Gpt2::task_loss_counts(batch, self.lm_coef).to_vec()
    }

    fn forward_backward_over(
        &mut self,
        batch: &Gpt2TaskBatch,
        grad_scale: f32,
        counts: &[f64],
    ) -> crate::Result<LossParts> {
        Trainable::forward_backward_streamed(self, batch, grad_scale, Some(counts), &mut |_| {})
    }

    fn forward_backward_streamed<'g>(
        &'g mut self,
        batch: &Gpt2TaskBatch,
        grad_scale: f32,
        counts: Option<&[f64]>,
        ready: &mut dyn FnMut(&'g mut [f32]),
    ) -> crate::Result<LossParts> {
        let lm_coef = self.lm_coef;
        let Some(counts) = counts else {
            let out = self
                .model
                .task_pass(batch, lm_coef, Some(grad_scale), None, ready)?;
            return Ok(combined(&out, lm_coef));
        };
        let &[task, lm] = counts else {
            return Err(crate::Error::InvalidInput(format!(
                "{} loss counts for a GPT-2 task's 2",
                counts.len()
            )));
        };
        let out =
            self.model
                .task_pass(batch, lm_coef, Some(grad_scale), Some([task, lm]), ready)?;
        let over = |l: &LossParts, d: f64| if d > 0.0 { l.sum / d } else { 0.0 };
        Ok(LossParts {
            sum: over(&out.task, task) + lm_coef as f64 * over(&out.lm, lm),
            count: 1,
        })
    }

    fn set_precision(&mut self, precision: Precision) -> crate::Result<()> {
        self.model.set_precision(precision);
        Ok(())
    }

    fn set_recompute(&mut self, on: bool) -> crate::Result<()> {
        self.model.set_recompute(on);
        Ok(())
    }

    fn evaluate(&mut self, batch: &Gpt2TaskBatch) -> crate::Result<LossParts> {
        let out = self.model.forward_task(batch, self.lm_coef)?;
        Ok(combined(&out, self.lm_coef))
    }

    fn decay_spans(&self) -> Vec<(Range<usize>, bool)> {
        self.model.layout.decay_spans()
    }

    fn tokens_per_batch(&self) -> usize {
        self.model.tokens_per_batch()
    }
}

fn combined(out: &TaskOutput, lm_coef: f32) -> LossParts {
    let n = out.task.count;
    LossParts {
        sum: out.loss(lm_coef) * n as f64,
        count: n,
    }
}
