//! Denormal floats flushed to zero on the compute threads while training.
//!
//! Gradients and attention probabilities of a training step fall below
//! f32's smallest normal number (1.2e-38) in places: GPT-2 124M fine-tuning
//! from a random init had ~4% of the MLP's GELU gradients denormal. An x86
//! core computes with such an operand or result through a microcode assist,
//! ~100 cycles instead of one, and in the gemm microkernel that made the
//! backward 11× slower (35 s → 3.2 s per batch of 32). Flushing them is
//! what GPU trainers and TensorFlow's thread pools do; no result of
//! interest changes, as everything else is ≥ 1e-38 apart from them.

use std::sync::Mutex;

/// While alive, the calling thread and every thread of the current rayon
/// pool flush denormal results to zero and read denormal inputs as zero
/// (x86-64: MXCSR's FTZ and DAZ; AArch64: FPCR's FZ); each pool thread's
/// own setting comes back when the last guard alive is dropped (ranks that
/// are threads of one process each hold one), the caller's when its guard
/// is. Elsewhere it changes nothing. Make guards outside the pool's
/// threads (the first and the last wait for every pool thread).
pub struct FlushDenormals {
    caller: u64,
}

/// Guards alive, and each pool thread's setting before the first, by
/// thread index.
static POOL: Mutex<(usize, Vec<u64>)> = Mutex::new((0, Vec::new()));

impl FlushDenormals {
    pub fn new() -> Self {
        {
            let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
            if pool.0 == 0 {
                // The pool first: a pool started here copies its starter's setting.
                pool.1 = rayon::broadcast(|_| {
                    let before = fp::get();
                    fp::set(before | fp::FLUSH);
                    before
                });
            }
            pool.0 += 1;
        }
        let caller = fp::get();
        fp::set(caller | fp::FLUSH);
        FlushDenormals { caller }
    }
}

impl Default for FlushDenormals {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for FlushDenormals {
    fn drop(&mut self) {
        fp::set(self.caller);
        let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
        pool.0 -= 1;
        if pool.0 == 0 {
            let saved = std::mem::take(&mut pool.1);
            rayon::broadcast(|ctx| {
                if let Some(&s) = saved.get(ctx.index()) {
                    fp::set(s);
                }
            });
        }
    }
}

/// Whether the calling thread flushes denormals now.
pub fn flushing() -> bool {
    fp::FLUSH != 0 && fp::get() & fp::FLUSH == fp::FLUSH
}

#[cfg(target_arch = "x86_64")]
mod fp {
    /// MXCSR: FTZ (bit 15) and DAZ (bit 6).
    pub const FLUSH: u64 = (1 << 15) | (1 << 6);

    pub fn get() -> u64 {
        let mut csr = 0u32;
        // SAFETY: stmxcsr stores the 32-bit MXCSR at the given address.
        unsafe {
            std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack, preserves_flags))
        };
        csr as u64
    }

    pub fn set(v: u64) {
        let csr = v as u32;
        // SAFETY: ldmxcsr loads MXCSR from the address; `v` holds a value
        // read by `get`, with only FTZ and DAZ (both valid bits) changed.
        unsafe {
            std::arch::asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack, preserves_flags, readonly))
        };
    }
}

#[cfg(target_arch = "aarch64")]
mod fp {
    /// FPCR: FZ (bit 24).
    pub const FLUSH: u64 = 1 << 24;

    pub fn get() -> u64 {
        let v: u64;
        // SAFETY: reading FPCR has no side effects.
        unsafe { std::arch::asm!("mrs {}, fpcr", out(reg) v, options(nomem, nostack)) };
        v
    }

    pub fn set(v: u64) {
        // SAFETY: `v` holds a value read by `get`, with only FZ changed.
        unsafe { std::arch::asm!("msr fpcr, {}", in(reg) v, options(nomem, nostack)) };
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
mod fp {
    pub const FLUSH: u64 = 0;

    pub fn get() -> u64 {
        0
    }

    pub fn set(_: u64) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flushes_while_alive_and_restores() {
        let tiny = std::hint::black_box(1e-30f32);
        let before = flushing();
        {
            let _g = FlushDenormals::new();
            if fp::FLUSH != 0 {
                assert!(flushing());
                assert_eq!(
                    std::hint::black_box(tiny) * std::hint::black_box(1e-10f32),
                    0.0
                );
                let on_pool: Vec<bool> = rayon::broadcast(|_| flushing());
                assert!(on_pool.iter().all(|&f| f), "{on_pool:?}");
            }
        }
        assert_eq!(flushing(), before);
        assert!(rayon::broadcast(|_| flushing())
            .iter()
            .all(|&f| f == before));
        assert!((tiny * 1e-10f32).is_subnormal() || before);
    }
}
