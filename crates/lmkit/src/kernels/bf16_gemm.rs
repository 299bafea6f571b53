//! bf16 matmuls with f32 accumulation: the products of mixed-precision
//! training and of BERT's bf16 inference.
//!
//! Operands are rounded to bf16 (round to nearest even, as torch's
//! `.to(torch.bfloat16)`); products of bf16 pairs are summed in f32 and the
//! results stay f32 (AVX-512 BF16 `vdpbf16ps`: two multiply-adds per lane
//! per instruction, twice the f32 FMA rate). Where the CPU lacks AVX-512
//! BF16, the same rounded operands go through the f32 `gemm` path: the same
//! numbers up to summation order, so every test runs on every machine.
//!
//! Shape legend: N rows (B·T), C input channels, OC output channels; in the
//! general product `C[M,N'] (+)= A[M,K]·B[K,N']`; MR×NR the register tile
//! (14 rows × 32 columns), KC the K block.
//!
//! Packed layouts (K padded to even with zeros):
//! - A ([`PackedA`]): strips of MR rows, row-major within a strip (each row
//!   `kp` bf16s, so the pair `(A[r,k], A[r,k+1])` is one 32-bit word the
//!   kernel broadcasts); rows padded to a multiple of MR with zeros.
//! - B ([`PackedB`]): panels of NR columns; within a panel, for each pair of
//!   K (k, k+1), NR pairs `(B[k,j], B[k+1,j])` — the operand `vdpbf16ps`
//!   multiplies against a broadcast pair of A. Columns padded with zeros.
//!
//! Every output element is summed by one task in K order: results do not
//! depend on the thread count.

use rayon::prelude::*;

use super::matmul::{col_sums_into, extent};
use super::{matmul_backward, matmul_forward, WeightLayout};
use crate::util::bf16::{bf16_to_f32, f32_to_bf16};
use crate::util::parallel::SendPtr;

/// Rows of the register tile.
const MR: usize = 14;
/// Columns of the register tile (two 16-lane vectors).
const NR: usize = 32;
/// K per block (even): a B panel block (KC·NR bf16 = 32 KiB) stays in L1
/// while the A strips of a task (8 × MR·KC bf16 = 112 KiB, L2) pass by.
const KC: usize = 512;
/// Row strips and column panels per parallel task.
const STRIPS_PER_TASK: usize = 8;
const PANELS_PER_TASK: usize = 8;

/// Whether this CPU runs the AVX-512 BF16 kernel.
pub fn has_avx512bf16() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vl")
            && std::arch::is_x86_feature_detected!("avx512bf16")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `M×K` f32 elements at `data[r·rs + c·cs]`.
#[derive(Clone, Copy)]
struct Src<'a> {
    data: &'a [f32],
    rs: usize,
    cs: usize,
}

impl Src<'_> {
    /// The transpose: `K×M` of the same elements.
    fn t(self) -> Self {
        Src {
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    fn check(&self, rows: usize, cols: usize, what: &str) {
        if rows > 0 && cols > 0 {
            assert!(
                self.data.len() >= extent(rows, cols, self.rs, self.cs),
                "bf16 gemm: {what} too small"
            );
        }
    }
}

/// The left operand `A[M,K]` in bf16, packed in MR-row strips.
struct PackedA {
    m: usize,
    kp: usize,
    /// `[ceil(M/MR)·MR][kp]`.
    data: Vec<u16>,
}

impl PackedA {
    fn pack(src: Src<'_>, m: usize, k: usize) -> PackedA {
        src.check(m, k, "A");
        let kp = k + (k & 1);
        let mut data = vec![0u16; m.div_ceil(MR) * MR * kp];
        data.par_chunks_mut(MR * kp)
            .enumerate()
            .for_each(|(s, strip)| {
                let rows = MR.min(m - s * MR);
                if src.cs == 1 {
                    for r in 0..rows {
                        let at = (s * MR + r) * src.rs;
                        convert_row(&mut strip[r * kp..r * kp + k], &src.data[at..at + k]);
                    }
                } else {
                    // Transposed source (columns contiguous): walk it by its rows.
                    for kk in 0..k {
                        for r in 0..rows {
                            let x = src.data[(s * MR + r) * src.rs + kk * src.cs];
                            strip[r * kp + kk] = f32_to_bf16(x);
                        }
                    }
                }
            });
        PackedA { m, kp, data }
    }
}

/// The right operand `B[K,N']` in bf16, packed in NR-column panels.
#[derive(Debug, Clone)]
struct PackedB {
    n: usize,
    kp: usize,
    /// `[ceil(N'/NR)][kp/2][NR][2]`.
    data: Vec<u16>,
}

impl PackedB {
    fn pack(src: Src<'_>, k: usize, n: usize) -> PackedB {
        src.check(k, n, "B");
        let kp = k + (k & 1);
        let mut data = vec![0u16; n.div_ceil(NR) * kp * NR];
        data.par_chunks_mut(kp * NR)
            .enumerate()
            .for_each(|(p, panel)| {
                let cols = NR.min(n - p * NR);
                let at = |kk: usize, j: usize| (kk / 2) * NR * 2 + j * 2 + (kk & 1);
                if src.cs == 1 {
                    for kk in 0..k {
                        let row = &src.data[kk * src.rs + p * NR..][..cols];
                        for (j, &x) in row.iter().enumerate() {
                            panel[at(kk, j)] = f32_to_bf16(x);
                        }
                    }
                } else {
                    for j in 0..cols {
                        for kk in 0..k {
                            let x = src.data[kk * src.rs + (p * NR + j) * src.cs];
                            panel[at(kk, j)] = f32_to_bf16(x);
                        }
                    }
                }
            });
        PackedB { n, kp, data }
    }
}

/// `c[M,N'] = (accumulate ? c : 0) + A·B` with row stride `ldc`.
///
/// # Safety
/// AVX-512 BF16 must be present.
#[cfg(target_arch = "x86_64")]
unsafe fn gemm_packed(c: &mut [f32], ldc: usize, accumulate: bool, a: &PackedA, b: &PackedB) {
    let (m, n, kp) = (a.m, b.n, a.kp);
    assert_eq!(kp, b.kp, "bf16 gemm: inner dimensions differ");
    if m == 0 || n == 0 {
        return;
    }
    assert!(c.len() >= extent(m, n, ldc, 1), "bf16 gemm: C too small");
    if kp == 0 {
        if !accumulate {
            for r in 0..m {
                c[r * ldc..r * ldc + n].fill(0.0);
            }
        }
        return;
    }
    let strips = m.div_ceil(MR);
    let panels = n.div_ceil(NR);
    let (rgroups, cgroups) = (
        strips.div_ceil(STRIPS_PER_TASK),
        panels.div_ceil(PANELS_PER_TASK),
    );
    let c_ptr = SendPtr(c.as_mut_ptr());
    (0..rgroups * cgroups).into_par_iter().for_each(|task| {
        let (rg, cg) = (task / cgroups, task % cgroups);
        let s_range = rg * STRIPS_PER_TASK..((rg + 1) * STRIPS_PER_TASK).min(strips);
        let p_range = cg * PANELS_PER_TASK..((cg + 1) * PANELS_PER_TASK).min(panels);
        let mut tmp = [0f32; MR * NR];
        for k0 in (0..kp).step_by(KC) {
            let k1 = (k0 + KC).min(kp);
            let load = accumulate || k0 > 0;
            for p in p_range.clone() {
                let panel = &b.data[p * kp * NR + k0 * NR..];
                let cols = NR.min(n - p * NR);
                for s in s_range.clone() {
                    let r0 = s * MR;
                    let rows = MR.min(m - r0);
                    let strip = &a.data[r0 * kp + k0..];
                    // SAFETY: the tile's rows r0.. and columns p·NR.. lie
                    // inside C (checked above, or narrowed through `tmp`),
                    // and only this task writes them; `strip` and `panel`
                    // hold MR rows / NR columns of k1 - k0 values.
                    unsafe {
                        let dst = c_ptr.get().add(r0 * ldc + p * NR);
                        if rows == MR && cols == NR {
                            tile_kernel(strip, kp, panel, (k1 - k0) / 2, dst, ldc, load);
                        } else {
                            for r in 0..rows {
                                for j in 0..cols {
                                    tmp[r * NR + j] =
                                        if load { *dst.add(r * ldc + j) } else { 0.0 };
                                }
                            }
                            tile_kernel(
                                strip,
                                kp,
                                panel,
                                (k1 - k0) / 2,
                                tmp.as_mut_ptr(),
                                NR,
                                true,
                            );
                            for r in 0..rows {
                                std::ptr::copy_nonoverlapping(
                                    tmp.as_ptr().add(r * NR),
                                    dst.add(r * ldc),
                                    cols,
                                );
                            }
                        }
                    }
                }
            }
        }
    });
}

/// One MR×NR tile over `pairs` pairs of K: `c[r, j] = (load ? c[r, j] : 0)
/// + Σ_k a[r,k]·panel[k,j]`.
///
/// # Safety
/// AVX-512 BF16 must be present; `a` holds MR rows with row stride `kp`
/// bf16s (each with `2·pairs` values), `panel` `2·pairs·NR` bf16s, `c` an
/// MR×NR tile with row stride `ldc` floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
unsafe fn tile_kernel(
    a: &[u16],
    kp: usize,
    panel: &[u16],
    pairs: usize,
    c: *mut f32,
    ldc: usize,
    load: bool,
) {
    use std::arch::x86_64::*;
    debug_assert!(a.len() >= (MR - 1) * kp + 2 * pairs && panel.len() >= 2 * pairs * NR);
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    if load {
        for (r, acc_r) in acc.iter_mut().enumerate() {
            acc_r[0] = _mm512_loadu_ps(c.add(r * ldc));
            acc_r[1] = _mm512_loadu_ps(c.add(r * ldc + 16));
        }
    }
    let ap = a.as_ptr() as *const i32;
    let bp = panel.as_ptr();
    let lda = kp / 2; // in i32 (pairs)
    for p in 0..pairs {
        let w0: __m512bh = std::mem::transmute(_mm512_loadu_si512(bp.add(p * NR * 2) as *const _));
        let w1: __m512bh =
            std::mem::transmute(_mm512_loadu_si512(bp.add(p * NR * 2 + 32) as *const _));
        for (r, acc_r) in acc.iter_mut().enumerate() {
            let x: __m512bh =
                std::mem::transmute(_mm512_set1_epi32((ap.add(r * lda + p)).read_unaligned()));
            acc_r[0] = _mm512_dpbf16_ps(acc_r[0], x, w0);
            acc_r[1] = _mm512_dpbf16_ps(acc_r[1], x, w1);
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        _mm512_storeu_ps(c.add(r * ldc), acc_r[0]);
        _mm512_storeu_ps(c.add(r * ldc + 16), acc_r[1]);
    }
}

/// One row f32 → bf16, round to nearest even.
fn convert_row(dst: &mut [u16], src: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512bf16() {
        // SAFETY: the feature was just detected.
        unsafe { convert_row_avx512(dst, src) };
        return;
    }
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = f32_to_bf16(s);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
unsafe fn convert_row_avx512(dst: &mut [u16], src: &[f32]) {
    use std::arch::x86_64::*;
    let k = src.len().min(dst.len());
    let mut i = 0;
    while i + 32 <= k {
        let lo = _mm512_loadu_ps(src.as_ptr().add(i));
        let hi = _mm512_loadu_ps(src.as_ptr().add(i + 16));
        let v = _mm512_cvtne2ps_pbh(hi, lo);
        _mm512_storeu_si512(
            dst.as_mut_ptr().add(i) as *mut _,
            std::mem::transmute::<__m512bh, __m512i>(v),
        );
        i += 32;
    }
    while i < k {
        dst[i] = f32_to_bf16(src[i]);
        i += 1;
    }
}

/// `x` rounded to bf16 and back to f32 (the portable path's operands).
fn rounded(x: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    out.par_chunks_mut(1 << 14)
        .zip(x.par_chunks(1 << 14))
        .for_each(|(d, s)| {
            for (d, &s) in d.iter_mut().zip(s) {
                *d = bf16_to_f32(f32_to_bf16(s));
            }
        });
    out
}

/// Which implementation a [`Bf16Weight`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bf16Kernel {
    /// Packed operands through `vdpbf16ps` (the CPU must have AVX-512 BF16).
    Avx512,
    /// bf16-rounded operands through the f32 gemm: any CPU, the same numbers
    /// up to summation order.
    Portable,
}

impl Bf16Kernel {
    /// The fastest this CPU has.
    pub fn detect() -> Bf16Kernel {
        if has_avx512bf16() {
            Bf16Kernel::Avx512
        } else {
            Bf16Kernel::Portable
        }
    }
}

#[derive(Debug, Clone)]
enum Packed {
    /// `fwd`: W as the `[C,OC]` right operand of `Y = X·W`; `bwd`: W as the
    /// `[OC,C]` right operand of `dX = dY·Wᵀ` (absent when packed for
    /// inference only).
    Avx512 { fwd: PackedB, bwd: Option<PackedB> },
    /// W rounded to bf16, in f32, in its own layout.
    Portable(Vec<f32>),
}

/// A weight `W` (`[C,OC]` Conv1D or `[OC,C]` `nn.Linear`, [`WeightLayout`])
/// rounded to bf16 and packed for the products of a training step: pack it
/// once per optimizer step, use it for every micro-batch's forward and
/// input gradient.
#[derive(Debug, Clone)]
pub struct Bf16Weight {
    c: usize,
    oc: usize,
    layout: WeightLayout,
    packed: Packed,
}

impl Bf16Weight {
    /// Packs `weight` for forward and backward with the CPU's fastest kernel.
    pub fn pack(weight: &[f32], c: usize, oc: usize, layout: WeightLayout) -> Bf16Weight {
        Self::pack_with(weight, c, oc, layout, Bf16Kernel::detect(), true)
    }

    /// Packs `weight` for `kernel` (for the backward too with `backward`).
    /// Panics when `kernel` is [`Bf16Kernel::Avx512`] on a CPU without it.
    pub fn pack_with(
        weight: &[f32],
        c: usize,
        oc: usize,
        layout: WeightLayout,
        kernel: Bf16Kernel,
        backward: bool,
    ) -> Bf16Weight {
        assert_eq!(weight.len(), c * oc, "Bf16Weight: weight must hold C·OC");
        let packed = match kernel {
            Bf16Kernel::Avx512 => {
                assert!(has_avx512bf16(), "Bf16Weight: this CPU lacks AVX-512 BF16");
                // W as [C,OC] (fwd) and [OC,C] (bwd) views of its buffer.
                let (as_c_oc, as_oc_c) = match layout {
                    WeightLayout::InOut => ((oc, 1), (1, oc)),
                    WeightLayout::OutIn => ((1, c), (c, 1)),
                };
                let view = |(rs, cs)| Src {
                    data: weight,
                    rs,
                    cs,
                };
                Packed::Avx512 {
                    fwd: PackedB::pack(view(as_c_oc), c, oc),
                    bwd: backward.then(|| PackedB::pack(view(as_oc_c), oc, c)),
                }
            }
            Bf16Kernel::Portable => Packed::Portable(rounded(weight)),
        };
        Bf16Weight {
            c,
            oc,
            layout,
            packed,
        }
    }

    /// The kernel this weight runs on.
    pub fn kernel(&self) -> Bf16Kernel {
        match self.packed {
            Packed::Avx512 { .. } => Bf16Kernel::Avx512,
            Packed::Portable(_) => Bf16Kernel::Portable,
        }
    }

    /// `(C, OC)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.c, self.oc)
    }
}

/// `out[N,OC] = bf16(inp[N,C])·bf16(W) (+ bias[OC])`, summed in f32.
pub fn matmul_forward_bf16(
    out: &mut [f32],
    inp: &[f32],
    w: &Bf16Weight,
    bias: Option<&[f32]>,
    n: usize,
) {
    let (c, oc) = (w.c, w.oc);
    assert_eq!(out.len(), n * oc, "matmul_forward_bf16: out must be [N,OC]");
    assert_eq!(inp.len(), n * c, "matmul_forward_bf16: inp must be [N,C]");
    match &w.packed {
        Packed::Portable(wr) => {
            matmul_forward(out, &rounded(inp), wr, bias, n, c, oc, w.layout);
        }
        #[cfg(target_arch = "x86_64")]
        Packed::Avx512 { fwd, .. } => {
            if let Some(b) = bias {
                assert_eq!(b.len(), oc, "matmul_forward_bf16: bias must be [OC]");
                if oc > 0 {
                    out.par_chunks_mut(oc * super::rows_per_task(oc))
                        .for_each(|rows| {
                            rows.chunks_exact_mut(oc).for_each(|r| r.copy_from_slice(b))
                        });
                }
            }
            let a = PackedA::pack(
                Src {
                    data: inp,
                    rs: c,
                    cs: 1,
                },
                n,
                c,
            );
            // SAFETY: an Avx512 weight is only made where the CPU has it.
            unsafe { gemm_packed(out, oc, bias.is_some(), &a, fwd) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        Packed::Avx512 { .. } => unreachable!("Avx512 weights are x86-64 only"),
    }
}

/// `dinp[N,C] += bf16(dout)·bf16(W)ᵀ`; `dweight += bf16(inp)ᵀ·bf16(dout)` (in
/// W's own layout); `dbias[OC] += Σ_rows dout` (in f32, unrounded). Each
/// gradient is optional; the input gradient needs a weight packed with
/// `backward`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_bf16(
    dinp: Option<&mut [f32]>,
    dweight: Option<&mut [f32]>,
    dbias: Option<&mut [f32]>,
    dout: &[f32],
    inp: &[f32],
    w: &Bf16Weight,
    n: usize,
) {
    let (c, oc, layout) = (w.c, w.oc, w.layout);
    assert_eq!(
        dout.len(),
        n * oc,
        "matmul_backward_bf16: dout must be [N,OC]"
    );
    assert_eq!(inp.len(), n * c, "matmul_backward_bf16: inp must be [N,C]");
    if let Some(db) = dbias {
        assert_eq!(db.len(), oc, "matmul_backward_bf16: dbias must be [OC]");
        col_sums_into(db, dout, n, oc);
    }
    match &w.packed {
        Packed::Portable(wr) => {
            let (dout_r, inp_r) = rayon::join(|| rounded(dout), || rounded(inp));
            matmul_backward(dinp, dweight, None, &dout_r, &inp_r, wr, n, c, oc, layout);
        }
        #[cfg(target_arch = "x86_64")]
        Packed::Avx512 { bwd, .. } => {
            let input_grad = || {
                if let Some(dinp) = dinp {
                    assert_eq!(
                        dinp.len(),
                        n * c,
                        "matmul_backward_bf16: dinp must be [N,C]"
                    );
                    let bwd = bwd
                        .as_ref()
                        .expect("matmul_backward_bf16: the weight was packed without `backward`");
                    let a = PackedA::pack(
                        Src {
                            data: dout,
                            rs: oc,
                            cs: 1,
                        },
                        n,
                        oc,
                    );
                    // SAFETY: an Avx512 weight is only made where the CPU has it.
                    unsafe { gemm_packed(dinp, c, true, &a, bwd) };
                }
            };
            let weight_grad = || {
                if let Some(dw) = dweight {
                    assert_eq!(
                        dw.len(),
                        c * oc,
                        "matmul_backward_bf16: dweight must hold C·OC"
                    );
                    let x = Src {
                        data: inp,
                        rs: c,
                        cs: 1,
                    };
                    let dy = Src {
                        data: dout,
                        rs: oc,
                        cs: 1,
                    };

                    let (a, b, ldc) = match layout {
                        // dW[C,OC] += Xᵀ[C,N]·dY[N,OC]
                        WeightLayout::InOut => {
                            (PackedA::pack(x.t(), c, n), PackedB::pack(dy, n, oc), oc)
                        }
                        // dW[OC,C] += dYᵀ[OC,N]·X[N,C]
                        WeightLayout::OutIn => {
                            (PackedA::pack(dy.t(), oc, n), PackedB::pack(x, n, c), c)
                        }
                    };
                    // SAFETY: as above.
                    unsafe { gemm_packed(dw, ldc, true, &a, &b) };
                }
            };
            rayon::join(input_grad, weight_grad);
        }
        #[cfg(not(target_arch = "x86_64"))]
        Packed::Avx512 { .. } => unreachable!("Avx512 weights are x86-64 only"),
    }
}

/// An `nn.Linear` weight `[OC,K]` and its bias, in bf16 for inference (BERT's
/// encoder): `out[N,OC] = bf16(inp[N,K])·Wᵀ + b`.
#[derive(Debug, Clone)]
pub struct PackedBf16 {
    w: Bf16Weight,
    bias: Option<Vec<f32>>,
}

impl PackedBf16 {
    /// Packs `w[OC,K]` (row-major, `nn.Linear` layout) and its bias.
    pub fn pack(w: &[f32], bias: Option<&[f32]>, oc: usize, k: usize) -> PackedBf16 {
        Self::pack_for(w, bias, oc, k, false)
    }

    /// [`Self::pack`], also for the input gradient with `backward`
    /// (training: [`Self::weight`] goes to [`matmul_backward_bf16`]).
    pub fn pack_for(
        w: &[f32],
        bias: Option<&[f32]>,
        oc: usize,
        k: usize,
        backward: bool,
    ) -> PackedBf16 {
        assert_eq!(w.len(), oc * k, "PackedBf16::pack: weight must be [OC,K]");
        if let Some(b) = bias {
            assert_eq!(b.len(), oc, "PackedBf16::pack: bias must be [OC]");
        }
        PackedBf16 {
            w: Bf16Weight::pack_with(
                w,
                k,
                oc,
                WeightLayout::OutIn,
                Bf16Kernel::detect(),
                backward,
            ),
            bias: bias.map(<[f32]>::to_vec),
        }
    }

    /// The packed weight.
    pub fn weight(&self) -> &Bf16Weight {
        &self.w
    }

    /// `out[N,OC] = bf16(inp[N,K])·Wᵀ + b`.
    pub fn forward(&self, out: &mut [f32], inp: &[f32], n: usize) {
        matmul_forward_bf16(out, inp, &self.w, self.bias.as_deref(), n);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The packed forward against a plain f64 product of the bf16-rounded
    /// operands, over shapes with row, column and K tails.
    #[test]
    fn packed_matches_reference() {
        for &(n, k, oc) in &[
            (1, 1, 1),
            (14, 32, 32),
            (29, 37, 70),
            (3, 64, 33),
            (40, 96, 64),
            (5, 1100, 40),
        ] {
            let w: Vec<f32> = (0..oc * k)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
                .collect();
            let x: Vec<f32> = (0..n * k)
                .map(|i| ((i * 53 % 89) as f32 - 44.0) / 30.0)
                .collect();
            let b: Vec<f32> = (0..oc).map(|i| i as f32 * 0.1).collect();
            let packed = PackedBf16::pack(&w, Some(&b), oc, k);
            let mut out = vec![f32::NAN; n * oc];
            packed.forward(&mut out, &x, n);
            let r = |v: f32| bf16_to_f32(f32_to_bf16(v)) as f64;
            for row in 0..n {
                for col in 0..oc {
                    let want: f64 = b[col] as f64
                        + (0..k)
                            .map(|kk| r(x[row * k + kk]) * r(w[col * k + kk]))
                            .sum::<f64>();
                    let got = out[row * oc + col] as f64;
                    assert!(
                        (got - want).abs() < 1e-4 * (1.0 + want.abs()) * (k as f64).sqrt(),
                        "{n}x{k}x{oc} [{row},{col}]: {got} vs {want}"
                    );
                }
            }
        }
    }
}
