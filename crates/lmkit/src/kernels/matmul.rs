//! Dense layers on the `gemm` crate: `out[N,OC] = inp[N,C]·W (+ bias)`, in
//! both weight layouts, forward and backward. Transposes are expressed as
//! strides; `gemm` packs operands itself.
//!
//! Shape legend: N rows (B·T), C input channels, OC output channels.

use super::rows_per_task;
use rayon::prelude::*;

/// How a weight matrix is stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WeightLayout {
    /// `W[C, OC]` (GPT-2's Conv1D): `out = inp · W`.
    InOut,
    /// `W[OC, C]` (`torch.nn.Linear`): `out = inp · Wᵀ`.
    OutIn,
}

/// How a backward kernel writes an input gradient: `Add` accumulates, as
/// every gradient does (`kernels`' convention); `Set` overwrites, for a
/// buffer that holds no gradient yet, which saves zeroing it first (a
/// GPT-2 step at batch 4×256, d 384 zeroed ~100 MB that way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradWrite {
    Add,
    Set,
}

/// Products below this many multiply-adds run on one thread: rayon's hand-off
/// costs more than it saves.
const PAR_MIN_MACS: usize = 1 << 20;

/// A strided matrix view: element (r, c) lives at `data[r·rs + c·cs]`.
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    pub data: &'a [f32],
    pub rs: usize,
    pub cs: usize,
}

/// Largest index touched by a rows×cols view with these strides, plus one.
pub(crate) fn extent(rows: usize, cols: usize, rs: usize, cs: usize) -> usize {
    (rows - 1) * rs + (cols - 1) * cs + 1
}

/// `dst[m,n] = (accumulate ? dst : 0) + scale · lhs[m,k] · rhs[k,n]`, with bounds
/// checked on the strided views. `parallel` lets `gemm` use the rayon pool.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_into(
    dst: &mut [f32],
    dst_rs: usize,
    dst_cs: usize,
    accumulate: bool,
    lhs: View<'_>,
    rhs: View<'_>,
    m: usize,
    n: usize,
    k: usize,
    scale: f32,
    parallel: bool,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        dst.len() >= extent(m, n, dst_rs, dst_cs),
        "gemm: dst too small"
    );
    if k == 0 {
        if !accumulate {
            for r in 0..m {
                for c in 0..n {
                    dst[r * dst_rs + c * dst_cs] = 0.0;
                }
            }
        }
        return;
    }
    // SAFETY: dst was bounds-checked above and is uniquely borrowed.
    unsafe {
        gemm_to_ptr(
            dst.as_mut_ptr(),
            dst_rs,
            dst_cs,
            accumulate,
            lhs,
            rhs,
            m,
            n,
            k,
            scale,
            parallel,
        )
    }
}

/// [`gemm_into`] with a raw destination, for tasks that write disjoint
/// elements of one buffer (attention heads). Operands are bounds-checked.
///
/// # Safety
/// Every `dst[r·dst_rs + c·dst_cs]` for r < m, c < n must be valid for writes
/// and not accessed concurrently by anyone else; `m, n, k > 0`.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_to_ptr(
    dst: *mut f32,
    dst_rs: usize,
    dst_cs: usize,
    accumulate: bool,
    lhs: View<'_>,
    rhs: View<'_>,
    m: usize,
    n: usize,
    k: usize,
    scale: f32,
    parallel: bool,
) {
    debug_assert!(m > 0 && n > 0 && k > 0);
    assert!(
        lhs.data.len() >= extent(m, k, lhs.rs, lhs.cs),
        "gemm: lhs too small"
    );
    assert!(
        rhs.data.len() >= extent(k, n, rhs.rs, rhs.cs),
        "gemm: rhs too small"
    );
    let threads = rayon::current_num_threads();
    let par = if parallel && threads > 1 && m * n * k >= PAR_MIN_MACS {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: operands bounds-checked above; dst is the caller's promise.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            dst_cs as isize,
            dst_rs as isize,
            accumulate,
            lhs.data.as_ptr(),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr(),
            rhs.cs as isize,
            rhs.rs as isize,
            1.0,
            scale,
            false,
            false,
            false,
            par,
        );
    }
}

/// `W` viewed as the `[C, OC]` right operand of the forward product.
fn weight_view(weight: &[f32], c: usize, oc: usize, layout: WeightLayout) -> View<'_> {
    match layout {
        WeightLayout::InOut => View {
            data: weight,
            rs: oc,
            cs: 1,
        },
        WeightLayout::OutIn => View {
            data: weight,
            rs: 1,
            cs: c,
        },
    }
}

/// `out[N,OC] = inp[N,C]·W (+ bias[OC])`.
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
    assert_eq!(out.len(), n * oc, "matmul_forward: out must be [N,OC]");
    assert_eq!(inp.len(), n * c, "matmul_forward: inp must be [N,C]");
    assert_eq!(
        weight.len(),
        c * oc,
        "matmul_forward: weight must hold C·OC"
    );
    if let Some(b) = bias {
        assert_eq!(b.len(), oc, "matmul_forward: bias must be [OC]");
        // Seed every row with the bias and let gemm accumulate onto it.
        if oc > 0 {
            out.par_chunks_mut(oc * rows_per_task(oc)).for_each(|rows| {
                for row in rows.chunks_exact_mut(oc) {
                    row.copy_from_slice(b);
                }
            });
        }
    }
    gemm_into(
        out,
        oc,
        1,
        bias.is_some(),
        View {
            data: inp,
            rs: c,
            cs: 1,
        },
        weight_view(weight, c, oc, layout),
        n,
        oc,
        c,
        1.0,
        true,
    );
}

/// `dinp[N,C] += dout·Wᵀ` (`=` with [`GradWrite::Set`]); `dweight +=
/// inpᵀ·dout` (in W's own layout); `dbias[OC] += Σ_rows dout`. Each gradient
/// is optional.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward(
    dinp: Option<(&mut [f32], GradWrite)>,
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
    assert_eq!(dout.len(), n * oc, "matmul_backward: dout must be [N,OC]");
    assert_eq!(inp.len(), n * c, "matmul_backward: inp must be [N,C]");
    assert_eq!(
        weight.len(),
        c * oc,
        "matmul_backward: weight must hold C·OC"
    );
    // The input and weight gradients are independent products: run them side
    // by side (each may still split further), which keeps both cores busy on
    // mid-sized layers where one gemm alone scales poorly.
    let input_grad = move || {
        if let Some((dinp, write)) = dinp {
            assert_eq!(dinp.len(), n * c, "matmul_backward: dinp must be [N,C]");
            // Set as zeroing then accumulating: the `gemm` crate writing a
            // destination it does not read made the bench's f32 GPT-2 step
            // slower (block products 153.9-156.3 -> 156.3-160.9 ms, 2 Zen 5
            // threads), where zeroing first leaves it in cache. (The bf16
            // kernel gains from Set: matmul_backward_bf16.)
            if write == GradWrite::Set {
                dinp.fill(0.0);
            }
            // Wᵀ as a [OC, C] operand.
            let wt = match layout {
                WeightLayout::InOut => View {
                    data: weight,
                    rs: 1,
                    cs: oc,
                },
                WeightLayout::OutIn => View {
                    data: weight,
                    rs: c,
                    cs: 1,
                },
            };
            gemm_into(
                dinp,
                c,
                1,
                true,
                View {
                    data: dout,
                    rs: oc,
                    cs: 1,
                },
                wt,
                n,
                c,
                oc,
                1.0,
                true,
            );
        }
    };
    let weight_grads = move || {
        if let Some(dw) = dweight {
            assert_eq!(dw.len(), c * oc, "matmul_backward: dweight must hold C·OC");
            match layout {
                // dW[C,OC] += inpᵀ[C,N]·dout[N,OC]
                WeightLayout::InOut => gemm_into(
                    dw,
                    oc,
                    1,
                    true,
                    View {
                        data: inp,
                        rs: 1,
                        cs: c,
                    },
                    View {
                        data: dout,
                        rs: oc,
                        cs: 1,
                    },
                    c,
                    oc,
                    n,
                    1.0,
                    true,
                ),
                // dW[OC,C] += doutᵀ[OC,N]·inp[N,C]
                WeightLayout::OutIn => gemm_into(
                    dw,
                    c,
                    1,
                    true,
                    View {
                        data: dout,
                        rs: 1,
                        cs: oc,
                    },
                    View {
                        data: inp,
                        rs: c,
                        cs: 1,
                    },
                    oc,
                    c,
                    n,
                    1.0,
                    true,
                ),
            }
        }
        if let Some(db) = dbias {
            assert_eq!(db.len(), oc, "matmul_backward: dbias must be [OC]");
            col_sums_into(db, dout, n, oc);
        }
    };
    rayon::join(input_grad, weight_grads);
}

/// `acc[j] += Σ_i m[i, j]` for a row-major `m[N, OC]`. Columns are split
/// between tasks and every column is summed in row order: deterministic for
/// any thread count.
pub(crate) fn col_sums_into(acc: &mut [f32], m: &[f32], n: usize, oc: usize) {
    const COLS: usize = 256;
    let body = |ci: usize, acc: &mut [f32]| {
        let c0 = ci * COLS;
        let w = acc.len();
        super::simd::dispatch(
            #[inline(always)]
            || {
                for i in 0..n {
                    let row = &m[i * oc + c0..i * oc + c0 + w];
                    for (a, x) in acc.iter_mut().zip(row) {
                        *a += *x;
                    }
                }
            },
        );
    };
    if n * oc >= 1 << 15 {
        acc.par_chunks_mut(COLS)
            .enumerate()
            .for_each(|(ci, a)| body(ci, a));
    } else {
        acc.chunks_mut(COLS)
            .enumerate()
            .for_each(|(ci, a)| body(ci, a));
    }
}
