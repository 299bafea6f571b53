//! Inference weight formats: bf16 and int8 (per output channel), converted
//! from f32 weights in either stored orientation into `[OC, IC]` rows (the
//! order the portable bf16 decode kernels in [`super::matvec`] stream, and
//! the int8 rows that [`super::int8_gemm`] packs) or, for bf16 on CPUs with
//! AVX-512 BF16, straight into the bf16 gemm's packed panels (`Bf16Panels`,
//! through `to_bf16_at`).
//!
//! Shape legend: IC input channels, OC output channels.
//!
//! - bf16: the top 16 bits of an f32, rounded to nearest even (as
//!   `torch.Tensor.to(torch.bfloat16)`); NaN stays NaN.
//! - int8: symmetric, one scale per output row: `scale = max|w| / 127`,
//!   `q = round(w / scale)` in [-127, 127] (ties to even, as `torch.round`),
//!   `w ≈ q · scale`.
//!
//! Conversion runs at every load, so its loops are compiled for AVX2 too
//! (`dispatch`).

use super::simd::dispatch;

/// Orientation of a source f32 matrix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceLayout {
    /// `[IC, OC]`: GPT-2's Conv1D.
    InOut,
    /// `[OC, IC]`: `nn.Linear`, embeddings.
    OutIn,
}

use crate::util::bf16::{bf16_to_f32, f32_to_bf16};

/// Side of the square tiles used to transpose while converting: 16×16 f32
/// reads and writes stay within a few cache lines each.
const TILE: usize = 16;

/// f32s in the 64 KiB that Linux maps around a faulting page of a file.
const FAULT_AROUND_F32S: usize = (64 << 10) / 4;

/// Called on each part of a source once it has been read (a memory-mapped
/// source can drop those pages: converting then holds one band of it, not all).
pub type Release<'a> = &'a dyn Fn(&[f32]);

/// Calls `f(o, i, value)` for every element of `src` in an order that reads
/// and writes memory in small square tiles, and `release` on the source
/// rows read so far as it goes (and on all of `src` at the end).
#[inline(always)]
fn for_each_out_in(
    src: &[f32],
    ic: usize,
    oc: usize,
    layout: SourceLayout,
    release: Release<'_>,
    mut f: impl FnMut(usize, usize, f32),
) {
    assert_eq!(src.len(), ic * oc, "quant: source must hold IC·OC elements");
    match layout {
        SourceLayout::OutIn => {
            for o in 0..oc {
                for i in 0..ic {
                    f(o, i, src[o * ic + i]);
                }
            }
            release(src);
        }
        SourceLayout::InOut => {
            for i0 in (0..ic).step_by(TILE) {
                for o0 in (0..oc).step_by(TILE) {
                    for i in i0..(i0 + TILE).min(ic) {
                        for o in o0..(o0 + TILE).min(oc) {
                            f(o, i, src[i * oc + o]);
                        }
                    }
                }
                // All read so far but a trailing window: faulting in the next
                // band also maps up to 64 KiB of neighbouring pages (the
                // kernel's fault-around), which the next release drops.
                let read = (i0 + TILE).min(ic) * oc;
                release(&src[..read.saturating_sub(FAULT_AROUND_F32S)]);
            }
            release(src);
        }
    }
}

/// `dst[IC, OC]` = `src[OC, IC]` transposed: f32 weights in the orientation
/// the `gemm` crate multiplies in place (`[OC, IC]` it repacks on every
/// call, which is most of a small batch's time).
pub fn to_f32_in_out(dst: &mut [f32], src: &[f32], ic: usize, oc: usize) {
    use rayon::prelude::*;
    assert_eq!(src.len(), ic * oc, "to_f32_in_out: source must be [OC, IC]");
    assert_eq!(dst.len(), ic * oc, "to_f32_in_out: dst must be [IC, OC]");
    if oc == 0 {
        return;
    }
    // Bands of TILE destination rows in parallel, each in TILE×TILE tiles
    // through a local block: every source and destination line is read or
    // written whole at once, so the lines a tile touches (a whole row of
    // wide matrices apart, the same L1 set) need not stay cached together.
    dst.par_chunks_mut(TILE * oc)
        .enumerate()
        .for_each(|(b, band)| {
            let (i0, rows) = (b * TILE, band.len() / oc);
            let mut tile = [[0f32; TILE]; TILE];
            for o0 in (0..oc).step_by(TILE) {
                let cols = TILE.min(oc - o0);
                for (o, t) in tile.iter_mut().enumerate().take(cols) {
                    let at = (o0 + o) * ic + i0;
                    if rows == TILE {
                        // A fixed length: vector moves, not a memcpy call.
                        *t = src[at..at + TILE].try_into().expect("TILE elements");
                    } else {
                        t[..rows].copy_from_slice(&src[at..at + rows]);
                    }
                }
                for r in 0..rows {
                    let out = &mut band[r * oc + o0..r * oc + o0 + cols];
                    for (o, v) in out.iter_mut().enumerate() {
                        *v = tile[o][r];
                    }
                }
            }
        });
}

/// `dst[OC, IC]` = bf16 of `src` (`[IC, OC]` or `[OC, IC]` per `layout`).
pub fn to_bf16_out_in(
    dst: &mut [u16],
    src: &[f32],
    ic: usize,
    oc: usize,
    layout: SourceLayout,
    release: Release<'_>,
) {
    assert_eq!(dst.len(), ic * oc, "to_bf16_out_in: dst must be [OC, IC]");
    to_bf16_at(dst, src, ic, oc, layout, release, |o, i| o * ic + i);
}

/// `dst[at(o, i)]` = bf16 of element `(o, i)` of `src` for every element
/// (the bf16 gemm's panels place elements with it too).
#[inline(always)]
pub(super) fn to_bf16_at(
    dst: &mut [u16],
    src: &[f32],
    ic: usize,
    oc: usize,
    layout: SourceLayout,
    release: Release<'_>,
    at: impl Fn(usize, usize) -> usize,
) {
    dispatch(
        #[inline(always)]
        || {
            for_each_out_in(src, ic, oc, layout, release, |o, i, v| {
                dst[at(o, i)] = f32_to_bf16(v)
            })
        },
    );
}

/// `q[OC, IC]`, `scales[OC]` = per-output-row symmetric int8 quantization of
/// `src` (`[IC, OC]` or `[OC, IC]` per `layout`).
pub fn quantize_int8_out_in(
    q: &mut [i8],
    scales: &mut [f32],
    src: &[f32],
    ic: usize,
    oc: usize,
    layout: SourceLayout,
    release: Release<'_>,
) {
    assert_eq!(q.len(), ic * oc, "quantize_int8_out_in: q must be [OC, IC]");
    assert_eq!(
        scales.len(),
        oc,
        "quantize_int8_out_in: scales must be [OC]"
    );
    let mut absmax = vec![0f32; oc];
    // Two passes over the source (scales, then values), each releasing as
    // it goes: a mapped source's pages are read back from the page cache.
    dispatch(
        #[inline(always)]
        || {
            for_each_out_in(src, ic, oc, layout, release, |o, _, v| {
                absmax[o] = absmax[o].max(v.abs())
            })
        },
    );
    for (s, m) in scales.iter_mut().zip(&absmax) {
        *s = m / 127.0;
    }
    // Multiply by the reciprocal: the same for every element of a row.
    let inv: Vec<f32> = scales
        .iter()
        .map(|&s| if s > 0.0 { 1.0 / s } else { 0.0 })
        .collect();
    dispatch(
        #[inline(always)]
        || {
            for_each_out_in(src, ic, oc, layout, release, |o, i, v| {
                q[o * ic + i] = (v * inv[o]).round_ties_even().clamp(-127.0, 127.0) as i8;
            })
        },
    );
}

/// `dst[rows, IC]` = bf16 rows widened to f32.
pub fn bf16_rows_to_f32(dst: &mut [f32], src: &[u16]) {
    assert_eq!(dst.len(), src.len(), "bf16_rows_to_f32: length mismatch");
    for (d, &s) in dst.iter_mut().zip(src) {
        *d = bf16_to_f32(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        // 1 + 2^-8 is halfway between bf16 neighbours 1 and 1 + 2^-7: ties to even (1).
        assert_eq!(f32_to_bf16(1.0 + 1.0 / 256.0), 0x3F80);
        // 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up.
        assert_eq!(f32_to_bf16(1.0 + 3.0 / 256.0), 0x3F82);
        // Just above the halfway point rounds up.
        assert_eq!(f32_to_bf16(f32::from_bits(0x3F80_8001)), 0x3F81);
        assert_eq!(bf16_to_f32(f32_to_bf16(-2.5)), -2.5);
        assert!(bf16_to_f32(f32_to_bf16(f32::NAN)).is_nan());
        assert_eq!(bf16_to_f32(f32_to_bf16(f32::INFINITY)), f32::INFINITY);
        // The largest finite f32 overflows to infinity, as in PyTorch.
        assert_eq!(bf16_to_f32(f32_to_bf16(f32::MAX)), f32::INFINITY);
    }

    #[test]
    fn bf16_relative_error_is_within_half_ulp() {
        for k in 0..10_000u32 {
            let x = f32::from_bits(0x3000_0000 + k * 104_729);
            let y = bf16_to_f32(f32_to_bf16(x));
            assert!(((y - x) / x).abs() <= 1.0 / 256.0, "{x} -> {y}");
        }
    }

    #[test]
    fn conversions_transpose_in_out_sources() {
        let (ic, oc) = (37, 21);
        let src: Vec<f32> = (0..ic * oc).map(|v| v as f32 * 0.5 - 100.0).collect();
        let mut from_in_out = vec![0u16; ic * oc];
        to_bf16_out_in(&mut from_in_out, &src, ic, oc, SourceLayout::InOut, &|_| {});
        for i in 0..ic {
            for o in 0..oc {
                assert_eq!(from_in_out[o * ic + i], f32_to_bf16(src[i * oc + o]));
            }
        }
        let mut q = vec![0i8; ic * oc];
        let mut scales = vec![0.0; oc];
        quantize_int8_out_in(
            &mut q,
            &mut scales,
            &src,
            ic,
            oc,
            SourceLayout::InOut,
            &|_| {},
        );
        let back: Vec<f32> = (0..ic * oc).map(|i| q[i] as f32 * scales[i / ic]).collect();
        for i in 0..ic {
            for o in 0..oc {
                let (want, got) = (src[i * oc + o], back[o * ic + i]);
                assert!(
                    (want - got).abs() <= scales[o] / 2.0 + 1e-6,
                    "({i},{o}): {want} vs {got}"
                );
            }
        }
    }

    #[test]
    fn f32_in_out_is_the_transpose() {
        // Partial bands (IC not a multiple of TILE), one row, one column, empty.
        for (ic, oc) in [(37, 21), (16, 3), (1, 5), (5, 1), (0, 4), (4, 0)] {
            let src: Vec<f32> = (0..ic * oc).map(|v| v as f32 * 0.25 - 3.0).collect();
            let mut dst = vec![f32::NAN; ic * oc];
            to_f32_in_out(&mut dst, &src, ic, oc);
            for o in 0..oc {
                for i in 0..ic {
                    assert_eq!(dst[i * oc + o], src[o * ic + i], "({ic},{oc}): ({o},{i})");
                }
            }
        }
    }

    /// Conversion releases the source as it goes and all of it at the end:
    /// every release is a prefix (in-out) or the whole source, never past it.
    #[test]
    fn conversions_release_the_whole_source() {
        let (ic, oc) = (70, 300);
        let src: Vec<f32> = (0..ic * oc).map(|v| (v % 97) as f32 - 48.0).collect();
        for layout in [SourceLayout::InOut, SourceLayout::OutIn] {
            let released = std::sync::Mutex::new(Vec::new());
            let record = |part: &[f32]| {
                let start = (part.as_ptr() as usize - src.as_ptr() as usize) / 4;
                released.lock().unwrap().push((start, part.len()));
            };
            let mut q = vec![0i8; ic * oc];
            let mut scales = vec![0.0; oc];
            quantize_int8_out_in(&mut q, &mut scales, &src, ic, oc, layout, &record);
            let mut b = vec![0u16; ic * oc];
            to_bf16_out_in(&mut b, &src, ic, oc, layout, &record);
            let released = released.into_inner().unwrap();
            assert!(released.iter().all(|&(s, n)| s == 0 && n <= src.len()));
            let whole = released.iter().filter(|&&(_, n)| n == src.len()).count();
            assert_eq!(whole, 3, "{layout:?}: two int8 passes and one bf16 pass");
            if layout == SourceLayout::InOut {
                assert!(released.len() > 3, "in-out sources are released in bands");
            }
        }
    }

    #[test]
    fn int8_uses_the_full_range_per_row_and_handles_zero_rows() {
        let src = [0.0, 0.0, 0.0, 0.9, -2.0, 0.5];
        let mut q = [0i8; 6];
        let mut scales = [0.0; 2];
        quantize_int8_out_in(
            &mut q,
            &mut scales,
            &src,
            3,
            2,
            SourceLayout::OutIn,
            &|_| {},
        );
        assert_eq!(scales, [0.0, 2.0 / 127.0]);
        assert_eq!(q, [0, 0, 0, 57, -127, 32]);
    }
}
