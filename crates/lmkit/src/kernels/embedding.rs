//! Embedding lookups (token + position + token type, fused) and their
//! scatter-add backward.
//!
//! Shape legend: N rows (B·T), C channels; a table is `[rows, C]`.

use super::rows_per_task;
use super::simd::dispatch;
use crate::util::parallel::SendPtr;
use rayon::prelude::*;

/// `out[i] = Σ_k table_k[ids_k[i]]` over `lookups = [(ids_k[N], table_k), …]`,
/// e.g. token + position (+ token type) in one pass. Ids must be in range
/// (callers validate them); an out-of-range id panics on slice indexing.
pub fn embeddings_forward(out: &mut [f32], lookups: &[(&[u32], &[f32])], c: usize) {
    assert!(c > 0, "embeddings_forward: c must be positive");
    assert_eq!(out.len() % c, 0, "embeddings_forward: out must be [N,C]");
    let n = out.len() / c;
    for (ids, table) in lookups {
        assert_eq!(
            ids.len(),
            n,
            "embeddings_forward: every ids slice must be [N]"
        );
        assert_eq!(
            table.len() % c,
            0,
            "embeddings_forward: table must be [rows,C]"
        );
    }
    let rpt = rows_per_task(c);
    out.par_chunks_mut(rpt * c)
        .enumerate()
        .for_each(|(ti, rows)| {
            dispatch(
                #[inline(always)]
                || {
                    for (r, orow) in rows.chunks_exact_mut(c).enumerate() {
                        let i = ti * rpt + r;
                        let mut first = true;
                        for (ids, table) in lookups {
                            let id = ids[i] as usize;
                            debug_assert!(
                                (id + 1) * c <= table.len(),
                                "embedding id {id} out of range for a table of {} rows",
                                table.len() / c
                            );
                            let trow = &table[id * c..(id + 1) * c];
                            if first {
                                orow.copy_from_slice(trow);
                                first = false;
                            } else {
                                for (o, t) in orow.iter_mut().zip(trow) {
                                    *o += *t;
                                }
                            }
                        }
                        if first {
                            orow.fill(0.0);
                        }
                    }
                },
            )
        });
}

/// `dtable[ids[i]] += dout[i]`. Deterministic without atomics: tasks own
/// disjoint column ranges of the table and visit rows `i` in order.
pub fn embedding_backward(dtable: &mut [f32], dout: &[f32], ids: &[u32], c: usize) {
    assert!(c > 0, "embedding_backward: c must be positive");
    assert_eq!(
        dout.len(),
        ids.len() * c,
        "embedding_backward: dout must be [N,C]"
    );
    assert_eq!(
        dtable.len() % c,
        0,
        "embedding_backward: dtable must be [rows,C]"
    );
    let rows = dtable.len() / c;
    for &id in ids {
        assert!(
            (id as usize) < rows,
            "embedding_backward: id {id} out of range ({rows} rows)"
        );
    }
    const COLS: usize = 64;
    let col_tasks = c.div_ceil(COLS);
    let table = SendPtr(dtable.as_mut_ptr());
    let run = |ci: usize| {
        let c0 = ci * COLS;
        let w = COLS.min(c - c0);
        dispatch(
            #[inline(always)]
            || {
                for (i, &id) in ids.iter().enumerate() {
                    let src = &dout[i * c + c0..i * c + c0 + w];
                    // SAFETY: id < rows was checked above, so the span lies in
                    // dtable; task `ci` is the only one touching columns
                    // c0..c0+w, and dtable is uniquely borrowed for the call.
                    let dst = unsafe {
                        std::slice::from_raw_parts_mut(table.get().add(id as usize * c + c0), w)
                    };
                    for (d, s) in dst.iter_mut().zip(src) {
                        *d += *s;
                    }
                }
            },
        )
    };
    if ids.len() * c >= 1 << 15 {
        (0..col_tasks).into_par_iter().for_each(run);
    } else {
        (0..col_tasks).for_each(run);
    }
}
