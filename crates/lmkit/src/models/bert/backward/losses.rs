//! The heads' losses of one training pass (`BertTrainer::run`): each
//! head's forward on the encoder's last hidden state, its loss, and with
//! `backward` its own backward, adding d loss / d hidden state into `dy`
//! for [`encoder_backward`](super::encoder::encoder_backward).

use super::super::heads::{linear_bwd, linear_head, qa_backward, qa_forward, MlmHead, Pooler};
use super::super::model::BertActivations;
use super::{BertTargets, HeadOutputs, HeadStats, LossTerm};
use crate::kernels::{self, Gelu, GradWrite};
use crate::models::LossParts;
use crate::spec::config::BertConfig;
use crate::spec::layout::ParamLayout;
use crate::util::profile::{span, Phase};

use crate::spec::IGNORE_INDEX;

/// `sum / den`, 0 for an empty term.
fn over(sum: f64, den: f64) -> f64 {
    if den > 0.0 {
        sum / den
    } else {
        0.0
    }
}

fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best
}

/// A classification head's loss over `rows` rows of `k` logits (HF: mean CE
/// over the labels ≠ −100, or over `den` when given) and how many rows it
/// gets right. With `backward`
/// (and a label to learn from) `logits` becomes d loss / d logits, scaled by
/// `grad_scale`, and the result says so: the caller runs the head's backward.
/// Returns (loss parts, correct rows, gradient written).
fn ce_head(
    logits: &mut [f32],
    labels: &[i32],
    rows: usize,
    k: usize,
    backward: bool,
    grad_scale: f32,
    den: Option<f64>,
) -> (LossParts, usize, bool) {
    let correct = (0..rows)
        .filter(|&r| {
            labels[r] != IGNORE_INDEX && argmax(&logits[r * k..(r + 1) * k]) == labels[r] as usize
        })
        .count();
    let labelled = labels.iter().filter(|&&x| x != IGNORE_INDEX).count();
    let mut losses = vec![0.0; rows];
    let grad = backward && labelled > 0;
    let (sum, count) = if grad {
        kernels::cross_entropy_fused(
            logits,
            &mut losses,
            labels,
            rows,
            k,
            IGNORE_INDEX,
            (grad_scale as f64 / den.unwrap_or(labelled as f64)) as f32,
        )
    } else {
        kernels::cross_entropy_forward(&mut losses, logits, labels, rows, k, IGNORE_INDEX)
    };
    (LossParts { sum, count }, correct, grad)
}

/// HF's QA target handling: clamp to [0, T]; T is then ignored.
pub(super) fn qa_targets(pos: &[i32], t: usize) -> Vec<i32> {
    pos.iter().map(|&p| p.clamp(0, t as i32)).collect()
}

/// One pass of the heads over the last forward's hidden state `h`: what
/// they read, where their gradients go, and the statistics they add up.
pub(super) struct HeadPass<'a> {
    pub(super) cfg: &'a BertConfig,
    pub(super) layout: &'a ParamLayout,
    pub(super) params: &'a [f32],
    /// Parameter gradients: the heads' own ACCUMULATE here.
    pub(super) grads: &'a mut [f32],
    pub(super) acts: &'a BertActivations,
    /// `[rows, C]` the encoder's last hidden state.
    pub(super) h: &'a [f32],
    /// `[rows, C]` d loss / d `h`, ADDED to by each head's backward.
    pub(super) dy: &'a mut [f32],
    pub(super) outputs: &'a mut HeadOutputs,
    pub(super) st: HeadStats,
    pub(super) gelu: Gelu,
    /// The batch's B and (padded) T.
    pub(super) b: usize,
    pub(super) t: usize,
    pub(super) backward: bool,
    pub(super) grad_scale: f32,
    /// What each term is a mean over ([`LossTerm`] order) when not this
    /// batch's own counts.
    pub(super) denoms: Option<[f64; LossTerm::COUNT]>,
}

impl HeadPass<'_> {
    /// What term `i` is a mean over: the given (global) count, else `local`.
    fn den(&self, i: LossTerm, local: usize) -> f64 {
        self.denoms.map_or(local as f64, |d| d[i as usize])
    }

    /// Every head `tg` switches on, in order: MLM, the pooled heads, token
    /// classification, span QA.
    pub(super) fn run(&mut self, tg: &BertTargets) {
        if let Some(labels) = tg.mlm_labels() {
            self.mlm(labels);
        }
        let pooled_heads = tg.nsp_labels().is_some()
            || tg.class_labels().is_some()
            || tg.regression_targets().is_some()
            || tg.choice_labels().is_some();
        if pooled_heads {
            self.pooled(tg);
        }
        if let Some(labels) = tg.token_labels() {
            self.token(labels);
        }
        if let (Some(sp), Some(ep)) = (tg.start_positions(), tg.end_positions()) {
            self.qa(sp, ep);
        }
    }

    /// Masked LM on the labelled rows.
    fn mlm(&mut self, labels: &[i32]) {
        let (t, c, v) = (self.t, self.cfg.hidden_size, self.cfg.vocab_size);
        let (n, eps) = (self.b * t, self.cfg.layer_norm_eps as f32);
        let (layout, params, acts, h) = (self.layout, self.params, self.acts, self.h);
        let labelled: Vec<usize> = (0..n).filter(|&r| labels[r] != IGNORE_INDEX).collect();
        let m = labelled.len();
        if m == 0 {
            return;
        }
        let targets: Vec<i32> = labelled.iter().map(|&r| labels[r]).collect();
        // Their rows of the hidden state (all computed: see `unpad` in `run`).
        let rows: Vec<usize> = labelled
            .iter()
            .map(|&r| acts.row(r / t, r % t).unwrap_or(r))
            .collect();
        let mut x = Vec::with_capacity(m * c);
        for &r in &rows {
            x.extend_from_slice(&h[r * c..(r + 1) * c]);
        }
        let product = span(Phase::LmHeadMatmul);
        let (head, mut logits) = MlmHead::forward(layout, params, self.gelu, eps, x, c, v);
        drop(product);
        let loss = span(Phase::LmHeadLoss);
        let mut losses = vec![0.0; m];
        let (sum, count) = if self.backward {
            kernels::cross_entropy_fused(
                &mut logits,
                &mut losses,
                &targets,
                m,
                v,
                IGNORE_INDEX,
                (self.grad_scale as f64 / self.den(LossTerm::Mlm, m)) as f32,
            )
        } else {
            kernels::cross_entropy_forward(&mut losses, &logits, &targets, m, v, IGNORE_INDEX)
        };
        self.st.mlm = LossParts { sum, count };
        self.st.loss += over(sum, self.den(LossTerm::Mlm, m));
        drop(loss);
        if self.backward {
            let product = span(Phase::LmHeadMatmul);
            let dx = head.backward(layout, params, self.grads, self.gelu, &logits, c, v);
            drop(product);
            for (k, &r) in rows.iter().enumerate() {
                for (d, g) in self.dy[r * c..(r + 1) * c]
                    .iter_mut()
                    .zip(&dx[k * c..(k + 1) * c])
                {
                    *d += g;
                }
            }
        }
    }

    /// Pooler-based heads (NSP, classifier, regression, multiple choice).
    fn pooled(&mut self, tg: &BertTargets) {
        let (b, c) = (self.b, self.cfg.hidden_size);
        let pooler = Pooler::forward(self.layout, self.params, self.h, &self.acts.cls_rows(), c);
        let pooled = &pooler.pooled;
        let mut dpooled = vec![0.0; b * c];
        if let Some(labels) = tg.nsp_labels() {
            let (lp, correct, logits) = self.pooled_ce(
                "cls.seq_relationship",
                LossTerm::Nsp,
                labels,
                2,
                pooled,
                &mut dpooled,
            );
            self.st.nsp = lp;
            self.st.nsp_correct = correct;
            self.st.loss += over(lp.sum, self.den(LossTerm::Nsp, lp.count));
            self.outputs.nsp_logits = logits;
        }
        if let Some(labels) = tg.class_labels() {
            let k = self.cfg.num_labels();
            let (lp, correct, logits) = self.pooled_ce(
                "classifier",
                LossTerm::Classify,
                labels,
                k,
                pooled,
                &mut dpooled,
            );
            self.st.classify = lp;
            self.st.classify_correct = correct;
            self.st.loss += over(lp.sum, self.den(LossTerm::Classify, lp.count));
            self.outputs.class_logits = logits;
        }
        if let Some(y) = tg.regression_targets() {
            self.regression(y, pooled, &mut dpooled);
        }
        if let Some(labels) = tg.choice_labels() {
            self.choice(labels, pooled, &mut dpooled);
        }
        if self.backward {
            pooler.backward(self.layout, self.params, self.grads, &dpooled, self.dy, c);
        }
    }

    /// A cross-entropy head `name` with `k` outputs on the pooled rows:
    /// (loss parts, correct rows, its logits); its backward ADDS to `dpooled`.
    fn pooled_ce(
        &mut self,
        name: &str,
        term: LossTerm,
        labels: &[i32],
        k: usize,
        pooled: &[f32],
        dpooled: &mut [f32],
    ) -> (LossParts, usize, Vec<f32>) {
        let (b, c) = (self.b, self.cfg.hidden_size);
        let mut logits = linear_head(self.layout, self.params, name, pooled, c, k);
        let kept = logits.clone();
        let d = self.denoms.map(|d| d[term as usize]);
        let (lp, correct, grad) =
            ce_head(&mut logits, labels, b, k, self.backward, self.grad_scale, d);
        if grad {
            linear_bwd(
                self.layout,
                self.params,
                self.grads,
                name,
                Some((dpooled, GradWrite::Add)),
                &logits,
                pooled,
                b,
                c,
                k,
            );
        }
        (lp, correct, kept)
    }

    /// Regression on the classifier's outputs: MSE over the B·L outputs.
    fn regression(&mut self, y: &[f32], pooled: &[f32], dpooled: &mut [f32]) {
        let (b, c, k) = (self.b, self.cfg.hidden_size, self.cfg.num_labels());
        let mut out = linear_head(self.layout, self.params, "classifier", pooled, c, k);
        self.outputs.class_logits = out.clone();
        // MSE over the B·L outputs; d/d out = 2 (out − y) / (B·L).
        let m = out.len();
        let mut sum = 0.0f64;
        let scale = (2.0 * self.grad_scale as f64 / self.den(LossTerm::Regression, m)) as f32;
        for (o, &t) in out.iter_mut().zip(y) {
            let d = *o - t;
            sum += (d as f64) * (d as f64);
            *o = scale * d;
        }
        self.st.regression = LossParts { sum, count: m };
        self.st.loss += over(sum, self.den(LossTerm::Regression, m));
        if self.backward {
            linear_bwd(
                self.layout,
                self.params,
                self.grads,
                "classifier",
                Some((dpooled, GradWrite::Add)),
                &out,
                pooled,
                b,
                c,
                k,
            );
        }
    }

    /// HF BertForMultipleChoice: one score per choice `[B,1]` read as
    /// `[E,K]`, mean CE over the examples.
    fn choice(&mut self, labels: &[i32], pooled: &[f32], dpooled: &mut [f32]) {
        let (b, c) = (self.b, self.cfg.hidden_size);
        let (e, k) = (labels.len(), b / labels.len());
        let mut logits = linear_head(self.layout, self.params, "classifier", pooled, c, 1);
        self.outputs.choice_logits = logits.clone();
        let d = self.denoms.map(|d| d[LossTerm::Choice as usize]);
        let (lp, correct, grad) =
            ce_head(&mut logits, labels, e, k, self.backward, self.grad_scale, d);
        self.st.choice_correct = correct;
        if grad {
            linear_bwd(
                self.layout,
                self.params,
                self.grads,
                "classifier",
                Some((dpooled, GradWrite::Add)),
                &logits,
                pooled,
                b,
                c,
                1,
            );
        }
        self.st.choice = lp;
        self.st.loss += over(lp.sum, self.den(LossTerm::Choice, lp.count));
    }

    /// Token classification on every position (HF: mean CE over the
    /// labels ≠ −100).
    fn token(&mut self, labels: &[i32]) {
        let (t, c, k) = (self.t, self.cfg.hidden_size, self.cfg.num_labels());
        let n = self.b * t;
        let acts = self.acts;
        let rows = acts.rows();
        let mut logits = linear_head(self.layout, self.params, "classifier", self.h, c, k);
        // Each row's label (the rows are the positions unless packed).
        let labels: Vec<i32> = match acts.packed() {
            Some(_) => {
                let mut packed = vec![IGNORE_INDEX; rows];
                let mut out = vec![0.0; n * k];
                for p in 0..n {
                    if let Some(r) = acts.row(p / t, p % t) {
                        packed[r] = labels[p];
                        out[p * k..(p + 1) * k].copy_from_slice(&logits[r * k..(r + 1) * k]);
                    }
                }
                self.outputs.token_logits = out;
                packed
            }
            None => {
                self.outputs.token_logits = logits.clone();
                labels.to_vec()
            }
        };
        let d = self.denoms.map(|d| d[LossTerm::Token as usize]);
        let (lp, correct, grad) = ce_head(
            &mut logits,
            &labels,
            rows,
            k,
            self.backward,
            self.grad_scale,
            d,
        );
        self.st.token_correct = correct;
        if grad {
            linear_bwd(
                self.layout,
                self.params,
                self.grads,
                "classifier",
                Some((self.dy, GradWrite::Add)),
                &logits,
                self.h,
                rows,
                c,
                k,
            );
        }
        self.st.token = lp;
        self.st.loss += over(lp.sum, self.den(LossTerm::Token, lp.count));
    }

    /// Span QA on every position: (CE(start) + CE(end)) / 2.
    fn qa(&mut self, sp: &[i32], ep: &[i32]) {
        let (b, t, c) = (self.b, self.t, self.cfg.hidden_size);
        let (backward, grad_scale) = (self.backward, self.grad_scale);
        let (mut start, mut end) = qa_forward(self.layout, self.params, self.h, c);
        self.outputs.start_logits = start.clone();
        self.outputs.end_logits = end.clone();
        let ignore = t as i32;
        let (ts, te) = (qa_targets(sp, t), qa_targets(ep, t));
        let mut losses = vec![0.0; b];
        let mut side = |logits: &mut [f32], tgt: &[i32], term: LossTerm| -> LossParts {
            let count = tgt.iter().filter(|&&x| x != ignore).count();
            let d = self.den(term, count);
            let (sum, count) = if backward && count > 0 {
                kernels::cross_entropy_fused(
                    logits,
                    &mut losses,
                    tgt,
                    b,
                    t,
                    ignore,
                    (0.5 * grad_scale as f64 / d) as f32,
                )
            } else {
                kernels::cross_entropy_forward(&mut losses, logits, tgt, b, t, ignore)
            };
            if backward && count == 0 {
                logits.fill(0.0);
            }
            LossParts { sum, count }
        };
        let ls = side(&mut start, &ts, LossTerm::QaStart);
        let le = side(&mut end, &te, LossTerm::QaEnd);
        self.st.qa = LossParts {
            sum: ls.sum + le.sum,
            count: ls.count + le.count,
        };
        self.st.loss += 0.5
            * (over(ls.sum, self.den(LossTerm::QaStart, ls.count))
                + over(le.sum, self.den(LossTerm::QaEnd, le.count)));
        if backward {
            qa_backward(
                self.layout,
                self.params,
                self.grads,
                &start,
                &end,
                self.h,
                self.dy,
                c,
            );
        }
    }
}
