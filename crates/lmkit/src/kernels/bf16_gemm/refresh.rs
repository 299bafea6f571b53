//! Refreshing a [`Bf16Weight`] from its f32 weight block of rows by block
//! of rows, from several threads at once: the optimizer packs each part of
//! a weight right after updating it, while the part is still in cache,
//! instead of a separate pass that reads every weight from memory again.

use super::{round_into, Bf16Weight, Packed, PackedB, Src, NR};
use crate::kernels::WeightLayout;
use std::marker::PhantomData;

/// Rows of the weight's own layout (`[C,OC]` Conv1D: C rows of OC;
/// `[OC,C]` `nn.Linear`: OC rows of C) that one [`Bf16RowWriter::fill_rows`]
/// must start at a multiple of: a block of rows is then whole panels of
/// the pack whose columns they are, and whole K pairs of the other.
pub const ROW_ALIGN: usize = NR;

/// One pack (`PackedB`) written through a pointer: `[panels][kp/2][NR][2]`.
struct Panels {
    data: *mut u16,
    n: usize,
    k: usize,
    kp: usize,
    /// The weight's rows are this operand's K (else its columns N).
    rows_are_k: bool,
}

impl Panels {
    fn of(b: &mut PackedB, rows_are_k: bool) -> Panels {
        Panels {
            data: b.data.as_mut_ptr(),
            n: b.n,
            k: b.k,
            kp: b.kp,
            rows_are_k,
        }
    }

    /// Weight rows `r0..r0+rows` from `vals` (`rows × len` f32, `len` the
    /// row length).
    ///
    /// # Safety
    /// No other thread writes the same rows' packed elements meanwhile
    /// (see [`Bf16RowWriter::fill_rows`]).
    unsafe fn fill(&self, r0: usize, rows: usize, len: usize, vals: &[f32], simd: bool) {
        let stride = self.kp * NR;
        if self.rows_are_k {
            // Rows r0.. are K pairs r0/2.. of every panel.
            let src = Src {
                data: vals,
                rs: len,
                cs: 1,
            };
            for p in 0..self.n.div_ceil(NR) {
                let at = p * stride + r0 * NR;
                let panel =
                    std::slice::from_raw_parts_mut(self.data.add(at), rows.div_ceil(2) * NR * 2);
                PackedB::fill_panel(panel, src, p * NR, NR.min(self.n - p * NR), rows, simd);
            }
        } else {
            // Rows r0.. are columns: whole panels r0/NR.. (r0 is aligned).
            let src = Src {
                data: vals,
                rs: 1,
                cs: len,
            };
            for p in r0 / NR..(r0 + rows).div_ceil(NR) {
                let panel = std::slice::from_raw_parts_mut(self.data.add(p * stride), stride);
                let cols = NR.min(self.n - p * NR);
                PackedB::fill_panel(panel, src, p * NR - r0, cols, self.k, simd);
            }
        }
    }
}

enum Target {
    Avx512 {
        fwd: Panels,
        bwd: Option<Panels>,
    },
    /// The rounded f32 copy, in the weight's own layout.
    Portable(*mut f32),
}

/// Writes blocks of a weight's rows into its [`Bf16Weight`] from any
/// thread ([`Bf16Weight::row_writer`]); the copy holds the same bits as
/// [`Bf16Weight::repack`] from the whole weight once every row was written.
pub struct Bf16RowWriter<'a> {
    /// Rows and row length of the weight's own layout.
    rows: usize,
    len: usize,
    target: Target,
    simd: bool,
    _weight: PhantomData<&'a mut Bf16Weight>,
}

// SAFETY: the pointers come from a `&'a mut Bf16Weight` held for 'a; the
// contract of `fill_rows` keeps concurrent writes disjoint.
unsafe impl Send for Bf16RowWriter<'_> {}
unsafe impl Sync for Bf16RowWriter<'_> {}

impl Bf16Weight {
    /// Whether [`Self::row_writer`] gives a writer.
    pub fn refreshable(&self) -> bool {
        !matches!(&self.packed, Packed::Portable { layout, .. } if *layout != self.layout)
    }

    /// A writer refreshing this copy from blocks of the weight's rows.
    /// Returns `None` for an inference-only copy kept in another layout.
    pub fn row_writer(&mut self) -> Option<Bf16RowWriter<'_>> {
        let (c, oc, layout) = (self.c, self.oc, self.layout);
        let (rows, len) = match layout {
            WeightLayout::InOut => (c, oc),
            WeightLayout::OutIn => (oc, c),
        };
        // The forward operand is `[C,OC]`: K = C, rows of W are its K when
        // W is `[C,OC]` itself; the backward `[OC,C]` the other way round.
        let fwd_rows_are_k = layout == WeightLayout::InOut;
        let target = match &mut self.packed {
            Packed::Avx512 { fwd, bwd } => Target::Avx512 {
                fwd: Panels::of(fwd, fwd_rows_are_k),
                bwd: bwd.as_mut().map(|b| Panels::of(b, !fwd_rows_are_k)),
            },
            Packed::Portable { w, layout: kept } if *kept == layout => {
                Target::Portable(w.as_mut_ptr())
            }
            Packed::Portable { .. } => return None,
        };
        Some(Bf16RowWriter {
            rows,
            len,
            target,
            simd: super::has_avx512bf16(),
            _weight: PhantomData,
        })
    }
}

impl Bf16RowWriter<'_> {
    /// Length of the weight's rows (`OC` for `[C,OC]`, `C` for `[OC,C]`).
    pub fn row_len(&self) -> usize {
        self.len
    }

    /// Rows `r0..r0 + vals.len()/row_len` of the weight, `vals` their new
    /// f32 values, into the bf16 copy.
    ///
    /// # Safety
    /// Calls that may run at the same time must be for disjoint rows, each
    /// starting at a multiple of [`ROW_ALIGN`] and ending at one or at the
    /// last row. (Checked: the alignment and bounds; not: disjointness.)
    pub unsafe fn fill_rows(&self, r0: usize, vals: &[f32]) {
        let len = self.len;
        assert!(
            len > 0 && vals.len().is_multiple_of(len),
            "Bf16RowWriter: values are not whole rows"
        );
        let rows = vals.len() / len;
        let end = r0 + rows;
        assert!(end <= self.rows, "Bf16RowWriter: rows past the weight");
        assert!(
            r0.is_multiple_of(ROW_ALIGN) && (end.is_multiple_of(ROW_ALIGN) || end == self.rows),
            "Bf16RowWriter: rows {r0}..{end} are not aligned to {ROW_ALIGN}"
        );
        if rows == 0 {
            return;
        }
        match &self.target {
            Target::Avx512 { fwd, bwd } => {
                fwd.fill(r0, rows, len, vals, self.simd);
                if let Some(bwd) = bwd {
                    bwd.fill(r0, rows, len, vals, self.simd);
                }
            }
            Target::Portable(w) => {
                let dst = std::slice::from_raw_parts_mut(w.add(r0 * len), vals.len());
                round_into(dst, vals);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{has_avx512bf16, Bf16Kernel};
    use super::*;
    use rayon::prelude::*;

    fn contents(w: &Bf16Weight) -> Vec<u32> {
        match &w.packed {
            Packed::Avx512 { fwd, bwd } => fwd
                .data
                .iter()
                .chain(bwd.iter().flat_map(|b| &b.data))
                .map(|&x| x as u32)
                .collect(),
            Packed::Portable { w, .. } => w.iter().map(|x| x.to_bits()).collect(),
        }
    }

    /// Blocks of rows written from several threads, in any order, leave
    /// the copy a fresh pack of the new values makes, padding included
    /// (odd K, column and row tails), on every kernel; an inference-only
    /// copy in another layout has no writer.
    #[test]
    fn row_blocks_equal_a_fresh_pack() {
        let mut kernels = vec![Bf16Kernel::Portable];
        if has_avx512bf16() {
            kernels.push(Bf16Kernel::Avx512);
        }
        for (c, oc) in [(70, 45), (37, 100), (96, 33), (3, 70), (64, 64)] {
            let w1: Vec<f32> = (0..c * oc).map(|i| (i % 17) as f32 - 8.0).collect();
            let w2: Vec<f32> = (0..c * oc).map(|i| ((i * 7) % 13) as f32 * 0.37).collect();
            for layout in [WeightLayout::InOut, WeightLayout::OutIn] {
                for &kernel in &kernels {
                    for backward in [true, false] {
                        let mut w = Bf16Weight::pack_with(&w1, c, oc, layout, kernel, backward);
                        let fresh = Bf16Weight::pack_with(&w2, c, oc, layout, kernel, backward);
                        let refreshable = w.refreshable();
                        let Some(writer) = w.row_writer() else {
                            assert!(!refreshable && !backward && kernel == Bf16Kernel::Portable);
                            continue;
                        };
                        let len = writer.row_len();
                        let blocks: Vec<_> = w2.chunks(ROW_ALIGN * len).enumerate().rev().collect();
                        blocks.par_iter().with_max_len(1).for_each(|(b, vals)| {
                            // SAFETY: disjoint aligned blocks.
                            unsafe { writer.fill_rows(b * ROW_ALIGN, vals) }
                        });
                        assert_eq!(
                            contents(&w),
                            contents(&fresh),
                            "{c}x{oc} {layout:?} {kernel:?} backward {backward}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "not aligned")]
    fn unaligned_rows_are_refused() {
        let w0 = vec![1.0f32; 70 * 45];
        let mut w =
            Bf16Weight::pack_with(&w0, 70, 45, WeightLayout::InOut, Bf16Kernel::Portable, true);
        let writer = w.row_writer().expect("training copy");
        // SAFETY: one call.
        unsafe { writer.fill_rows(3, &w0[..45]) };
    }
}
