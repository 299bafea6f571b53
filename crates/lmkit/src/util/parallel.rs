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

/// Runs `f` on a thread of the current rayon pool (in place when already on
/// one) and returns its result.
///
/// A parallel loop started from a thread outside the pool hands its work to
/// the pool and puts the caller to sleep until the pool is done: one sleep
/// and wake-up per loop. A GPT-2 decode step runs ~50 loops of ~0.1–0.2 ms
/// each, so that round trip costs ~10% of a token (measured: bf16 decode
/// 99 → 109 tok/s, int8 168 → 191 on 2 threads). On a pool thread the loops
/// fork and join inside the pool instead. Use it around a burst of short
/// parallel loops with a bounded run time (one forward pass): a thread
/// waiting inside the pool may pick up other queued work, such as another
/// caller's whole `f`, so `f` must not block on other threads, and a server
/// running several models may see one request's step wait for another's.
///
/// With profiling on, the phases timed inside `f` on a pool thread are
/// charged to the caller's thread, where [`super::profile::take`] finds them.
pub fn on_pool<R: Send>(f: impl FnOnce() -> R + Send) -> R {
    if !super::profile::enabled() {
        return rayon::scope(|_| f());
    }
    let caller = std::thread::current().id();
    let (r, times) = rayon::scope(|_| {
        let moved = std::thread::current().id() != caller;
        if moved {
            // This thread's own earlier times stay its own.
            let before = super::profile::take();
            let r = f();
            let times = super::profile::take();
            super::profile::add(&before);
            (r, Some(times))
        } else {
            (f(), None)
        }
    });
    if let Some(t) = times {
        super::profile::add(&t);
    }
    r
}
