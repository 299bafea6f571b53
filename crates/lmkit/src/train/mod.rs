//! Training, architecture-neutral: schedules, RNG, metrics, the optimizer
//! state and the step/loop over any [`Trainable`] model.

pub mod metrics;
pub mod rng;
pub mod schedule;

pub use metrics::{read_metrics, MetricsWriter};
pub use rng::Rng;
pub use schedule::{LrSchedule, ScheduleKind};
