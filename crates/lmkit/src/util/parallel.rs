//! Helpers for rayon loops that write disjoint parts of one buffer.

/// A raw pointer that may cross threads. Users guarantee that concurrent
/// tasks write disjoint elements and that the buffer outlives the loop.
#[derive(Clone, Copy)]
pub struct SendPtr<T>(pub *mut T);

impl<T> SendPtr<T> {
    /// The pointer. A method (not `.0`) so closures capture the whole
    /// `Send + Sync` wrapper rather than the bare pointer field.
    #[inline(always)]
    pub fn get(self) -> *mut T {
        self.0
    }
}

// SAFETY: only used for disjoint writes, see each use.
unsafe impl<T> Send for SendPtr<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for SendPtr<T> {}
