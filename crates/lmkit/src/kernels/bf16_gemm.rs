//! bf16 matmuls with f32 accumulation: the products of mixed-precision
//! training and of BERT's bf16 inference.
//!
//! Operands are rounded to bf16 (round to nearest even, as torch's
//! `.to(torch.bfloat16)`); products of bf16 pairs are summed in f32 and the
//! results stay f32 (AVX-512 BF16 `vdpbf16ps`: two multiply-adds per lane
//! per instruction, twice the f32 FMA rate where it issues as fast as an
//! FMA). Where the CPU lacks AVX-512 BF16, or its `vdpbf16ps` is slower
//! than f32 FMAs ([`bf16_dot_is_fast`]), the same rounded operands go
//! through the f32 `gemm` path: the same numbers up to summation order, so
//! every test runs on every machine.
//!
//! Shape legend: N rows (B·T), C input channels, OC output channels; in the
//! general product `C[M,N'] (+)= A[M,K]·B[K,N']`; MR×NR the register tile
//! (14 rows × 32 columns), KC the K block.
//!
//! Packed layouts (K padded to even with zeros):
//! - A (`PackedA`): strips of MR rows, row-major within a strip (each row
//!   `kp` bf16s, so the pair `(A[r,k], A[r,k+1])` is one 32-bit word the
//!   kernel broadcasts); rows padded to a multiple of MR with zeros. A
//!   transposed source (a weight gradient's `Xᵀ` or `dYᵀ`, whose MR rows are
//!   contiguous for each k) packs pair-major instead, `[kp/2][MR][2]`: two
//!   masked loads and one interleave per K pair rather than a transpose; the
//!   kernel reads either through a (row, pair) stride.
//! - B (`PackedB`): panels of NR columns; within a panel, for each pair of
//!   K (k, k+1), NR pairs `(B[k,j], B[k+1,j])` — the operand `vdpbf16ps`
//!   multiplies against a broadcast pair of A. Columns padded with zeros.
//!
//! Packing converts 32 floats per instruction (`vcvtne2ps2bf16`: the
//! rounding of [`f32_to_bf16`], but f32 denormals, below 1.2e-38, become
//! zero) on CPUs with the kernel; the scalar twins lay out the same bits.
//!
//! Every output element is summed by one task in K order: results do not
//! depend on the thread count.

use rayon::prelude::*;

use super::matmul::{col_sums_into, extent, View};

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod heads;
mod refresh;
#[cfg(target_arch = "x86_64")]
mod rows;
use super::activation::gelu_tile;
use super::quant::{to_bf16_at, SourceLayout};
use super::Gelu;
use super::{matmul_backward, matmul_forward, GradWrite, WeightLayout};
use crate::util::bf16::{bf16_to_f32, f32_to_bf16};
use crate::util::parallel::SendPtr;
#[cfg(target_arch = "x86_64")]
pub use amx::{amx_usable, without_amx};
#[cfg(target_arch = "x86_64")]
pub(crate) use heads::HeadOperand;
pub use refresh::{Bf16RowWriter, ROW_ALIGN};
#[cfg(target_arch = "x86_64")]
pub use rows::{lm_head_backward_bf16, Bf16Rows};

/// Rows of the register tile.
const MR: usize = 14;
/// Columns of the register tile (two 16-lane vectors).
const NR: usize = 32;
/// K per block (even): a B panel block (KC·NR bf16 = 32 KiB) stays in L1
/// while the A strips of a task (8 × MR·KC bf16 = 112 KiB, L2) pass by.
const KC: usize = 512;
/// Row strips (at least; more where they fit [`A_BLOCK_BYTES`]) and column
/// panels per parallel task.
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

/// Whether this CPU's `vdpbf16ps` outruns its f32 FMAs by enough to pay
/// for the bf16 gemm: measured once per process (under a millisecond).
///
/// The instruction does two multiply-adds per lane, but not every CPU with
/// it issues it as fast as an FMA: Zen 4 and Zen 5 do (twice the f32 FLOP
/// rate), Intel's Xeons (Cooper Lake to Emerald Rapids, without AMX) issue
/// one every two cycles on one port against two FMAs a cycle: half the f32
/// rate. There the bf16 products go through f32 FMAs on bf16-rounded
/// operands instead ([`Bf16Kernel::Portable`], [`Bf16Panels::matmul`]),
/// the same numbers up to summation order. With Intel AMX
/// ([`amx_usable`]) the bf16 gemm's tiles run on it: fast.
pub fn bf16_dot_is_fast() -> bool {
    use super::probe::{path, rate, Op};
    static FAST: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FAST.get_or_init(|| match (path(Op::Bf16Dot), path(Op::F32Fma)) {
        #[cfg(target_arch = "x86_64")]
        _ if amx_usable() => true,
        (Some(dot), Some(fma)) if has_avx512bf16() => {
            rate(dot, 5) > DOT_OVER_FMA_MIN * rate(fma, 5)
        }
        _ => false,
    })
}

/// The bf16 dot's FLOP rate over the f32 FMA's above which the bf16 gemm
/// runs: 2 where both issue at the same rate, 0.5 on the Xeons above; the
/// bf16 kernel also packs its left operand, so a tie goes to f32.
const DOT_OVER_FMA_MIN: f64 = 1.2;

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
    /// Strips `[kp/2][MR][2]` (pair-major) instead of `[MR][kp]`: the layout
    /// a transposed source (a weight gradient's `Xᵀ`, rows contiguous for
    /// each k) packs into with vector loads.
    pair_major: bool,
    /// `ceil(M/MR)` strips of `MR·kp`.
    data: Vec<u16>,
}

impl PackedA {
    /// `A` packed into a buffer from this thread's pool ([`pooled`]), every
    /// element written (padding with zeros).
    fn pack(src: Src<'_>, m: usize, k: usize) -> PackedA {
        Self::pack_on(src, m, k, true)
    }

    /// [`Self::pack`], on the rayon pool when `par`, else on this thread.
    fn pack_on(src: Src<'_>, m: usize, k: usize, par: bool) -> PackedA {
        src.check(m, k, "A");
        let kp = k + (k & 1);
        let pair_major = src.cs != 1;
        let mut data = pooled(m.div_ceil(MR) * MR * kp);
        let simd = has_avx512bf16();
        data.par_chunks_mut(MR * kp)
            .enumerate()
            .with_min_len(min_len(par))
            .for_each(|(s, strip)| {
                let rows = MR.min(m - s * MR);
                if !pair_major {
                    for r in 0..rows {
                        let at = (s * MR + r) * src.rs;
                        convert_row(&mut strip[r * kp..r * kp + k], &src.data[at..at + k]);
                        strip[r * kp + k..(r + 1) * kp].fill(0);
                    }
                    strip[rows * kp..].fill(0);
                    return;
                }
                #[cfg(target_arch = "x86_64")]
                if simd && src.rs == 1 {
                    // SAFETY: the feature was detected; `check` bounds the source.
                    unsafe { pack_a_pairs_avx512(strip, src, s * MR, rows, k) };
                    return;
                }
                let _ = simd;
                Self::pack_strip_pairs(strip, src, s * MR, rows, k);
            });
        PackedA {
            m,
            kp,
            pair_major,
            data,
        }
    }

    /// One pair-major strip, element by element (the twin of the vector path).
    fn pack_strip_pairs(strip: &mut [u16], src: Src<'_>, r0: usize, rows: usize, k: usize) {
        strip.fill(0);
        for kk in 0..k {
            for r in 0..rows {
                let x = src.data[(r0 + r) * src.rs + kk * src.cs];
                strip[(kk / 2) * MR * 2 + r * 2 + (kk & 1)] = f32_to_bf16(x);
            }
        }
    }

    /// `(row stride, pair stride)` of a strip in 32-bit pairs, and the offset
    /// of K block `k0` (even) in a strip, in bf16s.
    fn strides(&self) -> (usize, usize, impl Fn(usize) -> usize) {
        let pair_major = self.pair_major;
        let (rs, ps) = if pair_major {
            (1, MR)
        } else {
            (self.kp / 2, 1)
        };
        (
            rs,
            ps,
            move |k0: usize| if pair_major { k0 * MR } else { k0 },
        )
    }
}

impl Drop for PackedA {
    fn drop(&mut self) {
        recycle(std::mem::take(&mut self.data));
    }
}

thread_local! {
    /// Packed operands of finished products, for the next ones on this
    /// thread: a fresh buffer of tens of MB (the LM head's dlogits) costs
    /// its page faults and zeroing on every product.
    static POOL: std::cell::RefCell<Vec<Vec<u16>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Buffers [`POOL`] keeps per thread, and their bf16s at most (128 MiB):
/// enough for a GPT-2 LM head's two dlogits copies per chunk.
const POOL_BUFFERS: usize = 4;
const POOL_ELEMS: usize = 64 << 20;

/// A buffer of `len` bf16s from this thread's pool (the smallest that
/// holds `len`, else the largest, grown), contents unspecified.
fn pooled(len: usize) -> Vec<u16> {
    let mut v = POOL
        .with(|p| {
            let mut p = p.borrow_mut();
            let fit = (0..p.len())
                .filter(|&i| p[i].capacity() >= len)
                .min_by_key(|&i| p[i].capacity());
            let pick = fit.or_else(|| (0..p.len()).max_by_key(|&i| p[i].capacity()));
            pick.map(|i| p.swap_remove(i))
        })
        .unwrap_or_default();
    v.resize(len, 0);
    v
}

/// Returns a buffer to this thread's pool (dropping the smallest while
/// over [`POOL_BUFFERS`] or [`POOL_ELEMS`]).
fn recycle(v: Vec<u16>) {
    if v.capacity() == 0 || v.capacity() > POOL_ELEMS {
        return;
    }
    POOL.with(|p| {
        let mut p = p.borrow_mut();
        p.push(v);
        while p.len() > POOL_BUFFERS || p.iter().map(Vec::capacity).sum::<usize>() > POOL_ELEMS {
            let smallest = (0..p.len())
                .min_by_key(|&i| p[i].capacity())
                .expect("not empty");
            p.swap_remove(smallest);
        }
    });
}

/// The right operand `B[K,N']` in bf16, packed in NR-column panels.
#[derive(Debug, Clone)]
struct PackedB {
    n: usize,
    k: usize,
    kp: usize,
    /// `[ceil(N'/NR)][kp/2][NR][2]`.
    data: Vec<u16>,
}

/// A packed right operand as the product reads it: [`PackedB`]'s layout,
/// `n` columns of panels `kp·NR` bf16s apart.
#[derive(Clone, Copy)]
struct BRef<'a> {
    data: &'a [u16],
    n: usize,
    kp: usize,
}

impl PackedB {
    fn as_ref(&self) -> BRef<'_> {
        BRef {
            data: &self.data,
            n: self.n,
            kp: self.kp,
        }
    }

    fn pack(src: Src<'_>, k: usize, n: usize) -> PackedB {
        let kp = k + (k & 1);
        let mut b = PackedB {
            n,
            k,
            kp,
            data: vec![0u16; n.div_ceil(NR) * kp * NR],
        };
        b.fill(src);
        b
    }

    /// [`Self::pack`] into a buffer from this thread's pool (for operands
    /// packed per product; [`Self::recycle`] returns it), on the rayon pool
    /// when `par`, else on this thread.
    fn pack_pooled(src: Src<'_>, k: usize, n: usize, par: bool) -> PackedB {
        let kp = k + (k & 1);
        let mut b = PackedB {
            n,
            k,
            kp,
            data: pooled(n.div_ceil(NR) * kp * NR),
        };
        b.fill_on(src, par);
        b
    }

    fn recycle(self) {
        recycle(self.data);
    }

    /// [`Self::pack_pooled`] of a row-major `src` (`K×N'`) on the rayon
    /// pool, adding each column's K values to `sums[N']` as it packs them
    /// (in row order: the bits of [`col_sums_into`], without its own pass
    /// over the source). Where the vector packer does not apply, the sums
    /// are that separate pass.
    fn pack_pooled_summed(src: Src<'_>, k: usize, n: usize, sums: &mut [f32]) -> PackedB {
        assert_eq!(sums.len(), n, "bf16 pack: sums must be [N']");
        let simd = has_avx512bf16();
        if !(simd && src.cs == 1) {
            col_sums_into(sums, src.data, k, n);
            return Self::pack_pooled(src, k, n, true);
        }
        let kp = k + (k & 1);
        let mut b = PackedB {
            n,
            k,
            kp,
            data: pooled(n.div_ceil(NR) * kp * NR),
        };
        src.check(k, n, "B");
        b.data
            .par_chunks_mut(kp * NR)
            .zip(sums.par_chunks_mut(NR))
            .enumerate()
            .for_each(|(p, (panel, sums))| {
                // SAFETY: the feature was detected; `src` holds `k × n`
                // (checked above) and the panel `kp·NR` elements.
                #[cfg(target_arch = "x86_64")]
                unsafe {
                    pack_b_rows_avx512(panel, src, p * NR, sums.len(), k, Some(sums))
                };
                #[cfg(not(target_arch = "x86_64"))]
                let _ = (panel, sums, p);
            });
        b
    }

    /// Packs `src` (`K×N'`, this operand's shape) over the current contents.
    /// Every element the kernel multiplies into a stored result is written,
    /// K padding included; padding columns reach only columns of a tile
    /// that are never stored.
    fn fill(&mut self, src: Src<'_>) {
        self.fill_on(src, true)
    }

    /// [`Self::fill`], on the rayon pool when `par`, else on this thread.
    fn fill_on(&mut self, src: Src<'_>, par: bool) {
        let (n, k, kp) = (self.n, self.k, self.kp);
        src.check(k, n, "B");
        let data = &mut self.data;
        let simd = has_avx512bf16();
        data.par_chunks_mut(kp * NR)
            .enumerate()
            .with_min_len(min_len(par))
            .for_each(|(p, panel)| {
                Self::fill_panel(panel, src, p * NR, NR.min(n - p * NR), k, simd)
            });
    }

    /// Columns `j0..j0+cols` of `src` (`k` rows of this operand's K) into
    /// `panel` (`k.div_ceil(2)` K pairs of NR columns), with the vector
    /// packers when `simd` (AVX-512 BF16 detected) and the layout allows.
    fn fill_panel(panel: &mut [u16], src: Src<'_>, j0: usize, cols: usize, k: usize, simd: bool) {
        src.check(k, j0 + cols, "B");
        assert!(
            panel.len() >= k.div_ceil(2) * NR * 2,
            "bf16 pack: panel too short"
        );
        #[cfg(target_arch = "x86_64")]
        if simd && (src.cs == 1 || src.rs == 1) {
            // SAFETY: the feature was detected; the source and panel are
            // bounded just above.
            unsafe {
                if src.cs == 1 {
                    pack_b_rows_avx512(panel, src, j0, cols, k, None)
                } else {
                    pack_b_cols_avx512(panel, src, j0, cols, k)
                }
            };
            return;
        }
        let _ = simd;
        Self::pack_panel(panel, src, j0, cols, k);
    }

    /// One panel, element by element (the twin of the vector paths).
    fn pack_panel(panel: &mut [u16], src: Src<'_>, j0: usize, cols: usize, k: usize) {
        panel.fill(0);
        for kk in 0..k {
            for j in 0..cols {
                let x = src.data[kk * src.rs + (j0 + j) * src.cs];
                panel[(kk / 2) * NR * 2 + j * 2 + (kk & 1)] = f32_to_bf16(x);
            }
        }
    }
}

/// 16 floats of `lo` and of `hi` → 32 bf16s `lo0, hi0, lo1, hi1, …`: the
/// K pairs the kernel multiplies.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
unsafe fn interleave_bf16(
    lo: std::arch::x86_64::__m512,
    hi: std::arch::x86_64::__m512,
) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    // After the conversion lanes 0..16 hold `lo`, 16..32 `hi`.
    let v: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(hi, lo));
    _mm512_permutexvar_epi16(_mm512_loadu_si512(PAIR_LANES.as_ptr() as *const _), v)
}

/// `vpermw` indices taking 16-bit lanes `0..16` and `16..32` of a vector to
/// pairs `(0, 16), (1, 17), …`: two rows' values as the kernel's K pairs.
#[cfg(target_arch = "x86_64")]
const PAIR_LANES: [u16; 32] = {
    let mut idx = [0u16; 32];
    let mut i = 0;
    while i < 16 {
        idx[2 * i] = i as u16;
        idx[2 * i + 1] = 16 + i as u16;
        i += 1;
    }
    idx
};

/// Up to 16 floats at `p` (lanes past `lanes` are zero, not read).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn load_lanes(p: *const f32, lanes: usize) -> std::arch::x86_64::__m512 {
    use std::arch::x86_64::*;
    if lanes >= 16 {
        _mm512_loadu_ps(p)
    } else {
        _mm512_maskz_loadu_ps(((1u32 << lanes) - 1) as u16, p)
    }
}

/// Rows `kk` and `kk + 1` (zeros past `k`) of up to 16 floats each, row `r`
/// at `p + r·stride`: one K pair of a packed operand.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn load_k_pair(
    p: *const f32,
    stride: usize,
    kk: usize,
    k: usize,
    lanes: usize,
) -> (std::arch::x86_64::__m512, std::arch::x86_64::__m512) {
    let lo = load_lanes(p.add(kk * stride), lanes);
    let hi = if kk + 1 < k {
        load_lanes(p.add((kk + 1) * stride), lanes)
    } else {
        std::arch::x86_64::_mm512_setzero_ps()
    };
    (lo, hi)
}

/// A pair-major strip of A rows `r0..r0+rows` from a source whose rows are
/// contiguous for each k (`src.rs == 1`): per K pair, two masked loads.
///
/// # Safety
/// AVX-512 BF16 must be present; `src` must hold the `rows × k` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
unsafe fn pack_a_pairs_avx512(strip: &mut [u16], src: Src<'_>, r0: usize, rows: usize, k: usize) {
    use std::arch::x86_64::*;
    debug_assert!(src.rs == 1 && rows <= MR && strip.len() >= k.div_ceil(2) * MR * 2);
    let base = src.data.as_ptr().add(r0);
    for q in 0..k.div_ceil(2) {
        let (lo, hi) = load_k_pair(base, src.cs, 2 * q, k, rows);
        // MR rows = 2·MR bf16s of the 32.
        _mm512_mask_storeu_epi16(
            strip.as_mut_ptr().add(q * MR * 2) as *mut i16,
            (1u32 << (2 * MR)) - 1,
            interleave_bf16(lo, hi),
        );
    }
}

/// A B panel (columns `j0..j0+cols`) from a row-major source (`src.cs ==
/// 1`): per K pair, the two rows' 16-column halves interleaved. With `sums`
/// (`cols` floats), adds each column's `k` values to it, in row order.
///
/// # Safety
/// AVX-512 BF16 must be present; `src` must hold the `k × cols` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
unsafe fn pack_b_rows_avx512(
    panel: &mut [u16],
    src: Src<'_>,
    j0: usize,
    cols: usize,
    k: usize,
    sums: Option<&mut [f32]>,
) {
    use std::arch::x86_64::*;
    debug_assert!(src.cs == 1 && cols <= NR && panel.len() >= k.div_ceil(2) * NR * 2);
    debug_assert!(sums.as_ref().is_none_or(|s| s.len() == cols));
    let base = src.data.as_ptr().add(j0);
    let mut acc = [_mm512_setzero_ps(); NR / 16];
    if let Some(s) = sums.as_deref() {
        for (c0, a) in (0..cols).step_by(16).zip(acc.iter_mut()) {
            *a = load_lanes(s.as_ptr().add(c0), cols - c0);
        }
    }
    for q in 0..k.div_ceil(2) {
        for (c0, a) in (0..cols).step_by(16).zip(acc.iter_mut()) {
            let (lo, hi) = load_k_pair(base.add(c0), src.rs, 2 * q, k, cols - c0);
            if sums.is_some() {
                // Row 2q, then 2q+1 where it exists: row order.
                *a = _mm512_add_ps(*a, lo);
                if 2 * q + 1 < k {
                    *a = _mm512_add_ps(*a, hi);
                }
            }
            _mm512_storeu_si512(
                panel.as_mut_ptr().add(q * NR * 2 + c0 * 2) as *mut _,
                interleave_bf16(lo, hi),
            );
        }
    }
    if let Some(s) = sums {
        for (c0, a) in (0..cols).step_by(16).zip(acc) {
            let mask = if cols - c0 >= 16 {
                u16::MAX
            } else {
                (1u16 << (cols - c0)) - 1
            };
            _mm512_mask_storeu_ps(s.as_mut_ptr().add(c0), mask, a);
        }
    }
}

/// A B panel from a source whose columns are contiguous (`src.rs == 1`, a
/// weight seen transposed): per 16 columns × 32 k, each column's K run
/// converts to 16 pairs (one vector), and a 16×16 transpose of those pair
/// words gives 16 pair rows of 16 columns, stored whole. (A scatter of
/// single words, one cache line apart, made the packing of an `nn.Linear`
/// weight's forward operand — the LM head's, every step — 3× the cost of
/// the row-major one.)
///
/// # Safety
/// AVX-512 BF16 must be present; `src` must hold the `k × cols` elements.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
unsafe fn pack_b_cols_avx512(panel: &mut [u16], src: Src<'_>, j0: usize, cols: usize, k: usize) {
    use std::arch::x86_64::*;
    debug_assert!(src.rs == 1 && cols <= NR && panel.len() >= k.div_ceil(2) * NR * 2);
    let words = panel.as_mut_ptr() as *mut u32;
    for jb in (0..cols).step_by(16) {
        let jn = 16.min(cols - jb);
        let mask = ((1u32 << jn) - 1) as u16;
        for k0 in (0..k).step_by(32) {
            let left = k - k0;
            let mut r = [_mm512_setzero_si512(); 16];
            for (j, v) in r.iter_mut().enumerate().take(jn) {
                let col = src.data.as_ptr().add((j0 + jb + j) * src.cs + k0);
                let lo = load_lanes(col, left);
                let hi = if left > 16 {
                    load_lanes(col.add(16), left - 16)
                } else {
                    _mm512_setzero_ps()
                };
                *v = std::mem::transmute::<__m512bh, __m512i>(_mm512_cvtne2ps_pbh(hi, lo));
            }
            transpose_16x16_words(&mut r);
            for (q, v) in r.iter().enumerate().take(left.div_ceil(2).min(16)) {
                _mm512_mask_storeu_epi32(words.add((k0 / 2 + q) * NR + jb) as *mut i32, mask, *v);
            }
        }
    }
}

/// In place: `r[i]` word `j` ← `r[j]` word `i` (32-bit words).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn transpose_16x16_words(r: &mut [std::arch::x86_64::__m512i; 16]) {
    use std::arch::x86_64::*;
    let mut t = [_mm512_setzero_si512(); 16];
    for i in 0..8 {
        t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    // In 128-bit lane L, `u[4i + c]` holds words 4L + c of rows 4i..4i+4.
    let mut u = [_mm512_setzero_si512(); 16];
    for i in 0..4 {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    // A 4×4 transpose of 128-bit lanes across u[c], u[4+c], u[8+c], u[12+c].
    for c in 0..4 {
        let x0 = _mm512_shuffle_i32x4::<0x44>(u[c], u[4 + c]);
        let x1 = _mm512_shuffle_i32x4::<0xEE>(u[c], u[4 + c]);
        let y0 = _mm512_shuffle_i32x4::<0x44>(u[8 + c], u[12 + c]);
        let y1 = _mm512_shuffle_i32x4::<0xEE>(u[8 + c], u[12 + c]);
        r[c] = _mm512_shuffle_i32x4::<0x88>(x0, y0);
        r[4 + c] = _mm512_shuffle_i32x4::<0xDD>(x0, y0);
        r[8 + c] = _mm512_shuffle_i32x4::<0x88>(x1, y1);
        r[12 + c] = _mm512_shuffle_i32x4::<0xDD>(x1, y1);
    }
}

/// `c[M,N'] = (accumulate ? c : 0) + A·B` with row stride `ldc`.
///
/// Each task takes a block of strips × panels sized for the caches: its A
/// strips (up to [`A_BLOCK_BYTES`] per K block) stay in L2 while each B
/// panel block passes once through L1. While a tile computes, it pulls the
/// next tile's new operand and its C rows toward the core ([`Ahead`]): the
/// LM head's operands (tens of MB) and its weight gradient's C stream from
/// memory, and waiting for them cost ~40% of those products.
///
/// # Safety
/// AVX-512 BF16 must be present.
#[cfg(target_arch = "x86_64")]
unsafe fn gemm_packed(c: &mut [f32], ldc: usize, accumulate: bool, a: &PackedA, b: &PackedB) {
    gemm_packed_on(c, ldc, accumulate, a, b.as_ref(), true, Epilogue::NONE)
}

/// What a product `C = A·B` does besides the sum, on each tile while it is
/// in registers or L1 rather than in passes over C: each row starts from
/// `bias[N']` instead of zero (`C = bias + A·B`, summed in the order of a C
/// holding the bias and accumulated into), and the finished sums go through
/// `gelu` (an MLP's first layer at inference, whose input to GELU no
/// backward needs).
#[derive(Clone, Copy)]
pub(crate) struct Epilogue<'a> {
    pub(crate) bias: Option<&'a [f32]>,
    pub(crate) gelu: Option<Gelu>,
}

impl Epilogue<'_> {
    pub(crate) const NONE: Epilogue<'static> = Epilogue {
        bias: None,
        gelu: None,
    };
}

/// How a tile's sums start.
#[derive(Clone, Copy)]
enum Start {
    Zero,
    /// From C's tile (a later K block, or a product accumulated into C).
    Load,
    /// From the NR floats at the pointer, in every row (a bias).
    Bias(*const f32),
}

/// [`gemm_packed`], its tasks on the rayon pool when `par`, else in order
/// on this thread.
///
/// # Safety
/// AVX-512 BF16 must be present.
#[cfg(target_arch = "x86_64")]
#[allow(
    clippy::too_many_lines,
    reason = "the tile loop with its prefetch plan and edge tiles"
)]
unsafe fn gemm_packed_on(
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
    a: &PackedA,
    b: BRef<'_>,
    par: bool,
    epi: Epilogue<'_>,
) {
    // K is A's; B may hold more (a prefix of its rows is multiplied).
    let (m, n, kp, bkp) = (a.m, b.n, a.kp, b.kp);
    assert!(kp <= bkp, "bf16 gemm: A's K exceeds B's");
    assert!(
        !(accumulate && epi.bias.is_some()),
        "bf16 gemm: a bias starts the sums of a product that does not accumulate"
    );
    if let Some(bias) = epi.bias {
        assert!(bias.len() >= n, "bf16 gemm: bias shorter than N");
    }
    if m == 0 || n == 0 {
        return;
    }
    assert!(c.len() >= extent(m, n, ldc, 1), "bf16 gemm: C too small");
    if kp == 0 {
        for r in 0..m {
            let row = &mut c[r * ldc..r * ldc + n];
            match epi.bias {
                Some(bias) => row.copy_from_slice(&bias[..n]),
                None if !accumulate => row.fill(0.0),
                None => {}
            }
            if let Some(kind) = epi.gelu {
                // SAFETY: `row` is n valid floats of this thread's.
                unsafe { gelu_tile(row.as_mut_ptr(), n, 1, n, kind) };
            }
        }
        return;
    }
    let blocks = TaskBlocks::new(m.div_ceil(MR), n.div_ceil(NR), kp);
    let (a_rs, a_ps, a_at) = a.strides();
    // Decided on the calling thread (`without_amx` is per thread).
    let amx = !a.pair_major && amx::active();
    let c_ptr = SendPtr(c.as_mut_ptr());
    let tasks = (0..blocks.tasks()).into_par_iter();
    tasks.with_min_len(min_len(par)).for_each(|task| {
        let (s_range, p_range) = blocks.task(task);
        let first_panel = p_range.start;
        let mut tmp = [0f32; MR * NR];
        // The tiles of the task in order, as (k0, panel, strip).
        let mut order = (0..kp).step_by(KC).flat_map(|k0| {
            let s_range = s_range.clone();
            p_range
                .clone()
                .flat_map(move |p| s_range.clone().map(move |s| (k0, p, s)))
        });
        let mut next = order.next();
        while let Some((k0, p, s)) = next {
            next = order.next();
            let k1 = (k0 + KC).min(kp);
            let start = match epi.bias {
                _ if accumulate || k0 > 0 => Start::Load,
                // SAFETY (add): column p·NR is below n <= bias.len().
                Some(bias) => Start::Bias(unsafe { bias.as_ptr().add(p * NR) }),
                None => Start::Zero,
            };
            let panel = &b.data[p * bkp * NR + k0 * NR..];
            let cols = NR.min(n - p * NR);
            let r0 = s * MR;
            let rows = MR.min(m - r0);
            let strip = &a.data[r0 * kp + a_at(k0)..];
            // What the next tile reads that this one does not: its C rows
            // (when it loads them), and its A strip or B panel block.
            let ahead = match next {
                None => [Ahead::NONE; 2],
                Some((nk0, np, ns)) => {
                    let nk1 = (nk0 + KC).min(kp);
                    let nrows = MR.min(m - ns * MR);
                    let c_rows = if accumulate || nk0 > 0 {
                        Ahead::rows(
                            c_ptr.get().wrapping_add(ns * MR * ldc + np * NR) as *const u8,
                            nrows,
                            ldc * 4,
                            NR.min(n - np * NR) * 4,
                        )
                    } else {
                        Ahead::NONE
                    };
                    // A strip: only on its first panel (then it sits in L2).
                    let operand = if np == p && nk0 == k0 && p != first_panel {
                        Ahead::NONE
                    } else if np == p && nk0 == k0 {
                        let at = a.data.as_ptr().wrapping_add(ns * MR * kp + a_at(nk0));
                        if a.pair_major {
                            Ahead::rows(at as *const u8, 1, 0, (nk1 - nk0) * MR * 2)
                        } else {
                            Ahead::rows(at as *const u8, nrows, kp * 2, (nk1 - nk0) * 2)
                        }
                    } else {
                        let at = b.data.as_ptr().wrapping_add(np * bkp * NR + nk0 * NR);
                        Ahead::rows(at as *const u8, 1, 0, (nk1 - nk0) * NR * 2)
                    };
                    [c_rows, operand]
                }
            };
            let pairs = (k1 - k0) / 2;
            // SAFETY: the tile's rows r0.. and columns p·NR.. lie inside C
            // (checked above, or narrowed through `tmp`), and only this task
            // writes them; `strip` and `panel` hold MR rows / NR columns of
            // k1 - k0 values; `ahead` is only prefetched, never read.
            unsafe {
                let dst = c_ptr.get().add(r0 * ldc + p * NR);
                if rows == MR && cols == NR {
                    tile_any(
                        amx,
                        strip,
                        (a_rs, a_ps),
                        panel,
                        pairs,
                        (dst, ldc, start),
                        &ahead,
                    );
                } else {
                    for r in 0..rows {
                        for j in 0..cols {
                            tmp[r * NR + j] = match start {
                                Start::Load => *dst.add(r * ldc + j),
                                Start::Bias(bias) => *bias.add(j),
                                Start::Zero => 0.0,
                            };
                        }
                    }
                    let t = (tmp.as_mut_ptr(), NR, Start::Load);
                    tile_any(amx, strip, (a_rs, a_ps), panel, pairs, t, &ahead);
                    for r in 0..rows {
                        std::ptr::copy_nonoverlapping(
                            tmp.as_ptr().add(r * NR),
                            dst.add(r * ldc),
                            cols,
                        );
                    }
                }
                if let (Some(kind), true) = (epi.gelu, k1 == kp) {
                    // The tile's last K block: its sums are final.
                    gelu_tile(dst, ldc, rows, cols, kind);
                }
            }
        }
    });
}

/// Minimum items per rayon job: 1 (split freely) when `par`, else all of
/// them (one job, run on the calling thread).
fn min_len(par: bool) -> usize {
    if par {
        1
    } else {
        usize::MAX
    }
}

/// `dst[M,N] = (accumulate ? dst : 0) + bf16(lhs[M,K])·bf16(rhs[K,N])`,
/// summed in f32, on this thread only: the small products of one
/// attention head, which already runs as one task of a parallel loop.
/// `dst` has row stride `ldc` and column stride 1.
///
/// # Safety
/// AVX-512 BF16 must be present ([`has_avx512bf16`]); `dst` must be valid
/// for the `M×N` elements and no other thread may touch them meanwhile.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_bf16_serial_to_ptr(
    dst: *mut f32,
    ldc: usize,
    accumulate: bool,
    lhs: View<'_>,
    rhs: View<'_>,
    m: usize,
    n: usize,
    k: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    let (lhs, rhs) = (
        Src {
            data: lhs.data,
            rs: lhs.rs,
            cs: lhs.cs,
        },
        Src {
            data: rhs.data,
            rs: rhs.rs,
            cs: rhs.cs,
        },
    );
    let a = PackedA::pack_on(lhs, m, k, false);
    let b = PackedB::pack_pooled(rhs, k, n, false);
    // SAFETY: the caller's promise on `dst`; CPU support likewise.
    unsafe {
        let c = std::slice::from_raw_parts_mut(dst, extent(m, n, ldc, 1));
        gemm_packed_on(c, ldc, accumulate, &a, b.as_ref(), false, Epilogue::NONE);
    }
    b.recycle();
}

/// A's strips per task at most take this many bytes per K block: with a B
/// panel block (32 KiB) in L1, they stay in a 512 KiB or larger L2.
const A_BLOCK_BYTES: usize = 224 << 10;

/// How [`gemm_packed`] splits its tiles into parallel tasks: `rgroups ×
/// cgroups` blocks of up to `spt` strips × `ppt` panels, balanced, and at
/// least a few tasks per thread where the product allows.
struct TaskBlocks {
    strips: usize,
    panels: usize,
    rgroups: usize,
    cgroups: usize,
}

impl TaskBlocks {
    fn new(strips: usize, panels: usize, kp: usize) -> TaskBlocks {
        let strip_bytes = MR * KC.min(kp) * 2;
        let max_spt = (A_BLOCK_BYTES / strip_bytes).clamp(STRIPS_PER_TASK, 4 * STRIPS_PER_TASK);
        let mut rgroups = strips.div_ceil(max_spt);
        let cgroups = panels.div_ceil(PANELS_PER_TASK);
        // At least 4 tasks per thread, and a whole number per thread where
        // more row groups make it so: 9 equal tasks on 2 threads left one
        // idle for a ninth of the product (GPT-2 124M prefill's two
        // products with 768 outputs, at 476 tokens).
        let threads = rayon::current_num_threads();
        let max_rgroups = strips.div_ceil(STRIPS_PER_TASK);
        let want = |r: usize| r * cgroups >= 4 * threads && (r * cgroups).is_multiple_of(threads);
        if let Some(r) = (rgroups..=max_rgroups).find(|&r| want(r)) {
            rgroups = r;
        } else {
            while rgroups * cgroups < 4 * threads && rgroups < max_rgroups {
                rgroups += 1;
            }
        }
        TaskBlocks {
            strips,
            panels,
            rgroups,
            cgroups,
        }
    }

    fn tasks(&self) -> usize {
        self.rgroups * self.cgroups
    }

    /// The strips and panels of task `t`: groups whose sizes differ by at
    /// most one (a short last group made equal task counts unequal work:
    /// 37 strips as 10, 10, 10, 7).
    fn task(&self, t: usize) -> (std::ops::Range<usize>, std::ops::Range<usize>) {
        let (rg, cg) = (t / self.cgroups, t % self.cgroups);
        let share = |n: usize, groups: usize, g: usize| g * n / groups..(g + 1) * n / groups;
        (
            share(self.strips, self.rgroups, rg),
            share(self.panels, self.cgroups, cg),
        )
    }
}

/// Memory a tile prefetches for the tile after it (its C rows first, then
/// its new operand): `segs` runs of `lines`
/// cache lines, `stride` bytes apart, from `ptr` (rounded down to a line).
/// Addresses are only prefetched, never read, so they need not be valid.
#[derive(Clone, Copy)]
struct Ahead {
    ptr: *const u8,
    stride: usize,
    lines: usize,
    segs: usize,
}

impl Ahead {
    const NONE: Ahead = Ahead {
        ptr: std::ptr::null(),
        stride: 0,
        lines: 0,
        segs: 0,
    };

    /// `segs` runs of `bytes` bytes from `ptr`, `stride` bytes apart.
    fn rows(ptr: *const u8, segs: usize, stride: usize, bytes: usize) -> Ahead {
        let skew = ptr as usize % 64;
        Ahead {
            ptr: ptr.wrapping_sub(skew),
            stride,
            lines: (skew + bytes).div_ceil(64),
            segs,
        }
    }
}

/// The lines of a tile's [`Ahead`] regions in order, a few instructions a
/// line: the next line, the next run, then the next region. (A cursor of
/// (region, run, line) indices recomputing each address took ~25
/// instructions a line, as many as two K pairs of the kernel for the 250+
/// lines of a new A strip.)
struct PrefetchCursor<'a> {
    rest: &'a [Ahead],
    /// The current run's next line, its lines left, its start, and the
    /// runs left after it.
    at: *const u8,
    lines: usize,
    run: *const u8,
    segs: usize,
    region: Ahead,
}

impl<'a> PrefetchCursor<'a> {
    fn new(regions: &'a [Ahead]) -> Self {
        let mut c = PrefetchCursor {
            rest: regions,
            at: std::ptr::null(),
            lines: 0,
            run: std::ptr::null(),
            segs: 0,
            region: Ahead::NONE,
        };
        c.next_region();
        c
    }

    /// Moves to the first run of the next region with lines (none left:
    /// `lines` stays 0).
    #[inline(always)]
    fn next_region(&mut self) {
        while let Some((&h, rest)) = self.rest.split_first() {
            self.rest = rest;
            if h.lines > 0 && h.segs > 0 {
                (self.region, self.run, self.at) = (h, h.ptr, h.ptr);
                (self.lines, self.segs) = (h.lines, h.segs - 1);
                return;
            }
        }
        self.lines = 0;
    }

    /// The next line's address, `None` after the last.
    #[inline(always)]
    fn next(&mut self) -> Option<*const i8> {
        if self.lines == 0 {
            return None;
        }
        let at = self.at;
        self.lines -= 1;
        self.at = self.at.wrapping_add(64);
        if self.lines == 0 {
            if self.segs > 0 {
                self.segs -= 1;
                self.run = self.run.wrapping_add(self.region.stride);
                (self.at, self.lines) = (self.run, self.region.lines);
            } else {
                self.next_region();
            }
        }
        Some(at as *const i8)
    }
}

/// K pairs between two rounds of prefetches in [`tile_kernel`].
const PREFETCH_PAIRS: usize = 8;

/// [`tile_kernel`]'s tile, its whole [`amx::TILE_PAIRS`] steps of K on AMX
/// where `amx` (a row-major A strip: `ps == 1`), the rest on AVX-512.
///
/// # Safety
/// As [`tile_kernel`]; `amx` only where [`amx_usable`].
#[cfg(target_arch = "x86_64")]
#[inline]
unsafe fn tile_any(
    amx: bool,
    a: &[u16],
    (rs, ps): (usize, usize),
    panel: &[u16],
    pairs: usize,
    (c, ldc, start): (*mut f32, usize, Start),
    ahead: &[Ahead; 2],
) {
    let steps = if amx && ps == 1 {
        pairs / amx::TILE_PAIRS
    } else {
        0
    };
    // SAFETY: the caller's promises, passed on; AMX reads MR rows of
    // `steps` × 32 bf16s of `a` (rows `rs` words apart) and as many K pairs
    // of `panel`, within what `tile_kernel` would read.
    unsafe {
        if steps == 0 {
            return tile_kernel(a, (rs, ps), panel, pairs, (c, ldc, start), ahead);
        }
        if let Start::Bias(bias) = start {
            for r in 0..MR {
                std::ptr::copy_nonoverlapping(bias, c.add(r * ldc), NR);
            }
        }
        let zero = matches!(start, Start::Zero);
        amx::tile(a.as_ptr(), rs * 4, panel.as_ptr(), steps, c, ldc, zero);
        let done = steps * amx::TILE_PAIRS;
        if done < pairs {
            let (a, panel) = (&a[2 * done..], &panel[2 * done * NR..]);
            tile_kernel(
                a,
                (rs, ps),
                panel,
                pairs - done,
                (c, ldc, Start::Load),
                ahead,
            );
        }
    }
}

/// One MR×NR tile over `pairs` pairs of K: `c[r, j] = s[r, j] + Σ_k
/// a[r,k]·panel[k,j]`, where `s` is what `start` says (zero, `c` itself, or
/// a bias row), prefetching `ahead` spread over the K loop.
///
/// # Safety
/// AVX-512 BF16 must be present; `a` holds MR rows of `pairs` K pairs, the
/// pair (r, p) at 32-bit word `r·rs + p·ps`; `panel` `2·pairs·NR` bf16s, `c`
/// an MR×NR tile with row stride `ldc` floats; a bias start NR floats.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
unsafe fn tile_kernel(
    a: &[u16],
    (rs, ps): (usize, usize),
    panel: &[u16],
    pairs: usize,
    (c, ldc, start): (*mut f32, usize, Start),
    ahead: &[Ahead; 2],
) {
    use std::arch::x86_64::*;
    debug_assert!(
        pairs == 0 || a.len() >= 2 * ((MR - 1) * rs + (pairs - 1) * ps + 1),
        "bf16 tile: A strip too short"
    );
    debug_assert!(
        panel.len() >= 2 * pairs * NR,
        "bf16 tile: B panel too short"
    );
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    match start {
        Start::Zero => {}
        Start::Load => {
            for (r, acc_r) in acc.iter_mut().enumerate() {
                acc_r[0] = _mm512_loadu_ps(c.add(r * ldc));
                acc_r[1] = _mm512_loadu_ps(c.add(r * ldc + 16));
            }
        }
        Start::Bias(bias) => {
            let b = [_mm512_loadu_ps(bias), _mm512_loadu_ps(bias.add(16))];
            acc = [b; MR];
        }
    }
    let ap = a.as_ptr() as *const i32;
    let bp = panel.as_ptr();
    let total: usize = ahead.iter().map(|h| h.lines * h.segs).sum();
    let per_round = total.div_ceil(pairs.div_ceil(PREFETCH_PAIRS).max(1));
    let mut cursor = PrefetchCursor::new(ahead);
    for p0 in (0..pairs).step_by(PREFETCH_PAIRS) {
        for _ in 0..per_round {
            let Some(at) = cursor.next() else { break };
            _mm_prefetch::<_MM_HINT_T0>(at);
        }
        for p in p0..(p0 + PREFETCH_PAIRS).min(pairs) {
            let w0: __m512bh =
                std::mem::transmute(_mm512_loadu_si512(bp.add(p * NR * 2) as *const _));
            let w1: __m512bh =
                std::mem::transmute(_mm512_loadu_si512(bp.add(p * NR * 2 + 32) as *const _));
            for (r, acc_r) in acc.iter_mut().enumerate() {
                let x: __m512bh = std::mem::transmute(_mm512_set1_epi32(
                    (ap.add(r * rs + p * ps)).read_unaligned(),
                ));
                acc_r[0] = _mm512_dpbf16_ps(acc_r[0], x, w0);
                acc_r[1] = _mm512_dpbf16_ps(acc_r[1], x, w1);
            }
        }
    }
    for (r, acc_r) in acc.iter().enumerate() {
        _mm512_storeu_ps(c.add(r * ldc), acc_r[0]);
        _mm512_storeu_ps(c.add(r * ldc + 16), acc_r[1]);
    }
}

/// One row f32 → bf16, round to nearest even.
pub(crate) fn convert_row(dst: &mut [u16], src: &[f32]) {
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

/// `x` rounded to bf16 and back to f32: the operands of the portable path,
/// and of any product that must equal the bf16 gemm's up to summation order.
pub fn rounded(x: &[f32]) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    round_into(&mut out, x);
    out
}

/// `dst = `[`rounded`]`(src)`, into a buffer the caller has.
fn round_into(dst: &mut [f32], src: &[f32]) {
    assert_eq!(dst.len(), src.len(), "round_into: lengths differ");
    dst.par_chunks_mut(1 << 14)
        .zip(src.par_chunks(1 << 14))
        .for_each(|(d, s)| {
            for (d, &s) in d.iter_mut().zip(s) {
                *d = bf16_to_f32(f32_to_bf16(s));
            }
        });
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
    /// The fastest this CPU has: the AVX-512 BF16 kernel where its dot
    /// product outruns f32 FMAs ([`bf16_dot_is_fast`]).
    pub fn detect() -> Bf16Kernel {
        if bf16_dot_is_fast() {
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
    /// W rounded to bf16, in f32, in `layout`: W's own, or `[C,OC]` for an
    /// inference-only `[OC,C]` weight (the f32 gemm multiplies `[C,OC]` in
    /// place but repacks `[OC,C]` on every call, most of a small batch's time).
    Portable { w: Vec<f32>, layout: WeightLayout },
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
                let (as_c_oc, as_oc_c) = Self::views(layout, c, oc);
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
            Bf16Kernel::Portable => {
                let w = rounded(weight);
                if !backward && layout == WeightLayout::OutIn {
                    let mut t = vec![0.0; w.len()];
                    super::quant::to_f32_in_out(&mut t, &w, c, oc);
                    Packed::Portable {
                        w: t,
                        layout: WeightLayout::InOut,
                    }
                } else {
                    Packed::Portable { w, layout }
                }
            }
        };
        Bf16Weight {
            c,
            oc,
            layout,
            packed,
        }
    }

    /// W as `[C,OC]` (forward) and `[OC,C]` (backward) views of its buffer:
    /// (row stride, column stride) each.
    fn views(layout: WeightLayout, c: usize, oc: usize) -> ((usize, usize), (usize, usize)) {
        match layout {
            WeightLayout::InOut => ((oc, 1), (1, oc)),
            WeightLayout::OutIn => ((1, c), (c, 1)),
        }
    }

    /// Packs `weight` (of the same shape and layout) again into this copy's
    /// buffers: once per optimizer step without the page faults (and
    /// zeroing) of fresh buffers, which cost a large weight (the LM head's
    /// 2 × 37 MiB) about as much as the conversion itself.
    pub fn repack(&mut self, weight: &[f32]) {
        let (c, oc, layout) = (self.c, self.oc, self.layout);
        assert_eq!(
            weight.len(),
            c * oc,
            "Bf16Weight::repack: weight must hold C·OC"
        );
        let view = |(rs, cs)| Src {
            data: weight,
            rs,
            cs,
        };
        let (as_c_oc, as_oc_c) = Self::views(layout, c, oc);
        match &mut self.packed {
            Packed::Avx512 { fwd, bwd } => {
                fwd.fill(view(as_c_oc));
                if let Some(bwd) = bwd {
                    bwd.fill(view(as_oc_c));
                }
            }
            Packed::Portable { w, layout: kept } if *kept == layout => round_into(w, weight),
            Packed::Portable { .. } => {
                *self = Self::pack_with(weight, c, oc, layout, Bf16Kernel::Portable, false)
            }
        }
    }

    /// The kernel this weight runs on.
    pub fn kernel(&self) -> Bf16Kernel {
        match self.packed {
            Packed::Avx512 { .. } => Bf16Kernel::Avx512,
            Packed::Portable { .. } => Bf16Kernel::Portable,
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
        // The rounded operands in a reused buffer: a fresh one per product
        // costs its page faults (and unmapping) every time.
        Packed::Portable { w: wr, layout } => super::with_scratch(inp.len(), |xr| {
            round_into(xr, inp);
            matmul_forward(out, xr, wr, bias, n, c, oc, *layout);
        }),
        #[cfg(target_arch = "x86_64")]
        Packed::Avx512 { fwd, .. } => {
            if let Some(b) = bias {
                assert_eq!(b.len(), oc, "matmul_forward_bf16: bias must be [OC]");
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
            let epi = Epilogue { bias, gelu: None };
            // SAFETY: an Avx512 weight is only made where the CPU has it.
            unsafe { gemm_packed_on(out, oc, false, &a, fwd.as_ref(), true, epi) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        Packed::Avx512 { .. } => unreachable!("Avx512 weights are x86-64 only"),
    }
}

/// `dinp[N,C] += bf16(dout)·bf16(W)ᵀ` (`=` with [`GradWrite::Set`]);
/// `dweight += bf16(inp)ᵀ·bf16(dout)` (in
/// W's own layout); `dbias[OC] += Σ_rows dout` (in f32, unrounded). Each
/// gradient is optional; the input gradient needs a weight packed with
/// `backward`.
#[allow(clippy::too_many_arguments)]
pub fn matmul_backward_bf16(
    dinp: Option<(&mut [f32], GradWrite)>,
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
    let mut dbias = dbias;
    if let Some(db) = dbias.as_deref_mut() {
        assert_eq!(db.len(), oc, "matmul_backward_bf16: dbias must be [OC]");
    }
    // The bias gradient is summed by the weight gradient's packing of dY
    // where it packs dY as B (Conv1D's layout); else it is its own pass.
    let fused_sums = matches!(w.packed, Packed::Avx512 { .. })
        && layout == WeightLayout::InOut
        && dweight.is_some();
    if !fused_sums {
        if let Some(db) = dbias.take() {
            col_sums_into(db, dout, n, oc);
        }
    }
    match &w.packed {
        Packed::Portable {
            w: wr,
            layout: kept,
        } => {
            super::with_scratch(dout.len() + inp.len(), |s| {
                let (dout_r, inp_r) = s.split_at_mut(dout.len());
                round_into(dout_r, dout);
                round_into(inp_r, inp);
                if *kept == layout {
                    matmul_backward(dinp, dweight, None, dout_r, inp_r, wr, n, c, oc, layout);
                } else {
                    // An inference copy kept transposed: the input gradient reads
                    // it as kept; the weight gradient (which reads no weight) is
                    // laid out as W.
                    matmul_backward(dinp, None, None, dout_r, inp_r, wr, n, c, oc, *kept);
                    matmul_backward(None, dweight, None, dout_r, inp_r, wr, n, c, oc, layout);
                }
            })
        }
        #[cfg(target_arch = "x86_64")]
        Packed::Avx512 { bwd, .. } => {
            let input_grad = || {
                if let Some((dinp, write)) = dinp {
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
                    // Set writes without reading: the bench's bf16 GPT-2 step
                    // ran its block products in 82.9-85.3 ms so, 84.5-88.6
                    // zeroing first and accumulating (2 Zen 5 threads).
                    // SAFETY: an Avx512 weight is only made where the CPU has it.
                    unsafe { gemm_packed(dinp, c, write == GradWrite::Add, &a, bwd) };
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
                        // dW[C,OC] += Xᵀ[C,N]·dY[N,OC], db += Σ_rows dY
                        WeightLayout::InOut => (
                            PackedA::pack(x.t(), c, n),
                            match dbias {
                                Some(db) => PackedB::pack_pooled_summed(dy, n, oc, db),
                                None => PackedB::pack_pooled(dy, n, oc, true),
                            },
                            oc,
                        ),
                        // dW[OC,C] += dYᵀ[OC,N]·X[N,C]
                        WeightLayout::OutIn => (
                            PackedA::pack(dy.t(), oc, n),
                            PackedB::pack_pooled(x, n, c, true),
                            c,
                        ),
                    };
                    // SAFETY: as above.
                    unsafe { gemm_packed(dw, ldc, true, &a, &b) };
                    b.recycle();
                }
            };
            rayon::join(input_grad, weight_grad);
        }
        #[cfg(not(target_arch = "x86_64"))]
        Packed::Avx512 { .. } => unreachable!("Avx512 weights are x86-64 only"),
    }
}

/// Where element `(o, i)` of an `[OC, IC]` weight lies in the packed panel
/// layout of [`Bf16Panels`] (`kp` = IC rounded up to even).
#[inline(always)]
fn panel_offset(o: usize, i: usize, kp: usize) -> usize {
    (o / NR) * kp * NR + (i / 2) * NR * 2 + (o % NR) * 2 + (i & 1)
}

/// Elements of the panels of an `[OC, IC]` weight (padding included).
fn panels_len(ic: usize, oc: usize) -> usize {
    oc.div_ceil(NR) * (ic + (ic & 1)) * NR
}

/// bf16 inference weights `W[OC, IC]` kept in the packed panel layout of
/// the gemm's right operand (`Wᵀ` as `PackedB`): panels of NR = 32 output
/// channels, each `[IC/2][32][2]`. Decode ([`Self::matvec`]) streams the
/// panels, each one contiguous read; prefill ([`Self::matmul`]) multiplies
/// them with no repack where `vdpbf16ps` outruns f32 FMAs, else widens them
/// to f32 a band at a time: one copy of the weights serves both. Made only
/// where the CPU has AVX-512 BF16, the kernels that read this layout.
pub struct Bf16Panels {
    ic: usize,
    b: PackedB,
}

impl std::fmt::Debug for Bf16Panels {
    /// The shape only: the data would be millions of numbers.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bf16Panels(IC {}, OC {})", self.ic, self.b.n)
    }
}

impl Bf16Panels {
    /// bf16 of the f32 weight `src` (`[IC, OC]` or `[OC, IC]` per `layout`),
    /// in huge pages. `release(part)` is called on each part of `src` once
    /// read (see [`super::quant::Release`]). `None` where the CPU lacks
    /// AVX-512 BF16.
    pub fn convert(
        src: &[f32],
        ic: usize,
        oc: usize,
        layout: SourceLayout,
        release: &(dyn Fn(&[f32]) + Sync),
    ) -> Option<Bf16Panels> {
        assert_eq!(src.len(), ic * oc, "Bf16Panels: source must hold IC·OC");
        if !has_avx512bf16() {
            return None;
        }
        let kp = ic + (ic & 1);
        let mut data = crate::util::alloc::huge_zeroed::<u16>(panels_len(ic, oc));
        // `rows` rows of the source into their (zeroed) panels; padding stays zero.
        let fill = |d: &mut [u16], s: &[f32], rows: usize| {
            to_bf16_at(d, s, ic, rows, layout, release, |o, i| {
                panel_offset(o, i, kp)
            })
        };
        match layout {
            // Groups of whole panels (about 1 MiB of source each) converted
            // in parallel, each source part released when done.
            SourceLayout::OutIn if ic > 0 => {
                let panels = ((1 << 18) / (NR * ic)).max(1);
                data.par_chunks_mut(panels * kp * NR)
                    .zip(src.par_chunks(panels * NR * ic))
                    .for_each(|(d, s)| fill(d, s, s.len() / ic));
            }
            _ => fill(&mut data, src, oc),
        }
        Some(Bf16Panels {
            ic,
            b: PackedB {
                n: oc,
                k: ic,
                kp,
                data,
            },
        })
    }

    /// `(IC, OC)`.
    pub fn shape(&self) -> (usize, usize) {
        (self.ic, self.b.n)
    }

    /// Bytes of the panels.
    pub fn bytes(&self) -> usize {
        self.b.data.len() * 2
    }

    /// `dst[IC]` = row `o` of W in f32 (an embedding lookup).
    pub fn row_into(&self, o: usize, dst: &mut [f32]) {
        assert!(o < self.b.n && dst.len() == self.ic, "Bf16Panels: row {o}");
        for (i, d) in dst.iter_mut().enumerate() {
            *d = bf16_to_f32(self.b.data[panel_offset(o, i, self.b.kp)]);
        }
    }

    /// `out[N, OC] = bf16(x[N, IC])·Wᵀ`, summed in f32; no bias: through the
    /// bf16 gemm ([`Self::matmul_packed`]) where [`bf16_dot_is_fast`], else
    /// through f32 FMAs ([`Self::matmul_widened`]).
    pub fn matmul(&self, out: &mut [f32], x: &[f32], n: usize) {
        if bf16_dot_is_fast() {
            self.matmul_packed(out, x, n)
        } else {
            self.matmul_widened(out, x, n)
        }
    }

    /// `out[N, OC] = gelu?(bias + bf16(x[N, IC])·Wᵀ)`, the bias and the GELU
    /// each optional: [`Self::matmul_packed_fused`] where
    /// [`bf16_dot_is_fast`], else [`Self::matmul_widened`] and passes over
    /// `out` (the sum, then the bias, then GELU).
    pub fn matmul_fused(
        &self,
        out: &mut [f32],
        x: &[f32],
        n: usize,
        bias: Option<&[f32]>,
        gelu: Option<Gelu>,
    ) {
        self.check_bias(bias);
        if bf16_dot_is_fast() {
            return self.matmul_packed_with(out, x, n, Epilogue { bias, gelu });
        }
        self.matmul_widened(out, x, n);
        if let Some(b) = bias {
            super::add_bias_rows(out, b);
        }
        if let Some(kind) = gelu {
            super::gelu_in_place(out, kind);
        }
    }

    /// [`Self::matmul_fused`] through the AVX-512 BF16 gemm, whatever its
    /// speed: each tile's sums start from the bias and take the GELU as
    /// they are finished, in registers and L1 (no passes over `out`). The
    /// GELU's arithmetic is [`super::gelu_forward`]'s: the same bits as that
    /// pass over the biased product.
    pub fn matmul_packed_fused(
        &self,
        out: &mut [f32],
        x: &[f32],
        n: usize,
        bias: Option<&[f32]>,
        gelu: Option<Gelu>,
    ) {
        self.check_bias(bias);
        self.matmul_packed_with(out, x, n, Epilogue { bias, gelu })
    }

    fn check_bias(&self, bias: Option<&[f32]>) {
        if let Some(b) = bias {
            assert_eq!(b.len(), self.b.n, "Bf16Panels::matmul: bias must be [OC]");
        }
    }

    /// [`Self::matmul`] through the AVX-512 BF16 gemm, whatever its speed.
    pub fn matmul_packed(&self, out: &mut [f32], x: &[f32], n: usize) {
        self.matmul_packed_with(out, x, n, Epilogue::NONE)
    }

    fn matmul_packed_with(&self, out: &mut [f32], x: &[f32], n: usize, epi: Epilogue<'_>) {
        let (ic, oc) = self.shape();
        assert_eq!(out.len(), n * oc, "Bf16Panels::matmul: out must be [N,OC]");
        assert_eq!(x.len(), n * ic, "Bf16Panels::matmul: x must be [N,IC]");
        #[cfg(target_arch = "x86_64")]
        {
            let a = PackedA::pack(
                Src {
                    data: x,
                    rs: ic,
                    cs: 1,
                },
                n,
                ic,
            );
            // SAFETY: panels are only made where the CPU has AVX-512 BF16.
            unsafe { gemm_packed_on(out, oc, false, &a, self.b.as_ref(), true, epi) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = epi;
            unreachable!("Bf16Panels are x86-64 only");
        }
    }

    /// [`Self::matmul`] through the f32 gemm, for CPUs whose bf16 dot product
    /// is slower than their FMAs: bands of whole panels (about 4 MiB of f32,
    /// cache-sized) widened to `[IC, cols]` rows, which the f32 gemm reads in
    /// place. The weights stay bf16 in memory; the products are those of
    /// the bf16 gemm (bf16 operands are exact in f32) up to summation order.
    pub fn matmul_widened(&self, out: &mut [f32], x: &[f32], n: usize) {
        use super::gemm::{gemm_f32, MatMut, MatRef};
        let (ic, oc) = self.shape();
        assert_eq!(out.len(), n * oc, "Bf16Panels::matmul: out must be [N,OC]");
        assert_eq!(x.len(), n * ic, "Bf16Panels::matmul: x must be [N,IC]");
        if n == 0 || oc == 0 {
            return;
        }
        let panels = oc.div_ceil(NR);
        let band_panels = ((1 << 20) / (ic.max(1) * NR)).clamp(1, panels);
        super::with_scratch(n * ic + ic * band_panels * NR, |s| {
            let (xr, band) = s.split_at_mut(n * ic);
            round_into(xr, x);
            for p0 in (0..panels).step_by(band_panels) {
                let p1 = (p0 + band_panels).min(panels);
                let (j0, cols) = (p0 * NR, (p1 * NR).min(oc) - p0 * NR);
                let band = &mut band[..ic * cols];
                self.widen_panels(p0, cols, band);
                gemm_f32(
                    MatMut::strided(&mut out[j0..], n, cols, oc as isize, 1),
                    MatRef::row_major(xr, n, ic),
                    MatRef::row_major(band, ic, cols),
                );
            }
        });
    }

    /// `band[IC, cols]` = columns `p0·NR .. p0·NR + cols` of `Wᵀ` in f32,
    /// row-major: K pairs of panels `p0..` split into two rows each.
    fn widen_panels(&self, p0: usize, cols: usize, band: &mut [f32]) {
        let (ic, kp) = (self.ic, self.b.kp);
        debug_assert_eq!(band.len(), ic * cols);
        // 16 K pairs (32 rows) per task.
        const PAIRS: usize = 16;
        band.par_chunks_mut(2 * PAIRS * cols)
            .enumerate()
            .for_each(|(t, rows)| {
                for (qi, two) in rows.chunks_mut(2 * cols).enumerate() {
                    let q = t * PAIRS + qi;
                    let (r0, r1) = two.split_at_mut(cols.min(two.len()));
                    for (pi, j) in (0..cols).step_by(NR).enumerate() {
                        let c = NR.min(cols - j);
                        let at = (p0 + pi) * kp * NR + q * NR * 2;
                        let src = &self.b.data[at..at + 2 * c];
                        for (jj, pair) in src.chunks_exact(2).enumerate() {
                            r0[j + jj] = bf16_to_f32(pair[0]);
                        }
                        // The odd row of an odd IC is padding: absent from `band`.
                        if !r1.is_empty() {
                            for (jj, pair) in src.chunks_exact(2).enumerate() {
                                r1[j + jj] = bf16_to_f32(pair[1]);
                            }
                        }
                    }
                }
            });
    }

    /// `out[N, OC] = bf16(x[N, IC])·Wᵀ + bias` for a few rows (decode): each
    /// task streams its panels once, applying up to four rows of `x` to each
    /// pair of K, and sums every output in one fixed order whatever the
    /// thread count (even and odd pairs apart, then together). `x` is
    /// rounded to bf16 as [`Self::matmul`] rounds it, so decode and prefill
    /// agree up to summation order.
    pub fn matvec(&self, out: &mut [f32], x: &[f32], bias: Option<&[f32]>, n: usize) {
        let (ic, oc) = self.shape();
        let kp = self.b.kp;
        assert_eq!(out.len(), n * oc, "Bf16Panels::matvec: out must be [N,OC]");
        assert_eq!(x.len(), n * ic, "Bf16Panels::matvec: x must be [N,IC]");
        if let Some(b) = bias {
            assert_eq!(b.len(), oc, "Bf16Panels::matvec: bias must be [OC]");
        }
        if n == 0 || oc == 0 {
            return;
        }
        // x as K pairs, one 32-bit word each: the operand vdpbf16ps broadcasts.
        let pairs = kp / 2;
        let mut xp = vec![0u32; n * pairs];
        for (row, dst) in x
            .chunks_exact(ic.max(1))
            .zip(xp.chunks_exact_mut(pairs.max(1)))
        {
            for (i, &v) in row.iter().enumerate() {
                dst[i / 2] |= (f32_to_bf16(v) as u32) << (16 * (i & 1));
            }
        }
        let panel_len = kp * NR;
        // About 64 KiB of weights per task (one panel at GPT-2's widths).
        let per_task = ((64 << 10) / (panel_len * 2).max(1)).max(1);
        let panels = oc.div_ceil(NR);
        let ptr = SendPtr(out.as_mut_ptr());
        (0..panels.div_ceil(per_task))
            .into_par_iter()
            .for_each(|t| {
                let mut sums = [[0f32; NR]; 4];
                for p in t * per_task..((t + 1) * per_task).min(panels) {
                    let panel = &self.b.data[p * panel_len..(p + 1) * panel_len];
                    let (j0, cols) = (p * NR, NR.min(oc - p * NR));
                    for k0 in (0..n).step_by(4) {
                        let rows = 4.min(n - k0);
                        let xs = &xp[k0 * pairs..(k0 + rows) * pairs];
                        #[cfg(target_arch = "x86_64")]
                        // SAFETY: panels are only made where the CPU has AVX-512
                        // BF16; `panel` holds `pairs` pairs of NR columns and
                        // `xs` `rows` rows of `pairs` words.
                        unsafe {
                            match rows {
                                1 => panel_rows_avx512::<1>(panel, xs, pairs, &mut sums),
                                2 => panel_rows_avx512::<2>(panel, xs, pairs, &mut sums),
                                3 => panel_rows_avx512::<3>(panel, xs, pairs, &mut sums),
                                _ => panel_rows_avx512::<4>(panel, xs, pairs, &mut sums),
                            }
                        }
                        // (No other arm: `convert` makes panels only on x86-64
                        // with AVX-512 BF16.)
                        for (r, s) in sums.iter().enumerate().take(rows) {
                            // SAFETY: row k0 + r < n, columns j0..j0 + cols < OC:
                            // inside `out`, and only this task writes them.
                            let dst = unsafe {
                                std::slice::from_raw_parts_mut(
                                    ptr.get().add((k0 + r) * oc + j0),
                                    cols,
                                )
                            };
                            for (j, d) in dst.iter_mut().enumerate() {
                                *d = s[j] + bias.map_or(0.0, |b| b[j0 + j]);
                            }
                        }
                    }
                }
            });
    }
}

/// `sums[r][j] = Σ_q x[r, pair q] · panel[q][j]` for the R rows of `xs`
/// (`[R][pairs]` words) and one panel: two accumulators per 16 columns (even
/// and odd pairs) so that the chains of `vdpbf16ps` overlap. No horizontal
/// sums: each lane is one output channel.
///
/// # Safety
/// The CPU must have AVX-512 BF16; `panel` holds `pairs·NR` pairs, `xs`
/// `R·pairs` words.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
unsafe fn panel_rows_avx512<const R: usize>(
    panel: &[u16],
    xs: &[u32],
    pairs: usize,
    sums: &mut [[f32; NR]; 4],
) {
    use std::arch::x86_64::*;
    debug_assert!(panel.len() >= pairs * NR * 2 && xs.len() >= R * pairs);
    let load =
        |p: *const u16| -> __m512bh { std::mem::transmute(_mm512_loadu_si512(p as *const _)) };
    let bcast = |w: u32| -> __m512bh { std::mem::transmute(_mm512_set1_epi32(w as i32)) };
    // [row][even pairs, odd pairs][columns 0..16, 16..32]
    let mut acc = [[[_mm512_setzero_ps(); 2]; 2]; R];
    let wp = panel.as_ptr();
    // SAFETY (loads below): pair q < pairs, whose NR pairs lie in `panel`;
    // row r < R, whose words lie in `xs`.
    let pair = |q: usize| (load(wp.add(q * NR * 2)), load(wp.add(q * NR * 2 + 32)));
    let mut q = 0;
    while q + 2 <= pairs {
        // Two pairs of NR columns: four cache lines.
        for line in 0..4 {
            super::simd::prefetch_ahead(wp.wrapping_add(q * NR * 2 + line * 32));
        }
        let ((w0, w1), (v0, v1)) = (pair(q), pair(q + 1));
        for (r, [even, odd]) in acc.iter_mut().enumerate() {
            let x0 = bcast(*xs.get_unchecked(r * pairs + q));
            let x1 = bcast(*xs.get_unchecked(r * pairs + q + 1));
            even[0] = _mm512_dpbf16_ps(even[0], w0, x0);
            even[1] = _mm512_dpbf16_ps(even[1], w1, x0);
            odd[0] = _mm512_dpbf16_ps(odd[0], v0, x1);
            odd[1] = _mm512_dpbf16_ps(odd[1], v1, x1);
        }
        q += 2;
    }
    if q < pairs {
        let (w0, w1) = pair(q);
        for (r, [even, _]) in acc.iter_mut().enumerate() {
            let x0 = bcast(*xs.get_unchecked(r * pairs + q));
            even[0] = _mm512_dpbf16_ps(even[0], w0, x0);
            even[1] = _mm512_dpbf16_ps(even[1], w1, x0);
        }
    }
    for ([even, odd], s) in acc.iter().zip(sums.iter_mut()) {
        for (h, (e, o)) in even.iter().zip(odd).enumerate() {
            _mm512_storeu_ps(s.as_mut_ptr().add(16 * h), _mm512_add_ps(*e, *o));
        }
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

    /// Packs `w` and `bias` (of the same shapes) again into these buffers
    /// ([`Bf16Weight::repack`]).
    pub fn repack(&mut self, w: &[f32], bias: Option<&[f32]>) {
        self.w.repack(w);
        match (&mut self.bias, bias) {
            (Some(dst), Some(b)) => dst.copy_from_slice(b),
            (dst, b) => *dst = b.map(<[f32]>::to_vec),
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

    /// Both operands' packed layouts, element by element from their index
    /// formulas, from row-major and transposed sources, with row, column and
    /// K tails (on AVX-512 BF16 the vector packers, elsewhere the scalar
    /// ones); padding is zero.
    #[test]
    fn packing_places_every_element() {
        for &(rows, cols) in &[(1, 1), (14, 32), (15, 33), (29, 37), (3, 70), (40, 17)] {
            let data: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0 + 0.001 * i as f32)
                .collect();
            // (rs, cs): the source row-major, or its transpose read back.
            for (rs, cs, m, k) in [(cols, 1, rows, cols), (1, cols, cols, rows)] {
                let src = Src {
                    data: &data,
                    rs,
                    cs,
                };
                let at = |r: usize, c: usize| f32_to_bf16(data[r * rs + c * cs]);
                let a = PackedA::pack(src, m, k);
                let kp = a.kp;
                assert_eq!(a.pair_major, cs != 1);
                let mut want = vec![0u16; a.data.len()];
                for r in 0..m {
                    for kk in 0..k {
                        let (s, rr) = (r / MR, r % MR);
                        let pos = s * MR * kp
                            + if a.pair_major {
                                (kk / 2) * MR * 2 + rr * 2 + (kk & 1)
                            } else {
                                rr * kp + kk
                            };
                        want[pos] = at(r, kk);
                    }
                }
                assert_eq!(a.data, want, "A {m}x{k} rs {rs} cs {cs}");
                // The same source as B[K=m, N'=k].
                let b = PackedB::pack(src, m, k);
                let kp = b.kp;
                let mut want = vec![0u16; b.data.len()];
                for kk in 0..m {
                    for j in 0..k {
                        let pos = (j / NR) * kp * NR + (kk / 2) * NR * 2 + (j % NR) * 2 + (kk & 1);
                        want[pos] = at(kk, j);
                    }
                }
                assert_eq!(b.data, want, "B {m}x{k} rs {rs} cs {cs}");
            }
            // The engines' panels of W[OC = rows, IC = cols], converted from
            // either orientation: the layout of packing Wᵀ as B.
            let t: Vec<f32> = (0..rows * cols)
                .map(|i| data[(i % rows) * cols + i / rows])
                .collect();
            let packed = PackedB::pack(
                Src {
                    data: &data,
                    rs: 1,
                    cs: cols,
                },
                cols,
                rows,
            );
            for (src, layout) in [(&data, SourceLayout::OutIn), (&t, SourceLayout::InOut)] {
                let Some(p) = Bf16Panels::convert(src, cols, rows, layout, &|_| {}) else {
                    assert!(
                        !has_avx512bf16(),
                        "panels are made where the CPU has the kernel"
                    );
                    continue;
                };
                assert_eq!(p.shape(), (cols, rows));
                assert_eq!(p.b.kp, packed.kp);
                assert_eq!(
                    p.b.data, packed.data,
                    "panels {rows}x{cols} from {layout:?}"
                );
                let mut row = vec![0f32; cols];
                for o in 0..rows {
                    p.row_into(o, &mut row);
                    let want: Vec<f32> = data[o * cols..(o + 1) * cols]
                        .iter()
                        .map(|&v| bf16_to_f32(f32_to_bf16(v)))
                        .collect();
                    assert_eq!(row, want, "row {o}");
                }
            }
        }
    }

    /// The speed check's verdict is false wherever the instruction is
    /// missing (its rates are [`super::super::probe`]'s, tested there).
    #[test]
    fn bf16_dot_is_slow_without_the_instruction() {
        if !has_avx512bf16() {
            assert!(!bf16_dot_is_fast());
        }
    }

    /// A weight `[OC,K]`, an input `[N,K]` and a bias `[OC]` of spread values.
    fn operands(n: usize, k: usize, oc: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let w = (0..oc * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 50.0)
            .collect();
        let x = (0..n * k)
            .map(|i| ((i * 53 % 89) as f32 - 44.0) / 30.0)
            .collect();
        (w, x, (0..oc).map(|i| i as f32 * 0.1).collect())
    }

    /// AMX tiles against the AVX-512 kernel on the same packed operands:
    /// forwards with a bias (whole tiles and the edges through the scratch
    /// tile, K tails after the AMX steps) and the input gradient (dY·Wᵀ,
    /// its A row-major too), within f32 rounding.
    #[cfg(target_arch = "x86_64")]
    #[test]
    #[ignore = "needs Intel AMX (amx_bf16 in /proc/cpuinfo, granted by the OS): scripts/test.sh runs it there"]
    fn amx_products_match_avx512() {
        assert!(
            amx_usable(),
            "AMX absent, not granted, or its self-check failed"
        );
        for &(n, k, oc) in &[
            (14, 32, 32),
            (29, 37, 70),
            (40, 96, 64),
            (30, 1100, 70),
            (64, 768, 96),
        ] {
            let (w, x, b) = operands(n, k, oc);
            let dy: Vec<f32> = (0..n * oc)
                .map(|i| ((i * 29 % 83) as f32 - 41.0) / 40.0)
                .collect();
            let packed = PackedBf16::pack(&w, Some(&b), oc, k);
            let run = || {
                let mut out = vec![f32::NAN; n * oc];
                packed.forward(&mut out, &x, n);
                let mut dx = vec![f32::NAN; n * k];
                let grad = Some((dx.as_mut_slice(), GradWrite::Set));
                matmul_backward_bf16(grad, None, None, &dy, &x, &packed.w, n);
                (out, dx)
            };
            let (amx, avx) = (run(), without_amx(run));
            for (got, want) in amx.0.iter().chain(&amx.1).zip(avx.0.iter().chain(&avx.1)) {
                assert!(
                    (got - want).abs() <= 1e-5 * (1.0 + want.abs()) * (k as f32).sqrt(),
                    "{n}x{k}x{oc}: {got} vs {want}"
                );
            }
        }
    }

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
            let (w, x, b) = operands(n, k, oc);
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

    fn packed_data(w: &Bf16Weight) -> Vec<Vec<u16>> {
        match &w.packed {
            Packed::Avx512 { fwd, bwd } => {
                let mut v = vec![fwd.data.clone()];
                v.extend(bwd.as_ref().map(|b| b.data.clone()));
                v
            }
            Packed::Portable { w, .. } => vec![w.iter().map(|x| f32_to_bf16(*x)).collect()],
        }
    }

    /// A copy packed again from other values is the copy packed from them
    /// afresh, padding included (odd K, column tails), on every kernel.
    #[test]
    fn repack_equals_a_fresh_pack() {
        let mut kernels = vec![Bf16Kernel::Portable];
        if has_avx512bf16() {
            kernels.push(Bf16Kernel::Avx512);
        }
        for (c, oc) in [(37, 45), (64, 32), (3, 70)] {
            let w1: Vec<f32> = (0..c * oc).map(|i| (i % 17) as f32 - 8.0).collect();
            let w2: Vec<f32> = (0..c * oc).map(|i| ((i * 7) % 13) as f32 * 0.25).collect();
            for layout in [WeightLayout::InOut, WeightLayout::OutIn] {
                for &kernel in &kernels {
                    for backward in [false, true] {
                        let mut w = Bf16Weight::pack_with(&w1, c, oc, layout, kernel, backward);
                        w.repack(&w2);
                        let fresh = Bf16Weight::pack_with(&w2, c, oc, layout, kernel, backward);
                        assert_eq!(
                            packed_data(&w),
                            packed_data(&fresh),
                            "{c}x{oc} {layout:?} {kernel:?} backward {backward}"
                        );
                    }
                }
            }
        }
    }

    /// Operands packed into pooled buffers that held NaNs give the products
    /// of fresh buffers: every element a stored result reads is written.
    #[test]
    fn pooled_buffers_leave_no_stale_values() {
        if !bf16_dot_is_fast() {
            return; // Only the AVX-512 kernel packs per product.
        }
        let (n, c, oc) = (29, 37, 45);
        let x: Vec<f32> = (0..n * c).map(|i| ((i * 5) % 11) as f32 - 5.0).collect();
        let dy: Vec<f32> = (0..n * oc).map(|i| ((i * 3) % 7) as f32 - 3.0).collect();
        let w: Vec<f32> = (0..c * oc).map(|i| (i % 9) as f32 * 0.5 - 2.0).collect();
        for layout in [WeightLayout::InOut, WeightLayout::OutIn] {
            let pw = Bf16Weight::pack_with(&w, c, oc, layout, Bf16Kernel::Avx512, true);
            let run = || {
                let mut out = vec![0.0; n * oc];
                matmul_forward_bf16(&mut out, &x, &pw, None, n);
                let (mut dx, mut dw) = (vec![0.0; n * c], vec![0.0; c * oc]);
                matmul_backward_bf16(
                    Some((&mut dx, GradWrite::Add)),
                    Some(&mut dw),
                    None,
                    &dy,
                    &x,
                    &pw,
                    n,
                );
                [out, dx, dw]
            };
            let clean = rayon::ThreadPoolBuilder::new()
                .num_threads(1)
                .build()
                .expect("pool");
            let want = clean.install(run);
            let got = clean.install(|| {
                for _ in 0..POOL_BUFFERS {
                    recycle(vec![0x7fc0; 1 << 16]);
                }
                run()
            });
            assert!(got[0]
                .iter()
                .chain(&got[1])
                .chain(&got[2])
                .all(|v| v.is_finite()));
            assert_eq!(got, want, "{layout:?}");
        }
    }
}
