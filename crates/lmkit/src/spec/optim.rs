//! Optimizer hyper-parameters: AdamW settings, clipping, accumulation and
//! the learning-rate schedule (linear warmup, then cosine / linear decay to a
//! floor, or constant).

use serde::{Deserialize, Serialize};
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleKind {
    Cosine,
    Linear,
    Constant,
}

impl FromStr for ScheduleKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cosine" => Ok(Self::Cosine),
            "linear" => Ok(Self::Linear),
            "constant" => Ok(Self::Constant),
            other => Err(format!(
                "unknown schedule `{other}` (expected cosine, linear or constant)"
            )),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LrSchedule {
    pub kind: ScheduleKind,
    /// Peak learning rate, reached at the end of warmup.
    pub max_lr: f32,
    /// Floor the decay ends at (cosine/linear); ignored by constant.
    pub min_lr: f32,
    pub warmup_steps: u64,
    /// Total optimizer steps; the decay reaches `min_lr` at the last one.
    pub total_steps: u64,
}

impl LrSchedule {
    /// Learning rate for optimizer step `step` (0-based). Warmup is linear
    /// from `max_lr / warmup` (never 0, so step 0 already learns) to `max_lr`.
    pub fn lr(&self, step: u64) -> f32 {
        if step < self.warmup_steps {
            return self.max_lr * (step + 1) as f32 / self.warmup_steps as f32;
        }
        if self.kind == ScheduleKind::Constant {
            return self.max_lr;
        }
        let decay_steps = self.total_steps.saturating_sub(self.warmup_steps);
        if decay_steps <= 1 {
            return self.max_lr;
        }
        let progress = ((step - self.warmup_steps) as f64 / (decay_steps - 1) as f64).min(1.0);
        let coeff = match self.kind {
            ScheduleKind::Cosine => 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()),
            ScheduleKind::Linear => 1.0 - progress,
            ScheduleKind::Constant => 1.0,
        };
        (self.min_lr as f64 + coeff * (self.max_lr - self.min_lr) as f64) as f32
    }
}

/// Optimizer hyper-parameters that stay fixed during a run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OptimConfig {
    pub schedule: LrSchedule,
    pub beta1: f32,
    pub beta2: f32,
    pub eps: f32,
    pub weight_decay: f32,
    /// Global-norm clip threshold; 0 disables clipping.
    pub grad_clip: f32,
    /// Micro-batches per optimizer step.
    pub grad_accum: usize,
}

impl OptimConfig {
    /// Checks every value, naming the field: a negative or NaN learning rate
    /// would run gradient ascent (or nothing) without a word.
    pub fn validate(&self) -> crate::Result<()> {
        let s = &self.schedule;
        let bad = |field: &str, v: f32, want: &str| {
            Err(crate::Error::InvalidInput(format!(
                "`{field}` {v} must be {want}"
            )))
        };
        if !(s.max_lr.is_finite() && s.max_lr > 0.0) {
            return bad("lr", s.max_lr, "a positive number");
        }
        if !(s.min_lr.is_finite() && (0.0..=s.max_lr).contains(&s.min_lr)) {
            return bad("min_lr", s.min_lr, "in [0, lr]");
        }
        for (field, v) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&v) {
                return bad(field, v, "in [0, 1)");
            }
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return bad("eps", self.eps, "a positive number");
        }
        for (field, v) in [
            ("weight_decay", self.weight_decay),
            ("grad_clip", self.grad_clip),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return bad(field, v, "a non-negative number");
            }
        }
        if self.grad_accum == 0 {
            return Err(crate::Error::InvalidInput(
                "`grad_accum` must be at least 1".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sched(kind: ScheduleKind) -> LrSchedule {
        LrSchedule {
            kind,
            max_lr: 1e-3,
            min_lr: 1e-4,
            warmup_steps: 10,
            total_steps: 110,
        }
    }

    #[test]
    fn warmup_then_decay_to_floor() {
        for kind in [ScheduleKind::Cosine, ScheduleKind::Linear] {
            let s = sched(kind);
            assert!((s.lr(0) - 1e-4).abs() < 1e-9);
            assert!((s.lr(9) - 1e-3).abs() < 1e-9);
            assert!((s.lr(10) - 1e-3).abs() < 1e-9);
            assert!((s.lr(109) - 1e-4).abs() < 1e-9, "{kind:?} {}", s.lr(109));
            assert!((s.lr(500) - 1e-4).abs() < 1e-9);
            for step in 10..109 {
                assert!(s.lr(step + 1) <= s.lr(step));
            }
        }
        // Cosine midpoint is halfway between the peak and the floor.
        let c = sched(ScheduleKind::Cosine);
        let mid = c.lr(10 + 99 / 2);
        assert!((mid - 5.5e-4).abs() < 1e-5, "{mid}");
        let l = sched(ScheduleKind::Linear);
        assert!((l.lr(10 + 33) - (1e-3 - 0.9e-3 / 3.0)).abs() < 1e-7);
    }

    #[test]
    fn constant_after_warmup() {
        let s = sched(ScheduleKind::Constant);
        assert!((s.lr(4) - 5e-4).abs() < 1e-9);
        assert_eq!(s.lr(50), 1e-3);
        assert_eq!(s.lr(5000), 1e-3);
    }

    #[test]
    fn bad_values_are_refused_naming_the_field() {
        let good = OptimConfig {
            schedule: sched(ScheduleKind::Cosine),
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.01,
            grad_clip: 1.0,
            grad_accum: 1,
        };
        assert!(good.validate().is_ok());
        let mut c = good;
        c.schedule.max_lr = -1.0;
        assert!(c.validate().unwrap_err().to_string().contains("`lr` -1"));
        let mut c = good;
        c.schedule.max_lr = f32::NAN;
        assert!(c.validate().is_err());
        let mut c = good;
        c.schedule.min_lr = 1.0;
        assert!(c.validate().unwrap_err().to_string().contains("min_lr"));
        let mut c = good;
        c.beta2 = 1.0;
        assert!(c.validate().unwrap_err().to_string().contains("beta2"));
        let mut c = good;
        c.grad_clip = -1.0;
        assert!(c.validate().unwrap_err().to_string().contains("grad_clip"));
    }

    #[test]
    fn parses_names() {
        assert_eq!("cosine".parse::<ScheduleKind>(), Ok(ScheduleKind::Cosine));
        assert!("exp".parse::<ScheduleKind>().is_err());
    }
}
