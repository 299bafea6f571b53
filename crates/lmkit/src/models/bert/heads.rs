//! BERT's heads, each with one forward and one backward, used by inference
//! (`Bert::pooled`, `mlm_logits`, `nsp_logits`, `classifier_logits`,
//! `qa_logits`) and by training (`BertTrainer`) alike, over the flat
//! parameter buffer and its layout.
//!
//! Shape legend: B batch, T sequence, C channels, V vocabulary, K outputs
//! of a linear head, M rows a head runs on, N = B·T.
//!
//! Backward functions ACCUMULATE into the parameter gradients and into the
//! gradient of their input, like the kernels.

use std::ops::Range;

use crate::kernels::{self, Gelu, GradWrite, WeightLayout};
use crate::spec::layout::ParamLayout;
use crate::util::slice::two_mut;

/// The range of parameter `name`; the names are constants of this module
/// and the layout was checked against the heads when the model was built.
pub(crate) fn range(layout: &ParamLayout, name: &str) -> Range<usize> {
    match layout.range(name) {
        Some(r) => r,
        None => panic!("BERT layout has no parameter `{name}`"),
    }
}

/// `out[N,K] = inp[N,C]·Wᵀ + b` for the `nn.Linear` `name`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn linear_fwd(
    layout: &ParamLayout,
    params: &[f32],
    name: &str,
    out: &mut [f32],
    inp: &[f32],
    n: usize,
    c: usize,
    k: usize,
) {
    let w = &params[range(layout, &format!("{name}.weight"))];
    let b = &params[range(layout, &format!("{name}.bias"))];
    kernels::matmul_forward(out, inp, w, Some(b), n, c, k, WeightLayout::OutIn);
}

/// Backward of [`linear_fwd`]: `dinp += dout·W`; weight and bias grads accumulate.
#[allow(clippy::too_many_arguments)]
pub(crate) fn linear_bwd(
    layout: &ParamLayout,
    params: &[f32],
    grads: &mut [f32],
    name: &str,
    dinp: Option<(&mut [f32], GradWrite)>,
    dout: &[f32],
    inp: &[f32],
    n: usize,
    c: usize,
    k: usize,
) {
    let wr = range(layout, &format!("{name}.weight"));
    let br = range(layout, &format!("{name}.bias"));
    let (gw, gb) = two_mut(grads, wr.clone(), br);
    kernels::matmul_backward(
        dinp,
        Some(gw),
        Some(gb),
        dout,
        inp,
        &params[wr],
        n,
        c,
        k,
        WeightLayout::OutIn,
    );
}

/// LayerNorm backward for parameters `name.{weight,bias}`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn layernorm_bwd(
    layout: &ParamLayout,
    params: &[f32],
    grads: &mut [f32],
    name: &str,
    dinp: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    mean: &[f32],
    rstd: &[f32],
    n: usize,
    c: usize,
) {
    let _span = crate::util::profile::span(crate::util::profile::Phase::LayerNorm);
    let wr = range(layout, &format!("{name}.weight"));
    let br = range(layout, &format!("{name}.bias"));
    let (gw, gb) = two_mut(grads, wr.clone(), br);
    kernels::layernorm_backward(dinp, gw, gb, dout, inp, &params[wr], mean, rstd, n, c);
}

/// A linear head (`cls.seq_relationship`, `classifier`): `[M,C]` → `[M,K]`.
pub(crate) fn linear_head(
    layout: &ParamLayout,
    params: &[f32],
    name: &str,
    inp: &[f32],
    c: usize,
    k: usize,
) -> Vec<f32> {
    let m = inp.len() / c;
    let mut out = vec![0.0; m * k];
    linear_fwd(layout, params, name, &mut out, inp, m, c, k);
    out
}

/// HF `BertPooler` on `[CLS]`: `tanh(W·h[b,0] + b)`, with what its backward needs.
pub(crate) struct Pooler {
    /// Which rows of the hidden state are the `[CLS]` rows `[B]`.
    rows: Vec<usize>,
    /// `[B,C]` the `[CLS]` rows of the hidden state.
    cls: Vec<f32>,
    /// `[B,C]` the output.
    pub(crate) pooled: Vec<f32>,
}

impl Pooler {
    /// `hidden` is `[N,C]`; `rows` `[B]` its `[CLS]` rows.
    pub(crate) fn forward(
        layout: &ParamLayout,
        params: &[f32],
        hidden: &[f32],
        rows: &[usize],
        c: usize,
    ) -> Pooler {
        let b = rows.len();
        let mut cls = Vec::with_capacity(b * c);
        for &r in rows {
            cls.extend_from_slice(&hidden[r * c..(r + 1) * c]);
        }
        let mut dense = vec![0.0; b * c];
        linear_fwd(layout, params, "pooler.dense", &mut dense, &cls, b, c, c);
        let mut pooled = vec![0.0; b * c];
        kernels::tanh_forward(&mut pooled, &dense);
        Pooler {
            rows: rows.to_vec(),
            cls,
            pooled,
        }
    }

    /// `dpooled` `[B,C]` → parameter grads, and `dhidden` `[N,C]` += the
    /// gradient at each `[CLS]` row.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn backward(
        &self,
        layout: &ParamLayout,
        params: &[f32],
        grads: &mut [f32],
        dpooled: &[f32],
        dhidden: &mut [f32],
        c: usize,
    ) {
        let b = self.cls.len() / c;
        let mut ddense = vec![0.0; b * c];
        kernels::tanh_backward(&mut ddense, &self.pooled, dpooled);
        let mut dcls = vec![0.0; b * c];
        linear_bwd(
            layout,
            params,
            grads,
            "pooler.dense",
            Some((&mut dcls, GradWrite::Add)),
            &ddense,
            &self.cls,
            b,
            c,
            c,
        );
        for (bi, &r) in self.rows.iter().enumerate() {
            let row = r * c;
            for (d, g) in dhidden[row..row + c]
                .iter_mut()
                .zip(&dcls[bi * c..(bi + 1) * c])
            {
                *d += g;
            }
        }
    }
}

/// HF `BertOnlyMLMHead` on M rows: dense → GELU → LayerNorm → decoder tied to
/// the word embeddings `[V,C]` + `cls.predictions.bias`, with what its
/// backward needs.
pub(crate) struct MlmHead {
    /// `[M,C]` input rows, dense output, GELU output, LayerNorm output.
    x: Vec<f32>,
    dense: Vec<f32>,
    act: Vec<f32>,
    ln: Vec<f32>,
    /// `[M]` LayerNorm statistics.
    mean: Vec<f32>,
    rstd: Vec<f32>,
}

const MLM_DENSE: &str = "cls.predictions.transform.dense";
const MLM_LN: &str = "cls.predictions.transform.LayerNorm";
const WORD_EMB: &str = "embeddings.word_embeddings.weight";
const MLM_BIAS: &str = "cls.predictions.bias";

impl MlmHead {
    /// `x` `[M,C]` → (the head, logits `[M,V]`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn forward(
        layout: &ParamLayout,
        params: &[f32],
        gelu: Gelu,
        eps: f32,
        x: Vec<f32>,
        c: usize,
        v: usize,
    ) -> (MlmHead, Vec<f32>) {
        let m = x.len() / c;
        let mut dense = vec![0.0; m * c];
        linear_fwd(layout, params, MLM_DENSE, &mut dense, &x, m, c, c);
        let mut act = vec![0.0; m * c];
        kernels::gelu_forward(&mut act, &dense, gelu);
        let mut ln = vec![0.0; m * c];
        let (mut mean, mut rstd) = (vec![0.0; m], vec![0.0; m]);
        kernels::layernorm_forward(
            &mut ln,
            &mut mean,
            &mut rstd,
            &act,
            &params[range(layout, &format!("{MLM_LN}.weight"))],
            &params[range(layout, &format!("{MLM_LN}.bias"))],
            m,
            c,
            eps,
        );
        let mut logits = vec![0.0; m * v];
        kernels::matmul_forward(
            &mut logits,
            &ln,
            &params[range(layout, WORD_EMB)],
            Some(&params[range(layout, MLM_BIAS)]),
            m,
            c,
            v,
            WeightLayout::OutIn,
        );
        let head = MlmHead {
            x,
            dense,
            act,
            ln,
            mean,
            rstd,
        };
        (head, logits)
    }

    /// `dlogits` `[M,V]` → parameter grads (the tied decoder's weight
    /// gradient goes to the word embeddings) and `dx` `[M,C]`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn backward(
        &self,
        layout: &ParamLayout,
        params: &[f32],
        grads: &mut [f32],
        gelu: Gelu,
        dlogits: &[f32],
        c: usize,
        v: usize,
    ) -> Vec<f32> {
        let m = self.x.len() / c;
        let wemb = range(layout, WORD_EMB);
        let mut dln = vec![0.0; m * c];
        {
            let (gw, gb) = two_mut(grads, wemb.clone(), range(layout, MLM_BIAS));
            kernels::matmul_backward(
                Some((&mut dln, GradWrite::Add)),
                Some(gw),
                Some(gb),
                dlogits,
                &self.ln,
                &params[wemb],
                m,
                c,
                v,
                WeightLayout::OutIn,
            );
        }
        let mut dact = vec![0.0; m * c];
        layernorm_bwd(
            layout, params, grads, MLM_LN, &mut dact, &dln, &self.act, &self.mean, &self.rstd, m, c,
        );
        // d act → d dense, in place.
        kernels::gelu_backward(&mut dact, &self.dense, gelu);
        let mut dx = vec![0.0; m * c];
        linear_bwd(
            layout,
            params,
            grads,
            MLM_DENSE,
            Some((&mut dx, GradWrite::Set)),
            &dact,
            &self.x,
            m,
            c,
            c,
        );
        dx
    }
}

/// `BertForQuestionAnswering`'s `qa_outputs` on every position of `hidden`
/// `[N,C]` → (start `[N]`, end `[N]`).
pub(crate) fn qa_forward(
    layout: &ParamLayout,
    params: &[f32],
    hidden: &[f32],
    c: usize,
) -> (Vec<f32>, Vec<f32>) {
    let n = hidden.len() / c;
    let mut both = vec![0.0; n * 2];
    linear_fwd(layout, params, "qa_outputs", &mut both, hidden, n, c, 2);
    let start = both.iter().step_by(2).copied().collect();
    let end = both.iter().skip(1).step_by(2).copied().collect();
    (start, end)
}

/// Backward of [`qa_forward`]: `dstart`, `dend` `[N]` → parameter grads and
/// `dhidden` `[N,C]` +=.
#[allow(clippy::too_many_arguments)]
pub(crate) fn qa_backward(
    layout: &ParamLayout,
    params: &[f32],
    grads: &mut [f32],
    dstart: &[f32],
    dend: &[f32],
    hidden: &[f32],
    dhidden: &mut [f32],
    c: usize,
) {
    let n = hidden.len() / c;
    let mut dboth = vec![0.0; n * 2];
    for r in 0..n {
        dboth[2 * r] = dstart[r];
        dboth[2 * r + 1] = dend[r];
    }
    linear_bwd(
        layout,
        params,
        grads,
        "qa_outputs",
        Some((dhidden, GradWrite::Add)),
        &dboth,
        hidden,
        n,
        c,
        2,
    );
}
