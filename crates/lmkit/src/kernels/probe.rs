//! The CPU's true arithmetic peak: in-register loops of independent
//! multiply-adds, with no memory traffic, timed per thread and on every
//! thread at once. The ceiling the gemm kernels are measured against
//! (`lmkit probe`, scripts/bench_probe.py's "% of limit"), and the
//! measurement behind [`super::bf16_gemm::bf16_dot_is_fast`].
//!
//! One loop per instruction, each the widest form this CPU has:
//! - f32 FMA: `vfmadd231ps` on zmm (AVX-512 F), else ymm (AVX2 + FMA), else
//!   none (a scalar loop would measure the compiler, not the core);
//! - bf16 dot: `vdpbf16ps` on zmm (AVX-512 BF16): 2 products per lane;
//! - int8 dot: `vpdpbusd` on zmm (AVX-512 VNNI), else ymm (AVX-VNNI):
//!   4 u8×i8 products per lane, summed into i32.
//!
//! Each loop keeps `ACCUMULATORS` independent chains, more than latency ×
//! issue ports on any current core (4-cycle FMAs on 2 ports need 8; Zen 4/5
//! `vdpbf16ps` 6 cycles on 2 ports, 12), so the rate is the issue rate.
//! Rates count a multiply-add as 2 operations (FLOPs, or integer ops for
//! int8), the convention of gemm GFLOP/s.

use std::time::Instant;

/// Independent accumulator chains per loop (zmm has 32 registers, ymm 16:
/// 12 chains and the two operands fit either).
const ACCUMULATORS: usize = 12;

/// An instruction the probe times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// f32 fused multiply-add.
    F32Fma,
    /// bf16 pair dot product into f32 (`vdpbf16ps`).
    Bf16Dot,
    /// u8×i8 quad dot product into i32 (`vpdpbusd`).
    Int8Dot,
}

impl Op {
    pub const ALL: [Op; 3] = [Op::F32Fma, Op::Bf16Dot, Op::Int8Dot];

    /// The dtype whose products this instruction runs: "f32", "bf16", "int8".
    pub fn dtype(self) -> &'static str {
        match self {
            Op::F32Fma => "f32",
            Op::Bf16Dot => "bf16",
            Op::Int8Dot => "int8",
        }
    }
}

/// The form of an [`Op`] this CPU runs, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Path {
    /// `vfmadd231ps zmm` (AVX-512 F).
    FmaZmm,
    /// `vfmadd231ps ymm` (AVX2 + FMA).
    FmaYmm,
    /// `vdpbf16ps zmm` (AVX-512 BF16).
    DotBf16Zmm,
    /// `vpdpbusd zmm` (AVX-512 VNNI).
    DotU8Zmm,
    /// `vpdpbusd ymm` (AVX-VNNI, VEX-encoded).
    DotU8Ymm,
}

impl Path {
    /// The instruction and register width, e.g. `vfmadd231ps zmm`.
    pub fn name(self) -> &'static str {
        match self {
            Path::FmaZmm => "vfmadd231ps zmm",
            Path::FmaYmm => "vfmadd231ps ymm",
            Path::DotBf16Zmm => "vdpbf16ps zmm",
            Path::DotU8Zmm => "vpdpbusd zmm",
            Path::DotU8Ymm => "vpdpbusd ymm (AVX-VNNI)",
        }
    }

    /// Operations (2 per multiply-add) one instruction does.
    fn ops_per_instruction(self) -> f64 {
        match self {
            Path::FmaZmm => 16.0 * 2.0,
            Path::FmaYmm => 8.0 * 2.0,
            Path::DotBf16Zmm => 16.0 * 2.0 * 2.0,
            Path::DotU8Zmm => 16.0 * 4.0 * 2.0,
            Path::DotU8Ymm => 8.0 * 4.0 * 2.0,
        }
    }
}

/// The widest form of `op` this CPU has ([`Path`]), or `None`.
pub fn path(op: Op) -> Option<Path> {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        match op {
            Op::F32Fma if has!("avx512f") => return Some(Path::FmaZmm),
            Op::F32Fma if has!("avx2") && has!("fma") => return Some(Path::FmaYmm),
            Op::Bf16Dot if has!("avx512f") && has!("avx512bf16") => return Some(Path::DotBf16Zmm),
            Op::Int8Dot if has!("avx512f") && has!("avx512vnni") => return Some(Path::DotU8Zmm),
            Op::Int8Dot if has!("avxvnni") => return Some(Path::DotU8Ymm),
            _ => {}
        }
    }
    let _ = op;
    None
}

/// One instruction's peak: operations per second on one thread and, run on
/// `threads` threads at once, their sum.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Peak {
    pub op: Op,
    pub path: Path,
    /// Operations per second on one thread, alone.
    pub per_thread: f64,
    /// Operations per second of `threads` threads at once, summed.
    pub all_threads: f64,
    pub threads: usize,
}

/// Steps of a timed run: `STEPS × ACCUMULATORS` instructions, about 0.1 ms
/// at two a cycle (long enough for the clock to settle past a timer tick,
/// short enough to be best-of-a-few in a millisecond).
const STEPS: u32 = 16_384;

/// Operations per second of `path` on the calling thread: the best of
/// `runs` timed runs.
pub fn rate(path: Path, runs: usize) -> f64 {
    let mut best = f64::INFINITY;
    for _ in 0..runs.max(1) {
        best = best.min(run(path, STEPS));
    }
    f64::from(STEPS) * ACCUMULATORS as f64 * path.ops_per_instruction() / best.max(1e-9)
}

/// `op`'s peak on one thread and on `threads` threads at once (each the
/// best of `runs`), or `None` where this CPU lacks the instruction.
pub fn peak(op: Op, threads: usize, runs: usize) -> Option<Peak> {
    let path = path(op)?;
    let per_thread = rate(path, runs);
    let threads = threads.max(1);
    let all_threads = if threads == 1 {
        per_thread
    } else {
        let start = std::sync::Barrier::new(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        rate(path, runs)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        })
    };
    Some(Peak {
        op,
        path,
        per_thread,
        all_threads,
        threads,
    })
}

/// Every instruction this CPU has ([`Op::ALL`]), on one and `threads` threads.
pub fn peaks(threads: usize, runs: usize) -> Vec<Peak> {
    Op::ALL
        .iter()
        .filter_map(|&op| peak(op, threads, runs))
        .collect()
}

/// This CPU in words: its model name (`/proc/cpuinfo`, else the
/// architecture) and the vector features the kernels dispatch on. The key
/// of measurements that hold for one kind of CPU (`models::auto_dtype`).
pub fn cpu_identity() -> String {
    let name = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let mut features: Vec<&str> = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::is_x86_feature_detected as has;
        for (f, on) in [
            ("avx2", has!("avx2")),
            ("fma", has!("fma")),
            ("avx512f", has!("avx512f")),
            ("avx512bf16", has!("avx512bf16")),
            ("avx512vnni", has!("avx512vnni")),
            ("avxvnni", has!("avxvnni")),
        ] {
            if on {
                features.push(f);
            }
        }
    }
    format!("{name} [{}]", features.join(" "))
}

/// Seconds for `steps` × [`ACCUMULATORS`] instructions of `path`.
fn run(path: Path, steps: u32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        let t = Instant::now();
        // SAFETY: `path` is only ever one [`path`] returned, so this CPU has
        // the features each loop is compiled for.
        unsafe {
            match path {
                Path::FmaZmm => x86::fma_zmm(steps),
                Path::FmaYmm => x86::fma_ymm(steps),
                Path::DotBf16Zmm => x86::dot_bf16_zmm(steps),
                Path::DotU8Zmm => x86::dot_u8_zmm(steps),
                Path::DotU8Ymm => x86::dot_u8_ymm(steps),
            }
        }
        t.elapsed().as_secs_f64()
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (path, steps);
        unreachable!("no probe path exists off x86-64")
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::ACCUMULATORS;
    use std::arch::x86_64::*;
    use std::hint::black_box;

    /// `steps` rounds of `$step` on each of the accumulators (a fixed-size
    /// array the compiler keeps in registers), then the sums escape.
    macro_rules! chains {
        ($zero:expr, $steps:expr, |$a:ident| $step:expr) => {{
            let mut acc = [$zero; ACCUMULATORS];
            for _ in 0..$steps {
                for $a in acc.iter_mut() {
                    *$a = $step;
                }
            }
            black_box(acc);
        }};
    }

    /// # Safety
    /// The CPU must have AVX-512 F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn fma_zmm(steps: u32) {
        let b = black_box(_mm512_set1_ps(0.999));
        chains!(_mm512_setzero_ps(), steps, |a| _mm512_fmadd_ps(b, b, *a));
    }

    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn fma_ymm(steps: u32) {
        let b = black_box(_mm256_set1_ps(0.999));
        chains!(_mm256_setzero_ps(), steps, |a| _mm256_fmadd_ps(b, b, *a));
    }

    /// # Safety
    /// The CPU must have AVX-512 F and BF16.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) unsafe fn dot_bf16_zmm(steps: u32) {
        // SAFETY: __m512bh and __m512i are both 64 plain bytes.
        let b: __m512bh = unsafe { std::mem::transmute(black_box(_mm512_set1_epi32(0x3f80_3f7f))) };
        chains!(_mm512_setzero_ps(), steps, |a| _mm512_dpbf16_ps(*a, b, b));
    }

    /// # Safety
    /// The CPU must have AVX-512 F and VNNI.
    #[target_feature(enable = "avx512f,avx512vnni")]
    pub(super) unsafe fn dot_u8_zmm(steps: u32) {
        let b = black_box(_mm512_set1_epi8(3));
        chains!(_mm512_setzero_si512(), steps, |a| _mm512_dpbusd_epi32(
            *a, b, b
        ));
    }

    /// # Safety
    /// The CPU must have AVX-VNNI.
    #[target_feature(enable = "avx2,avxvnni")]
    pub(super) unsafe fn dot_u8_ymm(steps: u32) {
        let b = black_box(_mm256_set1_epi8(3));
        chains!(_mm256_setzero_si256(), steps, |a| _mm256_dpbusd_avx_epi32(
            *a, b, b
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dispatch picks only forms this CPU has, the widest first, and every
    /// x86-64 CPU lmkit runs on has at least the AVX2 FMA.
    #[test]
    fn dispatch_picks_a_path_this_cpu_has() {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            let want_fma = if has!("avx512f") {
                Some(Path::FmaZmm)
            } else if has!("avx2") && has!("fma") {
                Some(Path::FmaYmm)
            } else {
                None
            };
            assert_eq!(path(Op::F32Fma), want_fma);
            assert_eq!(
                path(Op::Bf16Dot).is_some(),
                has!("avx512f") && has!("avx512bf16")
            );
            let vnni = has!("avx512f") && has!("avx512vnni");
            assert_eq!(path(Op::Int8Dot).is_some(), vnni || has!("avxvnni"));
            if vnni {
                assert_eq!(path(Op::Int8Dot), Some(Path::DotU8Zmm));
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        assert!(Op::ALL.iter().all(|&op| path(op).is_none()));
    }

    /// Every path this CPU has measures real work: a finite, positive rate a
    /// core can reach (a loop the compiler removed would read as near
    /// infinite, one that spilled to memory as far below 1e9), and all
    /// threads at least near one thread's rate.
    #[test]
    fn peaks_are_finite_positive_rates() {
        let found = peaks(2, 3);
        assert_eq!(
            found.len(),
            Op::ALL.iter().filter(|&&op| path(op).is_some()).count()
        );
        for p in found {
            let (one, all) = (p.per_thread, p.all_threads);
            assert!(
                one.is_finite() && one > 1e9 && one < 1e13,
                "{:?}: {one:.3e} op/s on one thread",
                p.path
            );
            assert!(
                all.is_finite() && all > 0.5 * one && all < 2.5 * one,
                "{:?}: {all:.3e} op/s on 2 threads, {one:.3e} on one",
                p.path
            );
            assert_eq!(p.threads, 2);
        }
    }
}
