//! The LM head fused with cross-entropy: the loss of `logits = x · Wᵀ`
//! against targets, and in training the gradients into `x` and `W`, without
//! ever holding the `[N, V]` logits (1.6 GB at N = 8·1024, V = 50257).
//!
//! Rows are taken a chunk at a time into a caller-owned `[R, V]` scratch
//! buffer: logits = x_chunk · Wᵀ, then per row the log-sum-exp and the loss;
//! in training the chunk is overwritten by its dlogits (as
//! [`cross_entropy_fused`]), then dx_chunk += dlogits · W and
//! dW += dlogitsᵀ · x_chunk. Each step is an existing kernel, parallel
//! inside; the chunks run one after another, so dW sums them in row order
//! and every result is the same bits for any thread count.
//!
//! Only rows with a target are computed: ignored rows (padding, prompts)
//! cost nothing and get loss 0 and no gradient.
//!
//! Shape legend: N rows (B·T), C channels, V vocabulary, R rows per chunk.

#[cfg(target_arch = "x86_64")]
use super::bf16_gemm::{lm_head_backward_bf16, Bf16Kernel, Bf16Rows};
use super::bf16_gemm::{matmul_backward_bf16, matmul_forward_bf16, Bf16Weight};
use super::matmul::{matmul_backward, matmul_forward, GradWrite, WeightLayout};
#[cfg(target_arch = "x86_64")]
use super::softmax::cross_entropy_fused_bf16;
use super::softmax::{cross_entropy_forward, cross_entropy_fused, total};
use crate::util::profile::{span, Phase};

/// Rows per chunk: the scratch is `R·V` floats (103 MB at R = 512,
/// V = 50257), against 1.6 GB of logits at N = 8·1024. Fewer rows make the
/// three products thinner (dW's has only R as its inner dimension, and each
/// chunk streams the 77 MB dW through memory once) and the LM head slower:
/// on 2 cores at N = 512, C = 768, V = 50257 the training variant took
/// 1.45× the unfused time at 64 rows, 1.19× at 128, 1.09× at 256 and 1.04×
/// at 512 (`cargo bench -p lmkit --bench kernels -- lm_head`); in the
/// bench's pretraining step (6×384, batch 4×256, 2 Zen 5 cores) 512 rather
/// than 256 took the LM head's products from 304 to 275 ms in f32, 150 to
/// 146 in bf16. The scratch stays about 2% of a 124M step's memory.
pub const LM_HEAD_CHUNK_ROWS: usize = 512;

/// Scratch floats the fused LM head needs for `n` rows of `v` classes:
/// `min(n, LM_HEAD_CHUNK_ROWS) · v`.
pub fn lm_head_scratch_len(n: usize, v: usize) -> usize {
    n.clamp(1, LM_HEAD_CHUNK_ROWS) * v
}

/// Gradients the training variant accumulates, and the loss's scale.
struct Grads<'a> {
    dx: &'a mut [f32],
    dweight: &'a mut [f32],
    scale: f32,
}

/// Forward only: `losses[i] = −log softmax(x[i] · Wᵀ)[targets[i]]`, 0 where
/// `targets[i] == ignore_index`; returns (Σ losses in f64, scored rows), as
/// [`cross_entropy_forward`] on the materialised logits would.
///
/// `scratch`: at least `v` floats; its length picks the chunk,
/// `scratch.len() / v` rows (see [`lm_head_scratch_len`]). `x` `[N, C]`,
/// `weight` `[V, C]` (`torch.nn.Linear` layout, e.g. a tied `wte`),
/// `targets` and `losses` `[N]`. Targets must be `ignore_index` or in `0..v`.
#[allow(clippy::too_many_arguments)]
pub fn lm_head_loss(
    scratch: &mut [f32],
    losses: &mut [f32],
    x: &[f32],
    weight: &[f32],
    targets: &[i32],
    n: usize,
    c: usize,
    v: usize,
    ignore_index: i32,
) -> (f64, usize) {
    run(
        scratch,
        losses,
        x,
        (weight, None),
        targets,
        [n, c, v],
        ignore_index,
        None,
    )
}

/// Training: the losses as [`lm_head_loss`], and with
/// `dlogits = scale·(softmax − onehot)` (0 on ignored rows), ACCUMULATES
/// `dx[N, C] += dlogits · W` and `dweight[V, C] += dlogitsᵀ · x`.
#[allow(clippy::too_many_arguments)]
pub fn lm_head_loss_backward(
    scratch: &mut [f32],
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
    lm_head_loss_backward_packed(
        scratch,
        losses,
        dx,
        dweight,
        x,
        (weight, None),
        targets,
        [n, c, v],
        ignore_index,
        scale,
    )
}

/// [`lm_head_loss_backward`] with the weight's three products in bf16
/// (operands rounded, f32 sums; mixed-precision training) when `weight.1`
/// holds its packed copy ([`Bf16Weight`] of `weight.0`, `[V, C]`,
/// [`WeightLayout::OutIn`]); the softmax and the loss stay f32.
#[allow(clippy::too_many_arguments)]
pub fn lm_head_loss_backward_packed(
    scratch: &mut [f32],
    losses: &mut [f32],
    dx: &mut [f32],
    dweight: &mut [f32],
    x: &[f32],
    weight: (&[f32], Option<&Bf16Weight>),
    targets: &[i32],
    [n, c, v]: [usize; 3],
    ignore_index: i32,
    scale: f32,
) -> (f64, usize) {
    assert_eq!(dx.len(), n * c, "lm_head_loss_backward: dx must be [N,C]");
    assert_eq!(
        dweight.len(),
        v * c,
        "lm_head_loss_backward: dweight must be [V,C]"
    );
    if let Some(p) = weight.1 {
        assert_eq!(p.shape(), (c, v), "lm_head: the packed weight is not [V,C]");
    }
    run(
        scratch,
        losses,
        x,
        weight,
        targets,
        [n, c, v],
        ignore_index,
        Some(Grads { dx, dweight, scale }),
    )
}

#[allow(clippy::too_many_arguments)]
fn run(
    scratch: &mut [f32],
    losses: &mut [f32],
    x: &[f32],
    (weight, packed): (&[f32], Option<&Bf16Weight>),
    targets: &[i32],
    [n, c, v]: [usize; 3],
    ignore_index: i32,
    mut grads: Option<Grads<'_>>,
) -> (f64, usize) {
    assert_eq!(losses.len(), n, "lm_head: losses must be [N]");
    assert_eq!(targets.len(), n, "lm_head: targets must be [N]");
    assert_eq!(x.len(), n * c, "lm_head: x must be [N,C]");
    assert_eq!(weight.len(), v * c, "lm_head: weight must be [V,C]");
    losses.fill(0.0);
    let scored: Vec<usize> = (0..n).filter(|&i| targets[i] != ignore_index).collect();
    if scored.is_empty() || v == 0 {
        return total(losses, targets, ignore_index);
    }
    assert!(
        scratch.len() >= v,
        "lm_head: scratch must hold at least one row of V"
    );
    let rows_per_chunk = scratch.len() / v;
    // Gathered rows of x and dx, for chunks whose rows are not contiguous.
    let cap = rows_per_chunk.min(scored.len());
    let mut xg = Vec::new();
    let mut dxg = Vec::new();
    let mut tg = vec![0i32; cap];
    let mut lg = vec![0.0f32; cap];
    for rows in scored.chunks(rows_per_chunk) {
        let r = rows.len();
        let first = rows[0];
        // Pretraining scores every row: use x and dx in place, no copy.
        let contiguous = rows[r - 1] - first == r - 1;
        let xs: &[f32] = if contiguous {
            &x[first * c..(first + r) * c]
        } else {
            xg.clear();
            for &i in rows {
                xg.extend_from_slice(&x[i * c..(i + 1) * c]);
            }
            &xg
        };
        for (t, &i) in tg.iter_mut().zip(rows) {
            *t = targets[i];
        }
        let (tg, lg) = (&tg[..r], &mut lg[..r]);
        let logits = &mut scratch[..r * v];
        // Products apart from the loss in `--profile`'s phases.
        let product = span(Phase::LmHeadMatmul);
        match packed {
            Some(pw) => matmul_forward_bf16(logits, xs, pw, None, r),
            None => matmul_forward(logits, xs, weight, None, r, c, v, WeightLayout::OutIn),
        }
        drop(product);
        match grads.as_mut() {
            None => {
                cross_entropy_forward(lg, logits, tg, r, v, ignore_index);
            }
            Some(g) => {
                let dxs: &mut [f32] = if contiguous {
                    &mut g.dx[first * c..(first + r) * c]
                } else {
                    dxg.clear();
                    dxg.resize(r * c, 0.0);
                    &mut dxg
                };
                // On the AVX-512 kernel the loss writes the bf16 dlogits the
                // products take (no f32 dlogits read back by two packers).
                #[cfg(target_arch = "x86_64")]
                if let Some(pw) = packed.filter(|p| p.kernel() == Bf16Kernel::Avx512) {
                    let mut dl = Bf16Rows::new(r, v);
                    let ld = dl.stride();
                    let out = dl.data_mut();
                    let shape = [r, v];
                    cross_entropy_fused_bf16(logits, out, ld, lg, tg, shape, ignore_index, g.scale);
                    let product = span(Phase::LmHeadMatmul);
                    lm_head_backward_bf16(dxs, &mut *g.dweight, &dl, xs, pw);
                    drop(product);
                    scatter_rows(rows, &dxg, contiguous, g.dx, c);
                    record(rows, lg, losses);
                    continue;
                }
                cross_entropy_fused(logits, lg, tg, r, v, ignore_index, g.scale);
                let product = span(Phase::LmHeadMatmul);
                match packed {
                    Some(pw) => matmul_backward_bf16(
                        Some((dxs, GradWrite::Add)),
                        Some(&mut *g.dweight),
                        None,
                        logits,
                        xs,
                        pw,
                        r,
                    ),
                    None => matmul_backward(
                        Some((dxs, GradWrite::Add)),
                        Some(&mut *g.dweight),
                        None,
                        logits,
                        xs,
                        weight,
                        r,
                        c,
                        v,
                        WeightLayout::OutIn,
                    ),
                }
                drop(product);
                scatter_rows(rows, &dxg, contiguous, g.dx, c);
            }
        }
        record(rows, lg, losses);
    }
    // Summed over all N rows in order, as the unfused path sums them.
    total(losses, targets, ignore_index)
}

/// Adds a gathered chunk's `dxg` rows into `dx` at `rows` (nothing when the
/// chunk's rows were used in place).
fn scatter_rows(rows: &[usize], dxg: &[f32], contiguous: bool, dx: &mut [f32], c: usize) {
    if !contiguous {
        for (&i, d) in rows.iter().zip(dxg.chunks_exact(c)) {
            for (o, d) in dx[i * c..(i + 1) * c].iter_mut().zip(d) {
                *o += d;
            }
        }
    }
}

/// The chunk's losses `lg` into `losses` at `rows`.
fn record(rows: &[usize], lg: &[f32], losses: &mut [f32]) {
    for (&i, &l) in rows.iter().zip(lg) {
        losses[i] = l;
    }
}
