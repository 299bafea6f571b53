//! A checked, strided f32 matmul over the `gemm` crate, for the inference
//! paths that need views the contiguous `kernels` matmul does not take: one
//! head's queries inside the packed qkv rows, a column tile of the logits,
//! a transposed `[OC, IC]` weight.

use gemm::Parallelism;

/// A read-only `rows × cols` view with element strides.
#[derive(Clone, Copy)]
pub(crate) struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    rs: isize,
    cs: isize,
}

impl<'a> MatRef<'a> {
    /// Row-major `[rows, cols]`.
    pub(crate) fn row_major(data: &'a [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols as isize, 1)
    }

    /// The transpose of a row-major `[cols, rows]` buffer, seen as `[rows, cols]`.
    pub(crate) fn transposed(data: &'a [f32], cols: usize, rows: usize) -> Self {
        Self::strided(data, rows, cols, 1, rows as isize)
    }

    /// Element (r, c) at `data[r·rs + c·cs]`; strides must be non-negative.
    pub(crate) fn strided(data: &'a [f32], rows: usize, cols: usize, rs: isize, cs: isize) -> Self {
        check_bounds(data.len(), rows, cols, rs, cs);
        MatRef {
            data,
            rows,
            cols,
            rs,
            cs,
        }
    }
}

/// A writable `rows × cols` view with element strides.
pub(crate) struct MatMut<'a> {
    data: &'a mut [f32],
    rows: usize,
    cols: usize,
    rs: isize,
    cs: isize,
}

impl<'a> MatMut<'a> {
    pub(crate) fn row_major(data: &'a mut [f32], rows: usize, cols: usize) -> Self {
        Self::strided(data, rows, cols, cols as isize, 1)
    }

    pub(crate) fn strided(
        data: &'a mut [f32],
        rows: usize,
        cols: usize,
        rs: isize,
        cs: isize,
    ) -> Self {
        check_bounds(data.len(), rows, cols, rs, cs);
        MatMut {
            data,
            rows,
            cols,
            rs,
            cs,
        }
    }
}

fn check_bounds(len: usize, rows: usize, cols: usize, rs: isize, cs: isize) {
    assert!(
        rs >= 0 && cs >= 0,
        "gemm view: negative strides are not supported"
    );
    if rows > 0 && cols > 0 {
        let last = (rows - 1) * rs as usize + (cols - 1) * cs as usize;
        assert!(
            last < len,
            "gemm view: {rows}x{cols} (strides {rs}, {cs}) exceeds a buffer of {len}"
        );
    }
}

/// `dst = lhs · rhs`, multi-threaded over the current rayon pool.
pub(crate) fn gemm_f32(dst: MatMut<'_>, lhs: MatRef<'_>, rhs: MatRef<'_>) {
    gemm_f32_with(dst, lhs, rhs, Parallelism::Rayon(0));
}

/// `dst = lhs · rhs` on the calling thread (for use inside parallel loops).
pub(crate) fn gemm_f32_serial(dst: MatMut<'_>, lhs: MatRef<'_>, rhs: MatRef<'_>) {
    gemm_f32_with(dst, lhs, rhs, Parallelism::None);
}

fn gemm_f32_with(dst: MatMut<'_>, lhs: MatRef<'_>, rhs: MatRef<'_>, par: Parallelism) {
    assert_eq!(lhs.cols, rhs.rows, "gemm: inner dimensions differ");
    assert_eq!(
        (dst.rows, dst.cols),
        (lhs.rows, rhs.cols),
        "gemm: output shape"
    );
    let (m, n, k) = (dst.rows, dst.cols, lhs.cols);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for r in 0..m {
            for c in 0..n {
                dst.data[r * dst.rs as usize + c * dst.cs as usize] = 0.0;
            }
        }
        return;
    }
    // SAFETY: the views were bounds-checked at construction for every
    // (row, col) they address; dst is borrowed mutably, so it cannot alias
    // lhs or rhs; read_dst = false so dst's previous contents are not read.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.data.as_mut_ptr(),
            dst.cs,
            dst.rs,
            false,
            lhs.data.as_ptr(),
            lhs.cs,
            lhs.rs,
            rhs.data.as_ptr(),
            rhs.cs,
            rhs.rs,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_views_multiply_like_the_definition() {
        // lhs: rows 1..3 of a [4, 5] buffer, columns 0..3 -> [2, 3] with row stride 5.
        let a: Vec<f32> = (0..20).map(|v| v as f32 * 0.5 - 3.0).collect();
        let lhs = MatRef::strided(&a[5..], 2, 3, 5, 1);
        // rhs: transpose of a [4, 3] buffer -> [3, 4].
        let b: Vec<f32> = (0..12).map(|v| (v as f32).sin()).collect();
        let rhs = MatRef::transposed(&b, 4, 3);
        // dst: [2, 4] inside a [2, 6] buffer at column 1.
        let mut d = [f32::NAN; 12];
        gemm_f32(MatMut::strided(&mut d[1..], 2, 4, 6, 1), lhs, rhs);
        for r in 0..2 {
            for c in 0..4 {
                let want: f32 = (0..3).map(|k| a[5 + r * 5 + k] * b[c * 3 + k]).sum();
                assert!((d[r * 6 + 1 + c] - want).abs() < 1e-5);
            }
            assert!(
                d[r * 6].is_nan() && d[r * 6 + 5].is_nan(),
                "columns outside the view untouched"
            );
        }
    }

    #[test]
    #[should_panic(expected = "exceeds a buffer")]
    fn out_of_bounds_views_are_rejected() {
        let a = [0.0f32; 5];
        let _ = MatRef::row_major(&a, 2, 3);
    }
}
