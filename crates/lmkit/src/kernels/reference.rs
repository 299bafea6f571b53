//! Plain reference twins of every fast kernel: same signatures, obvious
//! loops, f64 accumulation. Slow; used by tests to check the fast kernels.
//!
//! Shape legend: B batch, T sequence, C channels, NH heads, HS = C/NH,
//! V vocabulary, OC output channels, N = B·T rows.

use super::{AdamW, AttentionShape, Gelu, WeightLayout};
use std::ops::Range;

fn w_at(weight: &[f32], i: usize, o: usize, c: usize, oc: usize, layout: WeightLayout) -> f32 {
    match layout {
        WeightLayout::InOut => weight[i * oc + o],
        WeightLayout::OutIn => weight[o * c + i],
    }
}

#[allow(clippy::too_many_arguments)]
pub fn matmul_forward(
    out: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: Option<&[f32]>,
    n: usize,
    c: usize,
    oc: usize,
    layout: WeightLayout,
) {
    for r in 0..n {
        for o in 0..oc {
            let mut s = bias.map_or(0.0, |b| b[o] as f64);
            for i in 0..c {
                s += inp[r * c + i] as f64 * w_at(weight, i, o, c, oc, layout) as f64;
            }
            out[r * oc + o] = s as f32;
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub fn matmul_backward(
    dinp: Option<&mut [f32]>,
    dweight: Option<&mut [f32]>,
    dbias: Option<&mut [f32]>,
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    n: usize,
    c: usize,
    oc: usize,
    layout: WeightLayout,
) {
    if let Some(dinp) = dinp {
        for r in 0..n {
            for i in 0..c {
                let mut s = 0.0f64;
                for o in 0..oc {
                    s += dout[r * oc + o] as f64 * w_at(weight, i, o, c, oc, layout) as f64;
                }
                dinp[r * c + i] += s as f32;
            }
        }
    }
    if let Some(dw) = dweight {
        for i in 0..c {
            for o in 0..oc {
                let mut s = 0.0f64;
                for r in 0..n {
                    s += inp[r * c + i] as f64 * dout[r * oc + o] as f64;
                }
                let idx = match layout {
                    WeightLayout::InOut => i * oc + o,
                    WeightLayout::OutIn => o * c + i,
                };
                dw[idx] += s as f32;
            }
        }
    }
    if let Some(db) = dbias {
        for o in 0..oc {
            let s: f64 = (0..n).map(|r| dout[r * oc + o] as f64).sum();
            db[o] += s as f32;
        }
    }
}

#[allow(clippy::too_many_arguments)]
pub fn layernorm_forward(
    out: &mut [f32],
    mean: &mut [f32],
    rstd: &mut [f32],
    inp: &[f32],
    weight: &[f32],
    bias: &[f32],
    n: usize,
    c: usize,
    eps: f32,
) {
    for r in 0..n {
        let x = &inp[r * c..(r + 1) * c];
        let m = x.iter().map(|&v| v as f64).sum::<f64>() / c as f64;
        let var = x.iter().map(|&v| (v as f64 - m).powi(2)).sum::<f64>() / c as f64;
        let rs = 1.0 / (var + eps as f64).sqrt();
        for i in 0..c {
            out[r * c + i] = ((x[i] as f64 - m) * rs * weight[i] as f64 + bias[i] as f64) as f32;
        }
        mean[r] = m as f32;
        rstd[r] = rs as f32;
    }
}

#[allow(clippy::too_many_arguments)]
pub fn layernorm_backward(
    dinp: &mut [f32],
    dweight: &mut [f32],
    dbias: &mut [f32],
    dout: &[f32],
    inp: &[f32],
    weight: &[f32],
    mean: &[f32],
    rstd: &[f32],
    n: usize,
    c: usize,
) {
    for r in 0..n {
        let (m, rs) = (mean[r] as f64, rstd[r] as f64);
        let xh: Vec<f64> = (0..c).map(|i| (inp[r * c + i] as f64 - m) * rs).collect();
        let dn: Vec<f64> = (0..c)
            .map(|i| dout[r * c + i] as f64 * weight[i] as f64)
            .collect();
        let m1 = dn.iter().sum::<f64>() / c as f64;
        let m2 = dn.iter().zip(&xh).map(|(a, b)| a * b).sum::<f64>() / c as f64;
        for i in 0..c {
            dbias[i] += dout[r * c + i];
            dweight[i] += (dout[r * c + i] as f64 * xh[i]) as f32;
            dinp[r * c + i] += ((dn[i] - m1 - xh[i] * m2) * rs) as f32;
        }
    }
}

/// erf(x) in f64: Taylor series near 0, continued fraction for erfc beyond.
pub(crate) fn erf_f64(x: f64) -> f64 {
    if x.abs() > 3.0 {
        let ax = x.abs();
        let mut f = 0.0f64;
        for k in (1..60).rev() {
            f = (k as f64 / 2.0) / (ax + f);
        }
        let erfc = (-ax * ax).exp() / std::f64::consts::PI.sqrt() / (ax + f);
        return (1.0 - erfc).copysign(x);
    }
    let mut term = x;
    let mut s = x;
    for n in 1..200 {
        term *= -x * x / n as f64;
        s += term / (2 * n + 1) as f64;
    }
    s * 2.0 / std::f64::consts::PI.sqrt()
}

fn gelu_f64(x: f64, kind: Gelu) -> (f64, f64) {
    match kind {
        Gelu::Tanh => {
            let k = (2.0 / std::f64::consts::PI).sqrt();
            let u = k * (x + 0.044715 * x * x * x);
            let t = u.tanh();
            let du = k * (1.0 + 3.0 * 0.044715 * x * x);
            (
                0.5 * x * (1.0 + t),
                0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * du,
            )
        }
        Gelu::Erf => {
            let cdf = 0.5 * (1.0 + erf_f64(x / std::f64::consts::SQRT_2));
            let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
            (x * cdf, cdf + x * pdf)
        }
    }
}

pub fn gelu_forward(out: &mut [f32], inp: &[f32], kind: Gelu) {
    for (o, x) in out.iter_mut().zip(inp) {
        *o = gelu_f64(*x as f64, kind).0 as f32;
    }
}

pub fn gelu_backward(grad: &mut [f32], inp: &[f32], kind: Gelu) {
    for (d, x) in grad.iter_mut().zip(inp) {
        *d = (gelu_f64(*x as f64, kind).1 * *d as f64) as f32;
    }
}

pub fn tanh_forward(out: &mut [f32], inp: &[f32]) {
    for (o, x) in out.iter_mut().zip(inp) {
        *o = (*x as f64).tanh() as f32;
    }
}

pub fn tanh_backward(dinp: &mut [f32], out: &[f32], dout: &[f32]) {
    for ((d, y), g) in dinp.iter_mut().zip(out).zip(dout) {
        *d += ((1.0 - (*y as f64).powi(2)) * *g as f64) as f32;
    }
}

fn allowed(bi: usize, i: usize, j: usize, t: usize, causal: bool, key_mask: Option<&[u8]>) -> bool {
    !(causal && j > i) && key_mask.is_none_or(|m| m[bi * t + j] != 0)
}

pub fn attention_forward(
    out: &mut [f32],
    att: &mut [f32],
    qkv: &[f32],
    shape: AttentionShape,
    causal: bool,
    key_mask: Option<&[u8]>,
) {
    let AttentionShape { b, t, c, nh } = shape;
    let hs = c / nh;
    let scale = 1.0 / (hs as f64).sqrt();
    for bi in 0..b {
        for h in 0..nh {
            for i in 0..t {
                let q = &qkv[(bi * t + i) * 3 * c + h * hs..][..hs];
                let mut s = vec![f64::NEG_INFINITY; t];
                for (j, sj) in s.iter_mut().enumerate() {
                    if allowed(bi, i, j, t, causal, key_mask) {
                        let k = &qkv[(bi * t + j) * 3 * c + c + h * hs..][..hs];
                        *sj = q
                            .iter()
                            .zip(k)
                            .map(|(a, b)| *a as f64 * *b as f64)
                            .sum::<f64>()
                            * scale;
                    }
                }
                let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let row = &mut att[((bi * nh + h) * t + i) * t..][..t];
                if mx == f64::NEG_INFINITY {
                    row.fill(0.0);
                } else {
                    let z: f64 = s.iter().map(|x| (x - mx).exp()).sum();
                    for (r, x) in row.iter_mut().zip(&s) {
                        *r = ((x - mx).exp() / z) as f32;
                    }
                }
                for d in 0..hs {
                    let mut acc = 0.0f64;
                    for j in 0..t {
                        acc +=
                            row[j] as f64 * qkv[(bi * t + j) * 3 * c + 2 * c + h * hs + d] as f64;
                    }
                    out[(bi * t + i) * c + h * hs + d] = acc as f32;
                }
            }
        }
    }
}

pub fn attention_backward(
    dqkv: &mut [f32],
    datt: &mut [f32],
    dout: &[f32],
    qkv: &[f32],
    att: &[f32],
    shape: AttentionShape,
) {
    let AttentionShape { b, t, c, nh } = shape;
    let hs = c / nh;
    let scale = 1.0 / (hs as f64).sqrt();
    let at = |bi: usize, j: usize, part: usize, h: usize, d: usize| {
        (bi * t + j) * 3 * c + part * c + h * hs + d
    };
    for bi in 0..b {
        for h in 0..nh {
            let p0 = (bi * nh + h) * t * t;
            for i in 0..t {
                let go = &dout[(bi * t + i) * c + h * hs..][..hs];
                // dp[j] = dout_i · v_j; dv_j += p_ij · dout_i
                let mut dp = vec![0.0f64; t];
                for j in 0..t {
                    let p = att[p0 + i * t + j] as f64;
                    for d in 0..hs {
                        dp[j] += go[d] as f64 * qkv[at(bi, j, 2, h, d)] as f64;
                        dqkv[at(bi, j, 2, h, d)] += (p * go[d] as f64) as f32;
                    }
                }
                let dot: f64 = (0..t).map(|j| att[p0 + i * t + j] as f64 * dp[j]).sum();
                for j in 0..t {
                    let ds = att[p0 + i * t + j] as f64 * (dp[j] - dot);
                    datt[p0 + i * t + j] = ds as f32;
                    for d in 0..hs {
                        dqkv[at(bi, i, 0, h, d)] +=
                            (scale * ds * qkv[at(bi, j, 1, h, d)] as f64) as f32;
                        dqkv[at(bi, j, 1, h, d)] +=
                            (scale * ds * qkv[at(bi, i, 0, h, d)] as f64) as f32;
                    }
                }
            }
        }
    }
}

fn log_softmax_at(row: &[f32], t: usize) -> f64 {
    let mx = row.iter().fold(f64::NEG_INFINITY, |a, &x| a.max(x as f64));
    let z: f64 = row.iter().map(|&x| (x as f64 - mx).exp()).sum();
    row[t] as f64 - mx - z.ln()
}

pub fn cross_entropy_forward(
    losses: &mut [f32],
    logits: &[f32],
    targets: &[i32],
    n: usize,
    v: usize,
    ignore_index: i32,
) -> (f64, usize) {
    let (mut sum, mut count) = (0.0f64, 0usize);
    for i in 0..n {
        if targets[i] == ignore_index {
            losses[i] = 0.0;
            continue;
        }
        losses[i] = -log_softmax_at(&logits[i * v..(i + 1) * v], targets[i] as usize) as f32;
        sum += losses[i] as f64;
        count += 1;
    }
    (sum, count)
}

pub fn cross_entropy_backward(
    dlogits: &mut [f32],
    logits: &[f32],
    targets: &[i32],
    n: usize,
    v: usize,
    ignore_index: i32,
    scale: f32,
) {
    let mut p = vec![0.0f32; v];
    for i in 0..n {
        if targets[i] == ignore_index {
            continue;
        }
        softmax_rows(&mut p, &logits[i * v..(i + 1) * v], 1, v);
        for j in 0..v {
            let y = if j == targets[i] as usize { 1.0 } else { 0.0 };
            dlogits[i * v + j] += ((p[j] as f64 - y) * scale as f64) as f32;
        }
    }
}

pub fn cross_entropy_fused(
    logits_to_dlogits: &mut [f32],
    losses: &mut [f32],
    targets: &[i32],
    n: usize,
    v: usize,
    ignore_index: i32,
    scale: f32,
) -> (f64, usize) {
    let logits = logits_to_dlogits.to_vec();
    let r = cross_entropy_forward(losses, &logits, targets, n, v, ignore_index);
    logits_to_dlogits.fill(0.0);
    cross_entropy_backward(
        logits_to_dlogits,
        &logits,
        targets,
        n,
        v,
        ignore_index,
        scale,
    );
    r
}

/// The unfused LM head: the whole `[N, V]` logits, then the loss. `scratch`
/// is unused (kept for the fast kernel's signature).
#[allow(clippy::too_many_arguments)]
pub fn lm_head_loss(
    _scratch: &mut [f32],
    losses: &mut [f32],
    x: &[f32],
    weight: &[f32],
    targets: &[i32],
    n: usize,
    c: usize,
    v: usize,
    ignore_index: i32,
) -> (f64, usize) {
    let mut logits = vec![0.0f32; n * v];
    matmul_forward(&mut logits, x, weight, None, n, c, v, WeightLayout::OutIn);
    cross_entropy_forward(losses, &logits, targets, n, v, ignore_index)
}

/// The unfused LM head and its backward: whole logits, their gradient, then
/// `dx += dlogits·W`, `dweight += dlogitsᵀ·x`.
#[allow(clippy::too_many_arguments)]
pub fn lm_head_loss_backward(
    _scratch: &mut [f32],
    losses: &mut [f32],
    dx: &mut [f32],
    dweight: &mut [f32],
    x: &[f32],
    weight: &[f32],
    targets: &[i32],
    n: usize,
    c: usize,
    v: usize,
    ignore_index: i32,
    scale: f32,
) -> (f64, usize) {
    let mut logits = vec![0.0f32; n * v];
    matmul_forward(&mut logits, x, weight, None, n, c, v, WeightLayout::OutIn);
    let r = cross_entropy_fused(&mut logits, losses, targets, n, v, ignore_index, scale);
    matmul_backward(
        Some(dx),
        Some(dweight),
        None,
        &logits,
        x,
        weight,
        n,
        c,
        v,
        WeightLayout::OutIn,
    );
    r
}

pub fn softmax_rows(out: &mut [f32], inp: &[f32], n: usize, v: usize) {
    for i in 0..n {
        let row = &inp[i * v..(i + 1) * v];
        let mx = row.iter().fold(f64::NEG_INFINITY, |a, &x| a.max(x as f64));
        let z: f64 = row.iter().map(|&x| (x as f64 - mx).exp()).sum();
        for j in 0..v {
            out[i * v + j] = ((row[j] as f64 - mx).exp() / z) as f32;
        }
    }
}

pub fn embeddings_forward(out: &mut [f32], lookups: &[(&[u32], &[f32])], c: usize) {
    let n = out.len() / c;
    for i in 0..n {
        for j in 0..c {
            let s: f64 = lookups
                .iter()
                .map(|(ids, table)| table[ids[i] as usize * c + j] as f64)
                .sum();
            out[i * c + j] = s as f32;
        }
    }
}

pub fn embedding_backward(dtable: &mut [f32], dout: &[f32], ids: &[u32], c: usize) {
    for (i, &id) in ids.iter().enumerate() {
        for j in 0..c {
            dtable[id as usize * c + j] += dout[i * c + j];
        }
    }
}

pub fn residual_forward(out: &mut [f32], a: &[f32], b: &[f32]) {
    for i in 0..out.len() {
        out[i] = a[i] + b[i];
    }
}

pub fn add_inplace(acc: &mut [f32], x: &[f32]) {
    for i in 0..acc.len() {
        acc[i] += x[i];
    }
}

pub fn scale_inplace(buf: &mut [f32], s: f32) {
    for x in buf.iter_mut() {
        *x *= s;
    }
}

/// The torch.optim.AdamW single-tensor step, written out line by line.
pub fn adamw_update(
    params: &mut [f32],
    grads: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    step: u64,
    cfg: &AdamW,
    decay: &[(Range<usize>, bool)],
) {
    // Python holds the hyper-parameters as f64 decimals: recover them.
    let f64_of = |x: f32| x.to_string().parse::<f64>().unwrap_or(x as f64);
    let (lr, beta1, beta2) = (f64_of(cfg.lr), f64_of(cfg.beta1), f64_of(cfg.beta2));
    let bias_correction1 = 1.0 - beta1.powi(step as i32);
    let bias_correction2 = 1.0 - beta2.powi(step as i32);
    let step_size = lr / bias_correction1;
    let bias_correction2_sqrt = bias_correction2.sqrt();
    for (r, wd) in decay {
        for i in r.clone() {
            if *wd {
                params[i] *= (1.0 - lr * f64_of(cfg.weight_decay)) as f32;
            }
            let g = grads[i];
            // exp_avg.lerp_(grad, 1 - beta1)  (an FMA in ATen)
            m[i] = ((1.0 - beta1) as f32).mul_add(g - m[i], m[i]);
            // exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
            v[i] = ((1.0 - beta2) as f32 * g).mul_add(g, v[i] * cfg.beta2);
            // denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
            let denom = v[i].sqrt() / bias_correction2_sqrt as f32 + cfg.eps;
            // param.addcdiv_(exp_avg, denom, value=-step_size)
            params[i] = (-step_size as f32).mul_add(m[i] / denom, params[i]);
        }
    }
}

pub fn global_norm(grads: &[f32]) -> f32 {
    grads
        .iter()
        .map(|&g| g as f64 * g as f64)
        .sum::<f64>()
        .sqrt() as f32
}
