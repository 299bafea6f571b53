//! GPT-2 weights in an inference format: where they live and how the
//! matrices are multiplied.
//!
//! Shape legend: V vocabulary, P positions, C channels, I MLP width,
//! IC/OC input/output channels of a matrix, N rows of activations.
//!
//! f32 matrices are copied once, from the memory-mapped checkpoint (whose
//! pages are then released) or the caller's parameter buffer, so resident
//! memory is about the file size; vectors and `wpe` stay in the map. bf16
//! and int8 convert the four matrices of each block and the
//! tied `wte` into `[OC, IC]` rows (what the decode kernels stream); each
//! mapped f32 page is released as soon as it has been converted, so the
//! process never holds both copies of a large tensor. Vectors (biases,
//! LayerNorm) and `wpe` stay f32.
//!
//! Every copied or converted matrix asks for transparent huge pages
//! ([`crate::util::alloc::huge_zeroed`], [`crate::util::alloc::huge_copy`]):
//! decode streams every weight byte once per token, and with 4 KiB pages
//! each page boundary stalls the prefetchers. Measured on 124M, 2 threads:
//! on an AMD EPYC (Zen 5) bf16 decode +9%, int8 +3% (its block matrices are
//! under 2 MiB, so mostly `wte` gains), f32 +7%; on an Intel Xeon (Emerald
//! Rapids) f32 +20% (36 → 43 tokens/s), for +0.1 s of start-up.

use std::any::Any;
use std::str::FromStr;
use std::sync::Arc;

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::kernels::bf16_gemm::bf16_dot_is_fast;
use crate::kernels::gemm::{gemm_f32, MatMut, MatRef};
use crate::kernels::matvec::{
    in_out_partials_len, matvec_bf16, matvec_f32_in_out, matvec_f32_out_in,
};
use crate::kernels::quant::{bf16_rows_to_f32, quantize_int8_out_in, to_bf16_out_in, SourceLayout};
use crate::kernels::{
    add_bias_rows, bf16_rounded, matmul_forward, Bf16Panels, Gelu, PackedInt8, WeightLayout,
};

/// The number format of the large matrices at inference time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WeightDtype {
    /// As stored (f32 matrices copied once, unconverted).
    #[default]
    F32,
    /// bfloat16: half the bytes; products use AVX-512 BF16 where available.
    Bf16,
    /// int8 with one f32 scale per output channel: a quarter of the bytes.
    /// Products quantize their activations per row to u8 as they run
    /// (dynamic quantization, [`crate::kernels::int8_gemm`]).
    Int8,
}

impl WeightDtype {
    pub fn as_str(self) -> &'static str {
        match self {
            WeightDtype::F32 => "f32",
            WeightDtype::Bf16 => "bf16",
            WeightDtype::Int8 => "int8",
        }
    }
}

impl FromStr for WeightDtype {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "f32" | "float32" => Ok(WeightDtype::F32),
            "bf16" | "bfloat16" => Ok(WeightDtype::Bf16),
            "int8" | "i8" => Ok(WeightDtype::Int8),
            _ => Err(Error::InvalidInput(format!(
                "unknown weight dtype `{s}` (expected f32, bf16, int8 or auto)"
            ))),
        }
    }
}

impl WeightDtype {
    /// An error when matrices with `k` inputs cannot be held in this
    /// format (int8: the kernels' i32 sums bound K).
    pub(crate) fn check_inputs(self, k: usize) -> Result<()> {
        if self == WeightDtype::Int8 && k > crate::kernels::int8_gemm::MAX_K {
            return Err(Error::InvalidInput(format!(
                "int8 weights need matrices of at most {} inputs (this model has {k})",
                crate::kernels::int8_gemm::MAX_K
            )));
        }
        Ok(())
    }
}

impl std::fmt::Display for WeightDtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An f32 slice borrowed from storage that `keep` holds alive: a memory map
/// or a shared parameter buffer. Cheap to clone.
#[derive(Clone)]
pub(crate) struct F32Slice {
    _keep: Arc<dyn Any + Send + Sync>,
    ptr: *const f32,
    len: usize,
}

// SAFETY: the pointed-to memory is immutable for as long as `keep` lives (a
// read-only map or a buffer nobody mutates), and `keep` is itself Send+Sync.
unsafe impl Send for F32Slice {}
unsafe impl Sync for F32Slice {}

impl F32Slice {
    /// `data` must point into storage owned by `keep`.
    pub(crate) fn borrowed(keep: Arc<dyn Any + Send + Sync>, data: &[f32]) -> Self {
        F32Slice {
            _keep: keep,
            ptr: data.as_ptr(),
            len: data.len(),
        }
    }

    pub(crate) fn owned(data: Vec<f32>) -> Self {
        let data: Arc<Vec<f32>> = Arc::new(data);
        let (ptr, len) = (data.as_ptr(), data.len());
        F32Slice {
            _keep: data,
            ptr,
            len,
        }
    }

    pub(crate) fn as_slice(&self) -> &[f32] {
        // SAFETY: ptr/len describe a live, immutable allocation held by `keep`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl std::ops::Deref for F32Slice {
    type Target = [f32];
    fn deref(&self) -> &[f32] {
        self.as_slice()
    }
}

impl std::fmt::Debug for F32Slice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "F32Slice[{}]", self.len)
    }
}

/// Largest N for which the matrix-vector kernels beat a matmul: they read
/// the weights once but do N times the arithmetic without register blocking.
pub(crate) const MATVEC_MAX_ROWS: usize = 4;

/// f32 elements of `[OC, IC]` rows widened at a time when a bf16/int8
/// matrix is multiplied by many rows (prefill, perplexity): per row of the
/// input, within bounds. Small inputs (a short prompt) keep the scratch at
/// 1 MiB for the decode's memory peak; long ones (a 1024-token window) get
/// tiles big enough that the gemm calls stay efficient (a 16 MiB tile runs
/// perplexity 1.3x faster than a 1 MiB one), still less than the
/// activations of that many rows.
const DEQUANT_TILE_PER_ROW: usize = 1 << 13;
const DEQUANT_TILE_MIN: usize = 1 << 18;
const DEQUANT_TILE_MAX: usize = 1 << 22;

/// One weight matrix, `y[N, OC] = x[N, IC] · W + b`.
pub(crate) enum Matrix {
    /// f32 `[IC, OC]` (Conv1D as stored).
    F32InOut { w: F32Slice, ic: usize, oc: usize },
    /// f32 `[OC, IC]` (`wte` as the tied LM head).
    F32OutIn { w: F32Slice, ic: usize, oc: usize },
    /// bf16 `[OC, IC]` rows, where the CPU lacks AVX-512 BF16.
    Bf16 { w: Vec<u16>, ic: usize, oc: usize },
    /// bf16 in the packed panels of the AVX-512 BF16 kernels: prefill's
    /// gemm and decode's matvec read the same copy.
    Bf16Panels(Bf16Panels),
    /// int8, one scale per output channel, packed for the int8 kernels.
    Int8(PackedInt8),
}

impl std::fmt::Debug for Matrix {
    /// Format and shape only: the data would be millions of numbers.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self {
            Matrix::F32InOut { .. } => "f32 [IC, OC]",
            Matrix::F32OutIn { .. } => "f32 [OC, IC]",
            Matrix::Bf16 { .. } => "bf16 [OC, IC]",
            Matrix::Bf16Panels(_) => "bf16 panels",
            Matrix::Int8(_) => "int8 packed",
        };
        write!(f, "Matrix({kind}, IC {}, OC {})", self.ic(), self.oc())
    }
}

impl Matrix {
    /// Converts f32 data in `layout` order to `dtype`: bf16 panels where the
    /// CPU has AVX-512 BF16, else bf16 `[OC, IC]` rows; int8 packed.
    /// `release(part)` is called on each part of `src` once converted, so
    /// that mapped pages can be dropped early.
    pub(crate) fn quantize(
        src: &[f32],
        layout: SourceLayout,
        ic: usize,
        oc: usize,
        dtype: WeightDtype,
        release: &(dyn Fn(&[f32]) + Sync),
    ) -> Matrix {
        debug_assert_eq!(src.len(), ic * oc);
        let rows = chunk_rows(ic);
        match dtype {
            WeightDtype::F32 => {
                let w = F32Slice::owned(src.to_vec());
                match layout {
                    SourceLayout::InOut => Matrix::F32InOut { w, ic, oc },
                    SourceLayout::OutIn => Matrix::F32OutIn { w, ic, oc },
                }
            }
            WeightDtype::Bf16 => Bf16Panels::convert(src, ic, oc, layout, release).map_or_else(
                || Self::bf16_rows(src, layout, ic, oc, release),
                Matrix::Bf16Panels,
            ),
            WeightDtype::Int8 => {
                let mut w = vec![0i8; ic * oc];
                let mut scales = vec![0f32; oc];
                match layout {
                    SourceLayout::OutIn => w
                        .par_chunks_mut(rows * ic)
                        .zip(scales.par_chunks_mut(rows))
                        .zip(src.par_chunks(rows * ic))
                        .for_each(|((d, sc), s)| {
                            quantize_int8_out_in(
                                d,
                                sc,
                                s,
                                ic,
                                sc.len(),
                                SourceLayout::OutIn,
                                release,
                            )
                        }),
                    SourceLayout::InOut => quantize_int8_out_in(
                        &mut w,
                        &mut scales,
                        src,
                        ic,
                        oc,
                        SourceLayout::InOut,
                        release,
                    ),
                }
                Matrix::Int8(PackedInt8::from_rows(&w, &scales, ic, oc))
            }
        }
    }

    /// bf16 `[OC, IC]` rows: the format of CPUs without AVX-512 BF16.
    fn bf16_rows(
        src: &[f32],
        layout: SourceLayout,
        ic: usize,
        oc: usize,
        release: &(dyn Fn(&[f32]) + Sync),
    ) -> Matrix {
        let mut w = crate::util::alloc::huge_zeroed::<u16>(ic * oc);
        match layout {
            // Row chunks converted in parallel, each released when done.
            SourceLayout::OutIn => {
                let rows = chunk_rows(ic);
                w.par_chunks_mut(rows * ic)
                    .zip(src.par_chunks(rows * ic))
                    .for_each(|(d, s)| {
                        to_bf16_out_in(d, s, ic, s.len() / ic, SourceLayout::OutIn, release)
                    })
            }
            SourceLayout::InOut => {
                to_bf16_out_in(&mut w, src, ic, oc, SourceLayout::InOut, release)
            }
        }
        Matrix::Bf16 { w, ic, oc }
    }

    pub(crate) fn ic(&self) -> usize {
        match self {
            Matrix::F32InOut { ic, .. } | Matrix::F32OutIn { ic, .. } | Matrix::Bf16 { ic, .. } => {
                *ic
            }
            Matrix::Int8(w) => w.shape().0,
            Matrix::Bf16Panels(p) => p.shape().0,
        }
    }

    pub(crate) fn oc(&self) -> usize {
        match self {
            Matrix::F32InOut { oc, .. } | Matrix::F32OutIn { oc, .. } | Matrix::Bf16 { oc, .. } => {
                *oc
            }
            Matrix::Int8(w) => w.shape().1,
            Matrix::Bf16Panels(p) => p.shape().1,
        }
    }

    /// Bytes the matrix occupies in its inference format.
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Matrix::F32InOut { w, .. } | Matrix::F32OutIn { w, .. } => w.len() * 4,
            Matrix::Bf16 { w, .. } => w.len() * 2,
            Matrix::Int8(w) => w.bytes(),
            Matrix::Bf16Panels(p) => p.bytes(),
        }
    }

    /// `out[N, OC] = x[N, IC] · W + bias`. int8 weights go through the int8
    /// kernels at every N (activations quantized per row, so a row's result
    /// does not depend on N). bf16 panels (AVX-512 BF16) go through their
    /// matvec for small N and the bf16 gemm beyond. Otherwise small N goes
    /// through the matrix-vector kernels; larger N through a matmul, bf16
    /// rows widened to f32 one tile at a time. A bf16 matrix multiplies
    /// bf16-rounded activations on every path (as the bf16 gemm must), so
    /// decode and prefill agree up to summation order.
    pub(crate) fn forward(
        &self,
        out: &mut [f32],
        x: &[f32],
        bias: Option<&[f32]>,
        n: usize,
        scratch: &mut Vec<f32>,
    ) {
        let (ic, oc) = (self.ic(), self.oc());
        debug_assert_eq!(x.len(), n * ic);
        debug_assert_eq!(out.len(), n * oc);
        if let Matrix::Int8(w) = self {
            w.forward(out, x, bias, n);
            return;
        }
        if let Matrix::Bf16Panels(p) = self {
            // Both kernels round the activations to bf16 themselves.
            if n <= MATVEC_MAX_ROWS {
                p.matvec(out, x, bias, n);
            } else {
                p.matmul_fused(out, x, n, bias, None);
            }
            return;
        }
        let x_bf16;
        let x = if let Matrix::Bf16 { .. } = self {
            x_bf16 = bf16_rounded(x);
            &x_bf16[..]
        } else {
            x
        };
        if n <= MATVEC_MAX_ROWS {
            match self {
                Matrix::F32InOut { w, .. } => {
                    scratch.resize(in_out_partials_len(n, ic, oc), 0.0);
                    matvec_f32_in_out(out, scratch, x, w, bias, n, ic, oc);
                }
                Matrix::F32OutIn { w, .. } => matvec_f32_out_in(out, x, w, bias, n, ic, oc),
                Matrix::Bf16 { w, .. } => matvec_bf16(out, x, w, bias, n, ic, oc),
                Matrix::Int8(_) | Matrix::Bf16Panels(_) => unreachable!("returned above"),
            }
            return;
        }
        match self {
            Matrix::F32InOut { w, .. } => {
                matmul_forward(out, x, w, bias, n, ic, oc, WeightLayout::InOut)
            }
            Matrix::F32OutIn { w, .. } => {
                matmul_forward(out, x, w, bias, n, ic, oc, WeightLayout::OutIn)
            }
            Matrix::Int8(_) | Matrix::Bf16Panels(_) => unreachable!("returned above"),
            Matrix::Bf16 { .. } => {
                // Tiles of output channels: widen rows [o0, o1) to f32, multiply,
                // write the columns [o0, o1) of `out`.
                let tile_elems =
                    (n * DEQUANT_TILE_PER_ROW).clamp(DEQUANT_TILE_MIN, DEQUANT_TILE_MAX);
                let rows = (tile_elems / ic.max(1)).clamp(1, oc);
                scratch.resize(rows * ic, 0.0);
                for o0 in (0..oc).step_by(rows) {
                    let o1 = (o0 + rows).min(oc);
                    let tile = &mut scratch[..(o1 - o0) * ic];
                    self.widen_rows(o0, o1, tile);
                    gemm_f32(
                        MatMut::strided(&mut out[o0..], n, o1 - o0, oc as isize, 1),
                        MatRef::row_major(x, n, ic),
                        MatRef::transposed(tile, o1 - o0, ic),
                    );
                }
                if let Some(b) = bias {
                    add_bias_rows(out, b);
                }
            }
        }
    }

    /// [`Self::forward`], with GELU applied to each tile inside the product
    /// where the route has an epilogue (bf16 panels through the bf16 gemm):
    /// returns whether it did. If not, `out` holds the product alone and
    /// the caller runs GELU over it (the same numbers either way).
    pub(crate) fn forward_gelu_fused(
        &self,
        out: &mut [f32],
        x: &[f32],
        bias: Option<&[f32]>,
        n: usize,
        scratch: &mut Vec<f32>,
        kind: Gelu,
    ) -> bool {
        match self {
            Matrix::Bf16Panels(p) if n > MATVEC_MAX_ROWS && bf16_dot_is_fast() => {
                p.matmul_packed_fused(out, x, n, bias, Some(kind));
                true
            }
            _ => {
                self.forward(out, x, bias, n, scratch);
                false
            }
        }
    }

    /// `dst[IC]` = row `r` of the `[OC, IC]` matrix in f32 (an embedding lookup).
    pub(crate) fn row_into(&self, r: usize, dst: &mut [f32]) {
        let ic = self.ic();
        match self {
            Matrix::F32OutIn { w, .. } => dst.copy_from_slice(&w[r * ic..(r + 1) * ic]),
            Matrix::Bf16 { w, .. } => bf16_rows_to_f32(dst, &w[r * ic..(r + 1) * ic]),
            Matrix::Int8(w) => w.row_into(r, dst),
            Matrix::Bf16Panels(p) => p.row_into(r, dst),
            Matrix::F32InOut { w, oc, .. } => {
                for (i, d) in dst.iter_mut().enumerate() {
                    *d = w[i * oc + r];
                }
            }
        }
    }

    /// `dst[(o1 - o0), IC]` = rows `[o0, o1)` of the `[OC, IC]` matrix in f32.
    /// Only for row-major formats (bf16, f32 `[OC, IC]`).
    pub(crate) fn widen_rows(&self, o0: usize, o1: usize, dst: &mut [f32]) {
        let ic = self.ic();
        let chunk = chunk_rows(ic) * ic;
        match self {
            Matrix::F32OutIn { w, .. } => dst.copy_from_slice(&w[o0 * ic..o1 * ic]),
            Matrix::Bf16 { w, .. } => {
                dst.par_chunks_mut(chunk)
                    .zip(w[o0 * ic..o1 * ic].par_chunks(chunk))
                    .for_each(|(d, s)| bf16_rows_to_f32(d, s));
            }
            Matrix::F32InOut { .. } | Matrix::Int8(_) | Matrix::Bf16Panels(_) => {
                unreachable!("widen_rows is only used on f32 [OC, IC] and bf16-row matrices")
            }
        }
    }
}

/// Rows per conversion chunk: about 1 MiB of f32 source.
fn chunk_rows(ic: usize) -> usize {
    ((1 << 18) / ic.max(1)).max(1)
}

/// Tells the kernel that the mapped pages fully inside `data` are not needed
/// any more: they leave the process's resident set (the file stays in the
/// page cache and is read back transparently if touched again).
#[cfg(unix)]
pub(crate) fn release_mapped(data: &[f32]) {
    // SAFETY: the range is `data`, which callers only pass for read-only,
    // file-backed shared mappings (SafeTensors::open): MADV_DONTNEED there
    // discards page-table entries only; the next access reads the same
    // bytes from the file.
    unsafe {
        crate::util::alloc::advise_aligned(
            data.as_ptr() as usize,
            std::mem::size_of_val(data),
            4096,
            libc::MADV_DONTNEED,
        );
    }
}

#[cfg(not(unix))]
pub(crate) fn release_mapped(_data: &[f32]) {}

/// Returns the heap's free pages to the OS. Loading a tokenizer frees
/// megabytes of small parse buffers between allocations that live on; glibc
/// keeps those pages resident, next to the weights, unless asked.
pub(crate) fn trim_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only releases memory malloc holds free; it takes
    // malloc's own locks and is safe to call at any time.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Maps the pages of `data` (a read-only file map) into the process now, so
/// that the first forward pass does not pay a page fault per page.
pub(crate) fn prefault_mapped(data: &[f32]) {
    #[cfg(target_os = "linux")]
    {
        let page = 4096usize;
        let start = data.as_ptr() as usize / page * page;
        let end = data.as_ptr() as usize + std::mem::size_of_val(data);
        // SAFETY: [start, end) covers `data`'s pages, all inside the live
        // mapping; MADV_POPULATE_READ only faults them in (read-only). It is
        // a hint: on kernels without it the pages fault in on first use.
        let ok = unsafe {
            libc::madvise(
                start as *mut libc::c_void,
                end - start,
                libc::MADV_POPULATE_READ,
            )
        } == 0;
        if ok {
            return;
        }
    }
    // Touch one value per page.
    let step = 4096 / std::mem::size_of::<f32>();
    let mut sum = 0f32;
    for i in (0..data.len()).step_by(step) {
        // black_box keeps the otherwise unused reads.
        sum += std::hint::black_box(data[i]);
    }
    std::hint::black_box(sum);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The engine's two bf16 formats, panels (CPUs with AVX-512 BF16) and
    /// rows (the others), give the same products up to summation order at
    /// decode sizes (matvec) and prefill sizes (gemm), and the same embedding
    /// rows, so a model answers alike on either kind of CPU. Where the CPU
    /// lacks the kernel, only rows are made.
    #[test]
    fn bf16_panels_and_rows_agree() {
        let (ic, oc) = (70, 45);
        let w: Vec<f32> = (0..ic * oc)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 60.0)
            .collect();
        let bias: Vec<f32> = (0..oc).map(|i| i as f32 * 0.01).collect();
        for layout in [SourceLayout::InOut, SourceLayout::OutIn] {
            let rows = Matrix::bf16_rows(&w, layout, ic, oc, &|_| {});
            let made = Matrix::quantize(&w, layout, ic, oc, WeightDtype::Bf16, &|_| {});
            let panels = match made {
                Matrix::Bf16Panels(_) => made,
                Matrix::Bf16 { .. } => {
                    assert!(!crate::kernels::bf16_gemm::has_avx512bf16());
                    continue;
                }
                other => panic!("bf16 made {other:?}"),
            };
            let (mut a, mut b) = (vec![0f32; ic], vec![0f32; ic]);
            for o in [0, 31, 32, oc - 1] {
                rows.row_into(o, &mut a);
                panels.row_into(o, &mut b);
                assert_eq!(a, b, "{layout:?} row {o}");
            }
            for n in [1, 3, MATVEC_MAX_ROWS + 1, 9] {
                let x: Vec<f32> = (0..n * ic)
                    .map(|i| ((i * 53 % 89) as f32 - 44.0) / 30.0)
                    .collect();
                let (mut want, mut got) = (vec![0f32; n * oc], vec![f32::NAN; n * oc]);
                rows.forward(&mut want, &x, Some(&bias), n, &mut Vec::new());
                panels.forward(&mut got, &x, Some(&bias), n, &mut Vec::new());
                for (i, (g, r)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (g - r).abs() <= 1e-5 * (1.0 + r.abs()) * (ic as f32).sqrt(),
                        "{layout:?} N {n} [{i}]: panels {g} vs rows {r}"
                    );
                }
            }
        }
    }
}
