//! Slice helpers.

use std::ops::Range;

/// Two disjoint mutable sub-slices of `buf` (`a` before `b` or after it):
/// a weight's and its bias's gradients out of one flat gradient buffer.
/// Panics if the ranges overlap — they come from a parameter layout, never
/// from user input.
pub fn two_mut<T>(buf: &mut [T], a: Range<usize>, b: Range<usize>) -> (&mut [T], &mut [T]) {
    if a.end <= b.start {
        let (x, y) = buf.split_at_mut(b.start);
        (&mut x[a], &mut y[..b.end - b.start])
    } else {
        assert!(b.end <= a.start, "two_mut: overlapping ranges");
        let (x, y) = buf.split_at_mut(a.start);
        (&mut y[..a.end - a.start], &mut x[b])
    }
}

#[cfg(test)]
mod tests {
    use super::two_mut;

    #[test]
    fn either_order() {
        let mut v = [0, 1, 2, 3, 4, 5];
        let (a, b) = two_mut(&mut v, 4..6, 0..2);
        assert_eq!((&*a, &*b), (&[4, 5][..], &[0, 1][..]));
        let (a, b) = two_mut(&mut v, 1..3, 3..4);
        a[0] = 9;
        b[0] = 8;
        assert_eq!(v, [0, 9, 2, 8, 4, 5]);
    }
}
