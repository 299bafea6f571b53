//! Intel AMX (`amx_bf16`) for the bf16 gemm's register tiles: `tdpbf16ps`
//! multiplies a 14×32 A tile by a 16-pair × 16-column B tile per
//! instruction (Sapphire Rapids and later: 1024 FLOPs a cycle a core, 16×
//! the same core's AVX-512 BF16 rate).
//!
//! Used only where the CPU has it (`amx_bf16` and `amx_tile`), the OS has
//! enabled the tile state and grants it to this process (Linux:
//! `arch_prctl(ARCH_REQ_XCOMP_PERM)`), and a self-check on exact integer
//! data gives the reference's sums; else the AVX-512 kernel runs, so AMX
//! is never required. `LMKIT_AMX=0` turns it off.
//!
//! The operands are the gemm's own packed layouts, loaded as tiles in
//! place: a row-major A strip (MR rows of `kp` bf16s: 32 K values a tile
//! row, 64 bytes) and a B panel (per K pair, NR column pairs: 16 columns a
//! tile row, the operand `tdpbf16ps` takes, at a row stride of NR pairs).
//! A pair-major A strip (a weight gradient's transposed operand) is not a
//! tile's layout and stays on AVX-512. Each output is summed in K order by
//! one task, as on AVX-512, with the same f32 rounding of each pair's
//! products up to the order within a pair: results agree with AVX-512
//! within f32 rounding, not bit for bit.

use std::cell::Cell;
use std::sync::OnceLock;

use super::{MR, NR};

/// K pairs per tile step: a tile row holds 64 bytes (16 bf16 pairs).
pub(super) const TILE_PAIRS: usize = 16;

/// The tile configuration (palette 1): tmm0/tmm1 C (MR rows × 16 f32),
/// tmm2 A (MR rows × 32 bf16), tmm3/tmm4 B (16 pair rows × 16 columns).
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

const CONFIG: TileConfig = {
    let mut c = [0u8; 64];
    c[0] = 1;
    let mut t = 0;
    while t < 5 {
        // colsb (u16 at 16 + 2t): 64 bytes for every tile.
        c[16 + 2 * t] = 64;
        // rows (u8 at 48 + t).
        c[48 + t] = if t < 3 { MR as u8 } else { TILE_PAIRS as u8 };
        t += 1;
    }
    TileConfig(c)
};

thread_local! {
    /// Set by [`without_amx`] on the thread that starts a product.
    static OFF: Cell<bool> = const { Cell::new(false) };
}

/// Whether the bf16 gemm's tiles run on AMX here: detected, permitted and
/// self-checked once per process.
pub fn amx_usable() -> bool {
    static USABLE: OnceLock<bool> = OnceLock::new();
    *USABLE.get_or_init(|| {
        std::env::var("LMKIT_AMX").map_or(true, |v| v != "0")
            && super::has_avx512bf16()
            && cpu_and_os_allow()
            && self_check()
    })
}

/// Whether a product started on this thread now uses AMX.
pub(super) fn active() -> bool {
    !OFF.with(Cell::get) && amx_usable()
}

/// Runs `f` with the products it starts on this thread kept off AMX (on
/// AVX-512 BF16): for tests that compare the two.
pub fn without_amx<R>(f: impl FnOnce() -> R) -> R {
    let before = OFF.with(|o| o.replace(true));
    let r = f();
    OFF.with(|o| o.set(before));
    r
}

/// CPUID's `amx_bf16` and `amx_tile`, the tile state enabled in XCR0, and
/// (Linux) the kernel's grant of it to this process.
fn cpu_and_os_allow() -> bool {
    use std::arch::x86_64::__cpuid_count;
    #[allow(unused_unsafe, reason = "CPUID is safe in newer Rust releases")]
    // SAFETY: CPUID is present on every x86_64 CPU.
    let (leaf1, leaf7) = unsafe { (__cpuid_count(1, 0), __cpuid_count(7, 0)) };
    let osxsave = leaf1.ecx & (1 << 27) != 0;
    let amx = leaf7.edx & (1 << 22) != 0 && leaf7.edx & (1 << 24) != 0;
    if !(osxsave && amx) {
        return false;
    }
    // XTILECFG (bit 17) and XTILEDATA (bit 18).
    // SAFETY: OSXSAVE says XGETBV is enabled.
    let xcr0 = unsafe { xgetbv0() };
    xcr0 & (3 << 17) == 3 << 17 && os_grants_tiles()
}

/// # Safety
/// CPUID must report OSXSAVE.
#[target_feature(enable = "xsave")]
unsafe fn xgetbv0() -> u64 {
    std::arch::x86_64::_xgetbv(0)
}

#[cfg(target_os = "linux")]
fn os_grants_tiles() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: arch_prctl with these arguments only asks the kernel for a
    // permission; it reads and writes no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(not(target_os = "linux"))]
fn os_grants_tiles() -> bool {
    false
}

/// [`tile`]'s signature.
type TileFn = unsafe fn(*const u16, usize, *const u16, usize, *mut f32, usize, bool);

/// The tile kernel on small integers in bf16 (exact products and sums)
/// against plain sums, from zero and from a loaded C, over two tile steps.
fn self_check() -> bool {
    self_check_with(tile)
}

fn self_check_with(tile: TileFn) -> bool {
    const STEPS: usize = 2;
    let kp = 2 * TILE_PAIRS * STEPS;
    let bf = |v: i32| crate::util::bf16::f32_to_bf16(v as f32);
    let a_val = |r: usize, k: usize| ((r * 7 + k * 3) % 9) as i32 - 4;
    let b_val = |k: usize, j: usize| ((k * 5 + j * 11) % 7) as i32 - 3;
    let a: Vec<u16> = (0..MR * kp).map(|i| bf(a_val(i / kp, i % kp))).collect();
    // B panel: per K pair p, NR pairs (B[2p, j], B[2p+1, j]).
    let mut panel = vec![0u16; kp * NR];
    for p in 0..kp / 2 {
        for j in 0..NR {
            panel[p * 2 * NR + 2 * j] = bf(b_val(2 * p, j));
            panel[p * 2 * NR + 2 * j + 1] = bf(b_val(2 * p + 1, j));
        }
    }
    let start = |r: usize, j: usize| (r * NR + j) as f32 - 100.0;
    [false, true].into_iter().all(|load| {
        let mut c: Vec<f32> = (0..MR * NR)
            .map(|i| {
                if load {
                    start(i / NR, i % NR)
                } else {
                    f32::NAN
                }
            })
            .collect();
        // SAFETY: `amx_usable` checked the CPU and OS; `a` is MR rows of kp
        // bf16s, `panel` kp/2 pair rows of NR pairs, `c` MR×NR floats.
        unsafe {
            tile(
                a.as_ptr(),
                kp * 2,
                panel.as_ptr(),
                STEPS,
                c.as_mut_ptr(),
                NR,
                !load,
            );
        }
        (0..MR * NR).all(|i| {
            let (r, j) = (i / NR, i % NR);
            let sum: i32 = (0..kp).map(|k| a_val(r, k) * b_val(k, j)).sum();
            let from = if load { start(r, j) } else { 0.0 };
            c[i] == from + sum as f32
        })
    })
}

/// `c[MR, NR] = (zero ? 0 : c) + A·B` over `steps` × [`TILE_PAIRS`] K
/// pairs: A at `a`, MR rows `a_row_bytes` apart, 32 bf16s a step; B the
/// panel at `panel` (a K pair's NR pairs a row, 128 bytes); C rows `ldc`
/// floats apart.
///
/// # Safety
/// [`amx_usable`] must be true; `steps >= 1`; the operands must hold what
/// the shapes above read, and `c` MR rows of NR floats.
pub(super) unsafe fn tile(
    a: *const u16,
    a_row_bytes: usize,
    panel: *const u16,
    steps: usize,
    c: *mut f32,
    ldc: usize,
    zero: bool,
) {
    debug_assert!(steps >= 1);
    // SAFETY: the caller's promises; the tiles are configured, used and
    // released inside this one block, so no other code sees tile state.
    unsafe {
        std::arch::asm!(
            "ldtilecfg [{cfg}]",
            "test {zero:e}, {zero:e}",
            "jz 2f",
            "tilezero tmm0",
            "tilezero tmm1",
            "jmp 3f",
            "2:",
            "tileloadd tmm0, [{c} + {ldc}*1]",
            "tileloadd tmm1, [{c} + {ldc}*1 + 64]",
            "3:",
            "tileloadd tmm2, [{a} + {las}*1]",
            "tileloadd tmm3, [{b} + {lbs}*1]",
            "tileloadd tmm4, [{b} + {lbs}*1 + 64]",
            "tdpbf16ps tmm0, tmm2, tmm3",
            "tdpbf16ps tmm1, tmm2, tmm4",
            "add {a}, 64",
            "add {b}, {bstep}",
            "dec {n}",
            "jnz 3b",
            "tilestored [{c} + {ldc}*1], tmm0",
            "tilestored [{c} + {ldc}*1 + 64], tmm1",
            "tilerelease",
            cfg = in(reg) &CONFIG as *const TileConfig,
            zero = in(reg) u32::from(zero),
            c = in(reg) c,
            ldc = in(reg) ldc * 4,
            a = inout(reg) a => _,
            las = in(reg) a_row_bytes,
            b = inout(reg) panel => _,
            lbs = in(reg) NR * 4,
            bstep = in(reg) TILE_PAIRS * NR * 4,
            n = inout(reg) steps => _,
            options(nostack),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where /proc/cpuinfo lists no `amx_bf16`, AMX is never used (and
    /// asking never runs a tile instruction); where it is used, the CPU
    /// lists it.
    #[test]
    fn amx_only_where_the_cpu_has_it() {
        let listed = std::fs::read_to_string("/proc/cpuinfo")
            .map(|s| s.split_whitespace().any(|w| w == "amx_bf16"))
            .unwrap_or(false);
        if amx_usable() {
            assert!(listed || !cfg!(target_os = "linux"));
        }
        if !listed && cfg!(target_os = "linux") {
            assert!(!amx_usable());
        }
        assert!(!without_amx(active));
    }

    /// The instructions as the SDM defines them, over the same memory as
    /// [`tile`]'s block and with [`CONFIG`]'s tile shapes: checks the
    /// configuration, the strides and the steps where no CPU here has AMX.
    unsafe fn emulated(
        a: *const u16,
        a_row_bytes: usize,
        panel: *const u16,
        steps: usize,
        c: *mut f32,
        ldc: usize,
        zero: bool,
    ) {
        let cfg = &CONFIG.0;
        assert_eq!(cfg[0], 1, "palette 1");
        let rows = |t: usize| cfg[48 + t] as usize;
        let colsb = |t: usize| u16::from_le_bytes([cfg[16 + 2 * t], cfg[17 + 2 * t]]) as usize;
        // A tile as 32-bit words, `rows × colsb/4`, from `base` (bytes).
        let load = |t: usize, base: *const u8, stride: usize| -> Vec<Vec<u32>> {
            (0..rows(t))
                .map(|r| {
                    (0..colsb(t) / 4)
                        .map(|w| unsafe {
                            (base.add(r * stride + 4 * w) as *const u32).read_unaligned()
                        })
                        .collect()
                })
                .collect()
        };
        let half = |w: u32, i: u32| f32::from_bits(((w >> (16 * i)) & 0xFFFF) << 16);
        let (cb, ldcb) = (c as *mut u8, ldc * 4);
        let mut acc: Vec<Vec<Vec<f32>>> = (0..2)
            .map(|t| {
                let words = if zero {
                    vec![vec![0; colsb(t) / 4]; rows(t)]
                } else {
                    unsafe { load(t, cb.add(64 * t), ldcb) }
                };
                words
                    .iter()
                    .map(|r| r.iter().map(|&w| f32::from_bits(w)).collect())
                    .collect()
            })
            .collect();
        for step in 0..steps {
            let at = unsafe { (a as *const u8).add(64 * step) };
            let a_t = load(2, at, a_row_bytes);
            for (t, c_t) in acc.iter_mut().enumerate() {
                let bt = unsafe { (panel as *const u8).add(step * TILE_PAIRS * NR * 4 + 64 * t) };
                let b_t = load(3 + t, bt, NR * 4);
                assert!(
                    rows(t) == rows(2) && colsb(t) == colsb(3 + t) && colsb(2) == 4 * rows(3 + t)
                );
                for (m, c_row) in c_t.iter_mut().enumerate() {
                    for (k, b_row) in b_t.iter().enumerate() {
                        for (n, c) in c_row.iter_mut().enumerate() {
                            *c += half(a_t[m][k], 0) * half(b_row[n], 0);
                            *c += half(a_t[m][k], 1) * half(b_row[n], 1);
                        }
                    }
                }
            }
        }
        for (t, c_t) in acc.iter().enumerate() {
            for (m, row) in c_t.iter().enumerate() {
                for (n, &v) in row.iter().enumerate() {
                    unsafe { *c.add(m * ldc + 16 * t + n) = v };
                }
            }
        }
    }

    #[test]
    fn emulated_tiles_pass_the_self_check() {
        assert!(self_check_with(emulated));
    }

    /// The tile kernel's self-check passes: fails where the CPU has AMX
    /// and it gives other sums (or the OS refuses it).
    #[test]
    #[ignore = "needs Intel AMX (amx_bf16 in /proc/cpuinfo, granted by the OS): scripts/test.sh runs it there"]
    fn amx_tiles_exact_on_integers() {
        assert!(cpu_and_os_allow(), "AMX absent or not granted");
        assert!(self_check());
        assert!(amx_usable());
    }
}
