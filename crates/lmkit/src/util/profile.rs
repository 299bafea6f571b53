//! Per-phase wall time of a training step (`lmkit pretrain --profile`):
//! where a step goes outside the matmuls.
//!
//! Call sites wrap a kernel call in [`span`] / [`timed`] with its
//! [`Phase`]. While no [`Enable`] guard is alive that costs one relaxed
//! atomic load. While one is, each span reads the clock on entry and exit and
//! charges the time to this thread's accumulator; a span opened inside
//! another pauses the outer one, so phases never overlap and their sum is
//! at most the step's wall time (the rest is "unaccounted"). The clock is
//! per thread: call sites are on the thread driving the step (the kernels
//! parallelise inside), and each rank of a threaded data-parallel run keeps
//! its own. [`take`] reads and clears this thread's times.

use std::cell::RefCell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// What a part of a training step does. Mutually exclusive by
/// construction (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// The linear layers' products, forward and backward (f32 or bf16).
    Matmul,
    /// The LM head's products (logits, dx, dW), fused with the loss.
    LmHeadMatmul,
    /// Attention: QKᵀ, the masked softmax and ·V, forward and backward
    /// (one fused kernel: its products and softmax are not told apart).
    Attention,
    /// The LM head's softmax and cross-entropy (and its row bookkeeping).
    LmHeadLoss,
    LayerNorm,
    Gelu,
    /// Token and position embeddings, forward and backward.
    Embedding,
    /// Residual additions.
    Residual,
    /// Zeroing gradients and scratch, copying inputs.
    Copy,
    /// Packing the weights into bf16 at a forward: the first, and after a
    /// sharded optimizer step (an unsharded one packs them as it updates
    /// them, inside [`Phase::AdamW`]).
    WeightPack,
    /// The global gradient norm and the clipping scale.
    GradNorm,
    /// The optimizer's update, with the bf16 packing of the updated
    /// weights where the step packs them ([`Phase::WeightPack`]).
    AdamW,
    /// Data-parallel collectives waited for on the step's thread.
    Comm,
    /// Drawing the next batch.
    Data,
    /// Checks and buffer sizing.
    Other,
}

const PHASES: usize = 15;

impl Phase {
    /// Every phase, in report order.
    pub const ALL: [Phase; PHASES] = [
        Phase::Matmul,
        Phase::LmHeadMatmul,
        Phase::Attention,
        Phase::LmHeadLoss,
        Phase::LayerNorm,
        Phase::Gelu,
        Phase::Embedding,
        Phase::Residual,
        Phase::Copy,
        Phase::WeightPack,
        Phase::GradNorm,
        Phase::AdamW,
        Phase::Comm,
        Phase::Data,
        Phase::Other,
    ];

    /// The name in tables and metrics rows.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Matmul => "matmul",
            Phase::LmHeadMatmul => "lm_head_matmul",
            Phase::Attention => "attention",
            Phase::LmHeadLoss => "lm_head_loss",
            Phase::LayerNorm => "layernorm",
            Phase::Gelu => "gelu",
            Phase::Embedding => "embedding",
            Phase::Residual => "residual",
            Phase::Copy => "copy",
            Phase::WeightPack => "weight_pack",
            Phase::GradNorm => "grad_norm",
            Phase::AdamW => "adamw",
            Phase::Comm => "comm",
            Phase::Data => "data",
            Phase::Other => "other",
        }
    }

    /// Products only (the linear layers' and the LM head's).
    pub fn is_matmul(self) -> bool {
        matches!(self, Phase::Matmul | Phase::LmHeadMatmul)
    }
}

/// Live [`Enable`] guards: counted, so that concurrent runs in one process
/// (tests) do not switch each other off.
static ENABLED: AtomicUsize = AtomicUsize::new(0);

/// Whether spans are timed.
#[inline]
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed) != 0
}

/// Times spans while alive.
#[must_use = "profiling stops when the guard is dropped"]
pub struct Enable(());

impl Enable {
    pub fn new() -> Self {
        ENABLED.fetch_add(1, Ordering::Relaxed);
        Enable(())
    }
}

impl Default for Enable {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Enable {
    fn drop(&mut self) {
        ENABLED.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One thread's accumulated nanoseconds per phase and its open spans.
#[derive(Default)]
struct Clock {
    ns: [u64; PHASES],
    open: Vec<Phase>,
    /// When the innermost open span last started or resumed.
    mark: Option<Instant>,
}

impl Clock {
    /// Charges the time since `mark` to the innermost open span.
    fn charge(&mut self, now: Instant) {
        if let (Some(&p), Some(mark)) = (self.open.last(), self.mark) {
            self.ns[p as usize] += now.duration_since(mark).as_nanos() as u64;
        }
        self.mark = Some(now);
    }
}

thread_local! {
    static CLOCK: RefCell<Clock> = RefCell::new(Clock::default());
}

/// An open span: its phase is charged until it drops.
#[must_use = "the span ends when dropped"]
pub struct Span(bool);

/// Opens a span of `phase` (a no-op while profiling is off).
#[inline]
pub fn span(phase: Phase) -> Span {
    if !enabled() {
        return Span(false);
    }
    CLOCK.with(|c| {
        let mut c = c.borrow_mut();
        c.charge(Instant::now());
        c.open.push(phase);
    });
    Span(true)
}

impl Drop for Span {
    fn drop(&mut self) {
        if self.0 {
            CLOCK.with(|c| {
                let mut c = c.borrow_mut();
                c.charge(Instant::now());
                c.open.pop();
            });
        }
    }
}

/// Runs `f` in a span of `phase`.
#[inline]
pub fn timed<R>(phase: Phase, f: impl FnOnce() -> R) -> R {
    let _span = span(phase);
    f()
}

/// Seconds per phase of one step (indexed like [`Phase::ALL`]).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PhaseTimes(pub [f64; PHASES]);

impl PhaseTimes {
    pub fn get(&self, p: Phase) -> f64 {
        self.0[p as usize]
    }

    pub fn total(&self) -> f64 {
        self.0.iter().sum()
    }
}

/// This thread's times since the last `take`, cleared (spans still open
/// keep running into the next).
pub fn take() -> PhaseTimes {
    CLOCK.with(|c| {
        let mut c = c.borrow_mut();
        c.charge(Instant::now());
        let ns = std::mem::take(&mut c.ns);
        PhaseTimes(ns.map(|x| x as f64 * 1e-9))
    })
}

/// Adds `t` to this thread's times (phases timed on another thread for
/// this one, [`super::parallel::on_pool`]).
pub fn add(t: &PhaseTimes) {
    CLOCK.with(|c| {
        let mut c = c.borrow_mut();
        for (ns, s) in c.ns.iter_mut().zip(t.0) {
            *ns += (s * 1e9).round() as u64;
        }
    })
}

/// Steps' phase times summed, for a mean over the steps after the first
/// (which warms caches, the allocator and the bf16 packs' buffers up).
#[derive(Debug, Clone, Default)]
pub struct StepProfiler {
    first: Option<(f64, PhaseTimes)>,
    steps: u64,
    step_s: f64,
    sum: PhaseTimes,
}

impl StepProfiler {
    /// Adds a step that took `step_s` seconds.
    pub fn add(&mut self, step_s: f64, t: &PhaseTimes) {
        if self.first.is_none() {
            self.first = Some((step_s, *t));
            return;
        }
        self.steps += 1;
        self.step_s += step_s;
        for (s, x) in self.sum.0.iter_mut().zip(t.0) {
            *s += x;
        }
    }

    /// The mean step (the first alone when there is no other); `None`
    /// before any step.
    pub fn report(&self) -> Option<StepProfile> {
        let (steps, step_s, sum) = match self.first {
            None => return None,
            Some((s, t)) if self.steps == 0 => (1, s, t),
            Some(_) => (self.steps, self.step_s, self.sum),
        };
        let ms = |s: f64| s * 1e3 / steps as f64;
        Some(StepProfile {
            steps,
            first_skipped: self.steps > 0,
            step_ms: ms(step_s),
            phases: Phase::ALL
                .iter()
                .map(|&p| PhaseMs {
                    phase: p.name(),
                    ms: ms(sum.get(p)),
                })
                .collect(),
        })
    }
}

/// One phase's mean milliseconds per step.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PhaseMs {
    pub phase: &'static str,
    pub ms: f64,
}

/// The mean training step, phase by phase (what `--profile` prints).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StepProfile {
    /// Steps averaged.
    pub steps: u64,
    /// Whether the first (warm-up) step was left out.
    pub first_skipped: bool,
    /// Mean wall time of a step.
    pub step_ms: f64,
    /// Every phase of [`Phase::ALL`], in that order.
    pub phases: Vec<PhaseMs>,
}

impl StepProfile {
    fn ms(&self, p: Phase) -> f64 {
        self.phases
            .iter()
            .find(|x| x.phase == p.name())
            .map_or(0.0, |x| x.ms)
    }

    /// Milliseconds per step in the matmul phases.
    pub fn matmul_ms(&self) -> f64 {
        Phase::ALL
            .iter()
            .filter(|p| p.is_matmul())
            .map(|&p| self.ms(p))
            .sum()
    }

    /// Milliseconds per step in no phase.
    pub fn unaccounted_ms(&self) -> f64 {
        (self.step_ms - self.phases.iter().map(|p| p.ms).sum::<f64>()).max(0.0)
    }

    /// The step's share outside the products, as bounds: attention's fused
    /// kernel counted as all products (low) or as none (high). Unaccounted
    /// time counts as outside.
    pub fn non_matmul_share(&self) -> (f64, f64) {
        let step = self.step_ms.max(1e-12);
        let outside = (step - self.matmul_ms()).max(0.0);
        let att = self.ms(Phase::Attention);
        ((outside - att).max(0.0) / step, outside / step)
    }

    /// A table of the phases (largest first), the step, and the shares.
    pub fn table(&self) -> String {
        self.table_of("a training step")
    }

    /// [`Self::table`], its title saying the time is that of `what`.
    pub fn table_of(&self, what: &str) -> String {
        use std::fmt::Write;
        let step = self.step_ms.max(1e-12);
        let mut rows: Vec<&PhaseMs> = self.phases.iter().collect();
        rows.sort_by(|a, b| b.ms.total_cmp(&a.ms));
        let mut s = format!(
            "per-phase time of {what} (mean of {} step{}{}):\n{:<16}{:>10}{:>8}\n",
            self.steps,
            if self.steps == 1 { "" } else { "s" },
            if self.first_skipped {
                " after the first"
            } else {
                ""
            },
            "phase",
            "ms",
            "share"
        );
        let mut line = |name: &str, ms: f64| {
            let _ = writeln!(s, "{name:<16}{ms:>10.2}{:>7.1}%", 100.0 * ms / step);
        };
        for p in rows {
            line(p.phase, p.ms);
        }
        line("unaccounted", self.unaccounted_ms());
        line("step", self.step_ms);
        let (low, high) = self.non_matmul_share();
        let _ = writeln!(
            s,
            "matmul share {:.1}%; non-matmul share {:.1}% with attention counted as products, {:.1}% with it counted outside",
            100.0 * self.matmul_ms() / step,
            100.0 * low,
            100.0 * high
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(ms: u64) {
        let t = Instant::now();
        while t.elapsed().as_millis() < ms as u128 {}
    }

    /// Nested spans are exclusive: the outer phase is paused while the
    /// inner one runs, and the sum stays within the wall time.
    #[test]
    fn nested_spans_are_exclusive() {
        let _on = Enable::new();
        let t0 = Instant::now();
        timed(Phase::LmHeadLoss, || {
            spin(5);
            timed(Phase::LmHeadMatmul, || spin(10));
        });
        let wall = t0.elapsed().as_secs_f64();
        let t = take();
        assert!(t.get(Phase::LmHeadMatmul) >= 0.010);
        assert!(t.get(Phase::LmHeadLoss) >= 0.005);
        // Counted in both, the inner 10 ms would make the sum exceed the
        // wall time (an upper bound on the outer phase alone would fail
        // whenever a loaded machine preempts the thread inside it).
        assert!(t.total() <= wall, "{t:?} over {wall} s");
        assert_eq!(take().total(), 0.0, "take clears");
    }

    #[test]
    fn profile_skips_the_first_step_and_formats() {
        let mut p = StepProfiler::default();
        assert!(p.report().is_none());
        let mut t = PhaseTimes::default();
        t.0[Phase::Matmul as usize] = 0.5;
        p.add(10.0, &t);
        t.0[Phase::Matmul as usize] = 0.06;
        t.0[Phase::Attention as usize] = 0.02;
        t.0[Phase::LayerNorm as usize] = 0.01;
        p.add(0.1, &t);
        p.add(0.1, &t);
        let r = p.report().unwrap();
        assert_eq!((r.steps, r.first_skipped), (2, true));
        assert!((r.step_ms - 100.0).abs() < 1e-9);
        assert!((r.matmul_ms() - 60.0).abs() < 1e-9);
        assert!((r.unaccounted_ms() - 10.0).abs() < 1e-9);
        let (low, high) = r.non_matmul_share();
        assert!((low - 0.2).abs() < 1e-9 && (high - 0.4).abs() < 1e-9);
        let table = r.table();
        assert!(table.contains("matmul share 60.0%"), "{table}");
        assert!(table.contains("layernorm"), "{table}");
    }
}
