//! Training, architecture-neutral: the optimizer step over any
//! [`Trainable`] model (accumulation, clipping, AdamW, schedule), metrics,
//! and the re-exports a training loop needs (hyper-parameters from `spec`,
//! resumable checkpoints from `checkpoint::state`).

pub mod metrics;
pub mod runner;
pub mod step;

pub use crate::checkpoint::state::{
    latest_checkpoint, list_checkpoints, load_train_state, read_train_state, save_checkpoint,
    skipped_checkpoints, DataPosition, OptimState, StateError, TrainState,
};
pub use crate::models::{LossParts, Trainable};
pub use crate::spec::optim::{LrSchedule, OptimConfig, ScheduleKind};
pub use metrics::{read_metrics, MetricsWriter};
pub use runner::{RunConfig, RunEvent, RunSummary, RunTask, Runner, StopRequest};
pub use step::{train_step, train_step_parallel, DataParallel, StepError, StepStats};
