//! Training, architecture-neutral: schedules, RNG, metrics, the optimizer
//! state and step over any [`Trainable`] model, and resumable checkpoints.

pub mod bert_pretrain;
pub mod finetune;
pub mod metrics;
pub mod rng;
pub mod schedule;
pub mod state;
pub mod trainer;

pub use metrics::{read_metrics, MetricsWriter};
pub use rng::Rng;
pub use schedule::{LrSchedule, ScheduleKind};
pub use state::{
    latest_checkpoint, list_checkpoints, load_train_state, save_checkpoint, StateError, TrainState,
};
pub use trainer::{
    train_step, LossParts, OptimConfig, OptimState, StepError, StepStats, Trainable,
};
