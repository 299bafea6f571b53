//! The process's allocator, set up for compute runs.

/// Has glibc's malloc keep freed blocks for reuse: every allocation comes
/// from the heap instead of a fresh `mmap` (no size limit: glibc's largest
/// mmap threshold, 32 MiB, is below what training allocates per call), and
/// the heap's free top is kept (up to 1 GiB) instead of handed back.
///
/// A training step allocates and frees the same activation-sized buffers
/// (packed operands, per-layer scratch) every micro-batch; from fresh
/// mappings each costs a page fault and a zeroed page per 4 KiB, and each
/// `munmap` a TLB shootdown on every core. The largest come from the `gemm`
/// crate, which sizes its packing buffer from the L3 cache and allocates it
/// per call: 49 MB for the fused LM head's 256 × V chunk of logit gradients
/// at V = 50257 (on a 260 MB-L3 Xeon), four times a step at 4 × 256 tokens.
/// Measured on L6 d384 f32 pretraining at 4 × 256 (2 cores): page faults per
/// step 50k -> ~0, tokens/s +5-9%; 124M at 8 × 1024: step time -10%, peak
/// RSS +44 MB of 6.3 / 12.3 GB (the kept packing buffer); decode's RSS and
/// speed unchanged. With mmaps capped at 32 MiB (the previous setting) the
/// steps still faulted in every large buffer. What is kept is reused by the next step; a
/// process that is done with its memory exits.
///
/// Call at start-up, before threads allocate. A no-op off glibc.
pub fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes malloc's policy: no mmapped chunks (when
    // the heap cannot grow, glibc still maps memory as its backup) and a
    // trim threshold in range.
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 1 << 30);
    }
}

/// `madvise(advice)` over the whole `align`-sized blocks inside
/// `[start, start + bytes)` (`align` a power of two, at least the page
/// size). A hint: failure is harmless and ignored.
///
/// # Safety
/// The range must be mapped memory of this process for which `advice`
/// does nothing the program can observe (or that its owner has asked for).
#[cfg(unix)]
pub(crate) unsafe fn advise_aligned(start: usize, bytes: usize, align: usize, advice: libc::c_int) {
    let (first, last) = (
        start.div_ceil(align) * align,
        (start + bytes) / align * align,
    );
    if last > first {
        // SAFETY: [first, last) lies inside the caller's range (see above).
        unsafe {
            libc::madvise(first as *mut libc::c_void, last - first, advice);
        }
    }
}

/// An empty `Vec` with room for `len` elements whose pages the kernel may
/// back with 2 MiB transparent huge pages (`MADV_HUGEPAGE`, asked before
/// the first write). For buffers streamed end to end, as decode streams its
/// weights once per token: with 4 KiB pages the hardware prefetchers stop
/// at every page boundary and each page costs a TLB walk.
///
/// Linux only, and only where huge pages are enabled (`always` or
/// `madvise` in `/sys/kernel/mm/transparent_hugepage/enabled`); elsewhere
/// this is `Vec::with_capacity(len)`.
fn with_huge_capacity<T>(len: usize) -> Vec<T> {
    let v: Vec<T> = Vec::with_capacity(len);
    advise_huge(&v, len);
    v
}

/// `MADV_HUGEPAGE` over the aligned 2 MiB blocks of the first `len`
/// elements of `v`'s allocation (`len` at most its capacity): later faults
/// there may get huge pages. A hint; nothing elsewhere.
fn advise_huge<T>(v: &Vec<T>, len: usize) {
    debug_assert!(len <= v.capacity());
    // SAFETY: the range lies in the vector's allocation; MADV_HUGEPAGE
    // only changes how the kernel backs faults there, never the contents.
    #[cfg(target_os = "linux")]
    unsafe {
        advise_aligned(
            v.as_ptr() as usize,
            len * std::mem::size_of::<T>(),
            2 << 20,
            libc::MADV_HUGEPAGE,
        );
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (v, len);
}

/// A zeroed `Vec` of `len` elements, in huge pages where the kernel allows:
/// `vec![T::default(); len]` (zeroed by the allocator, so untouched pages
/// stay unmapped until written) with `MADV_HUGEPAGE` on its aligned 2 MiB
/// blocks before the first write. A large buffer's first writes then fault
/// once per 2 MiB instead of once per 4 KiB (a GPT-2 124M prefill of 476
/// tokens writes ~22 MB of fresh scratch: ~5.5k faults at 4 KiB).
pub fn huge_zeroed<T: Copy + Default>(len: usize) -> Vec<T> {
    let v = vec![T::default(); len];
    advise_huge(&v, len);
    v
}

/// Resizes a scratch buffer whose contents are dead to `len` (new elements
/// zeroed, as `Vec::resize`). One too small is replaced by a buffer of
/// capacity `cap.max(len)`, not reallocated: a realloc would copy the dead
/// contents, and `cap` lets a caller whose sizes vary grow once to a bound.
pub fn resize_scratch<T: Copy + Default>(v: &mut Vec<T>, len: usize, cap: usize) {
    if v.capacity() < len {
        *v = Vec::new();
        *v = huge_zeroed(cap.max(len));
        v.truncate(len);
        return;
    }
    v.resize(len, T::default());
}

/// A copy of `src` in huge pages where the kernel allows
/// (`with_huge_capacity`), written once (no zeroing first) by the rayon
/// pool, 2 MiB per task: each task's first write faults in one huge page.
pub fn huge_copy<T: Copy + Send + Sync>(src: &[T]) -> Vec<T> {
    use rayon::prelude::*;
    let mut v = with_huge_capacity::<T>(src.len());
    let chunk = ((2 << 20) / std::mem::size_of::<T>().max(1)).max(1);
    v.spare_capacity_mut()[..src.len()]
        .par_chunks_mut(chunk)
        .zip(src.par_chunks(chunk))
        .for_each(|(d, s)| {
            // SAFETY: `d` and `s` have the same length (equal chunking of
            // equal lengths), `d` is uninitialised spare capacity that no
            // other task writes, and `T: Copy` has no drop to skip.
            unsafe {
                std::ptr::copy_nonoverlapping(s.as_ptr(), d.as_mut_ptr().cast::<T>(), s.len())
            }
        });
    // SAFETY: the loop above initialised the first `src.len()` elements.
    unsafe { v.set_len(src.len()) };
    v
}

#[cfg(test)]
mod tests {
    #[test]
    fn resize_scratch_grows_to_its_bound_once() {
        let mut v = vec![7.0f32; 4];
        super::resize_scratch(&mut v, 10, 100);
        assert_eq!(v.len(), 10);
        assert!(v.capacity() >= 100);
        assert!(v.iter().all(|&x| x == 0.0), "a replaced buffer is zeroed");
        let ptr = v.as_ptr();
        super::resize_scratch(&mut v, 3, 100);
        super::resize_scratch(&mut v, 90, 100);
        assert_eq!(
            (v.len(), v.as_ptr()),
            (90, ptr),
            "within its room: no new buffer"
        );
        super::resize_scratch(&mut v, 150, 120);
        assert_eq!(v.len(), 150);
    }

    #[test]
    fn huge_zeroed_is_a_zeroed_vec() {
        for len in [0usize, 1, 4095, 3 << 20] {
            let v = super::huge_zeroed::<u16>(len);
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x == 0));
        }
        let v = super::huge_zeroed::<i8>(5 << 20);
        assert!(v.len() == 5 << 20 && v.iter().all(|&x| x == 0));
    }

    #[test]
    fn huge_copy_copies_every_element() {
        // Lengths around the 2 MiB task size (of f32s: 524288), and empty.
        for len in [0usize, 1, 4095, (2 << 20) / 4 - 1, (2 << 20) / 4, 3 << 20] {
            let src: Vec<f32> = (0..len).map(|i| i as f32 * 0.5 - 7.0).collect();
            assert_eq!(super::huge_copy(&src), src, "len {len}");
        }
        let bytes: Vec<u8> = (0..(5 << 20) + 3).map(|i| (i * 31 % 251) as u8).collect();
        assert_eq!(super::huge_copy(&bytes), bytes);
    }
}
