//! The process's allocator, set up for compute runs.

/// Has glibc's malloc keep freed blocks for reuse: allocations up to 32 MiB
/// come from the heap instead of fresh `mmap`s, and the heap's free top is
/// kept (up to 1 GiB) instead of handed back.
///
/// A training step allocates and frees the same activation-sized buffers
/// (packed operands, per-layer scratch) every micro-batch; from fresh
/// mappings each costs a page fault and a zeroed page per 4 KiB, and each
/// `munmap` a TLB shootdown on every core. Measured on 124M bf16
/// pretraining: +4% tokens/s, peak RSS unchanged. What is kept is reused by
/// the next step; a process that is done with its memory exits.
///
/// Call at start-up, before threads allocate. A no-op off glibc.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes malloc's thresholds; both values are in
    // range (32 MiB is glibc's largest mmap threshold on 64-bit).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}
