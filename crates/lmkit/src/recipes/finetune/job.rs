//! A fine-tuning run's identity: what it starts from, on what data, into
//! which folder, with which settings ([`RunRecord`], kept in its
//! checkpoints), and the checks a fresh start or a `resume` makes before
//! anything is written.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::checkpoint::{load_params, open_model_dir_for, LoadOptions};
use crate::data::shards::fingerprint_files;
use crate::models::auto_dtype::{model_shapes, DtypeRequest};
use crate::spec::config::ModelConfig;
use crate::spec::Precision;
use crate::tasks::{FinetuneOptions, TaskKind};
use crate::train::{
    latest_checkpoint, load_train_state, read_train_state, skipped_checkpoints, DataPosition,
    OptimState, TrainState, Trainable,
};
use crate::util::comm::Communicator;

use super::super::pretrain_options::init_from_record;
use super::super::run_record::{check_global_batch, check_same_run};
use super::super::{check_output, invalid, RecipeError, Result};
use super::Steps;

/// One fine-tuning run: what it starts from, on what data, into which
/// folder; recorded in its checkpoints and checked on `resume`.
pub(super) struct Job<'a> {
    /// The ranks of a data-parallel run (one process: [`SingleProcess`]).
    pub(super) comm: &'a dyn Communicator,
    model_dir: &'a Path,
    train: &'a Path,
    eval: Option<&'a Path>,
    pub(super) output: &'a Path,
    /// What the checkpoints record of this run (`examples` 0 until the
    /// data is read).
    pub(super) record: RunRecord,
    /// The newest checkpoint, when resuming.
    pub(super) resume: Option<PathBuf>,
    /// Passed-over step folders, told once the run starts.
    pub(super) notes: Vec<String>,
}

/// What a fine-tuning checkpoint records of its run (`extra.finetune` of
/// the trainer state): on `resume` the command must give the same.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct RunRecord {
    task: String,
    /// The starting checkpoint, canonical.
    model: String,
    /// Fingerprints of the training and evaluation files' contents.
    train: String,
    eval: Option<String>,
    epochs: usize,
    /// Per rank.
    batch_size: usize,
    /// Ranks of the data-parallel run; 1 in checkpoints from before.
    #[serde(default = "crate::recipes::pretrain_options::one")]
    ranks: usize,
    lr: f32,
    warmup_ratio: f64,
    max_seq_len: usize,
    seed: u64,
    weight_decay: f32,
    beta1: f32,
    beta2: f32,
    eps: f32,
    grad_clip: f32,
    /// QA only.
    doc_stride: Option<usize>,
    /// Classification and multiple choice only (GPT-2 uses it).
    lm_coef: Option<f32>,
    /// Training items (examples, windows or blocks) the data made.
    pub(super) examples: usize,
    /// The matmuls' number format; f32 in checkpoints from before.
    #[serde(default)]
    pub(super) dtype: Precision,
}

fn fingerprint(path: &Path) -> Result<String> {
    fingerprint_files(&[path.to_path_buf()]).map_err(|source| RecipeError::Io {
        path: path.to_path_buf(),
        source,
    })
}

impl<'a> Job<'a> {
    /// Checks the options and the output folder before anything is read or
    /// written: a fresh run needs an absent or empty folder (or
    /// `overwrite`); `resume` needs a checkpoint of this command's run there
    /// (task, starting model, data and training options are compared now;
    /// the item count and model size once the data and model are loaded).
    pub(super) fn start(
        task: TaskKind,
        model_dir: &'a Path,
        train: &'a Path,
        eval: Option<&'a Path>,
        output: &'a Path,
        opts: &FinetuneOptions,
        comm: &'a dyn Communicator,
    ) -> Result<Self> {
        opts.check()?;
        let dtype = match opts.dtype {
            DtypeRequest::Fixed(p) => p,
            auto => {
                let config = crate::checkpoint::read_config(model_dir, None)?;
                auto.resolve_training(&model_shapes(&config), comm.world_size())?
            }
        };
        let mut job = Job {
            comm,
            model_dir,
            train,
            eval,
            output,
            record: RunRecord {
                task: task.name().into(),
                model: init_from_record(&Some(model_dir.to_path_buf()))
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                train: fingerprint(train)?,
                eval: eval.map(fingerprint).transpose()?,
                epochs: opts.epochs,
                batch_size: opts.batch_size,
                ranks: comm.world_size(),
                lr: opts.lr,
                warmup_ratio: opts.warmup_ratio,
                max_seq_len: opts.max_seq_len,
                seed: opts.seed,
                weight_decay: opts.weight_decay,
                beta1: opts.beta1,
                beta2: opts.beta2,
                eps: opts.eps,
                grad_clip: opts.grad_clip,
                doc_stride: task.uses("doc_stride").then_some(opts.doc_stride),
                lm_coef: task.uses("lm_coef").then_some(opts.lm_coef),
                examples: 0,
                dtype,
            },
            resume: None,
            notes: Vec::new(),
        };
        let root = output.join("checkpoints");
        if !opts.resume {
            if let (Some(d), false) = (latest_checkpoint(&root)?, opts.overwrite) {
                return Err(invalid(format!(
                    "{} holds a fine-tuning run (checkpoint {}); pass `resume` to continue it, \
                     or `overwrite` to start again",
                    output.display(),
                    d.display()
                )));
            }
            check_output(model_dir, output, opts.overwrite)?;
            return Ok(job);
        }
        if opts.overwrite {
            return Err(invalid(
                "`resume` continues the run in the output folder and `overwrite` replaces it: give one",
            ));
        }
        check_output(model_dir, output, true)?;
        let dir = latest_checkpoint(&root)?.ok_or_else(|| {
            invalid(format!(
                "`resume`: no checkpoint in {} to resume from",
                root.display()
            ))
        })?;
        for d in skipped_checkpoints(&root)? {
            job.notes.push(format!(
                "note: {} is not a complete checkpoint (no trainer_state.json); resuming from the newest complete one",
                d.display()
            ));
        }
        let state = read_train_state(&dir)?;
        job.check(&dir, &state, None)?;
        job.resume = Some(dir);
        Ok(job)
    }

    /// The checkpoint in `dir` (trainer state `state`) belongs to this
    /// command's run: an error naming what differs otherwise. `examples`:
    /// the items this command's data made, once known.
    fn check(&self, dir: &Path, state: &TrainState, examples: Option<usize>) -> Result<()> {
        let saved: RunRecord = state
            .extra
            .get("finetune")
            .and_then(|v| serde_json::from_value(v.clone()).ok())
            .ok_or_else(|| {
                invalid(format!(
                    "{}: not a fine-tuning checkpoint (a pretraining run? continue it with pretrain)",
                    dir.display()
                ))
            })?;
        let given = RunRecord {
            examples: examples.unwrap_or(saved.examples),
            ..self.record.clone()
        };
        let out = self.output.display();
        if saved.task != given.task {
            return Err(invalid(format!(
                "`task` {}: the run in {out} fine-tunes for `{}`; an exact resume needs the same task",
                given.task, saved.task
            )));
        }
        if saved.model != given.model {
            return Err(invalid(format!(
                "`model` {} differs from the run's starting checkpoint {}; `resume` continues that run",
                self.model_dir.display(),
                saved.model
            )));
        }
        if saved.train != given.train {
            return Err(invalid(format!(
                "`train` {}: not the data the run in {out} was trained on (its contents differ); \
                 an exact resume needs the same data",
                self.train.display()
            )));
        }
        if saved.eval != given.eval {
            return Err(invalid(format!(
                "`eval` {}: not the evaluation data of the run in {out}; give the same `eval` (or none, if it had none)",
                self.eval.map_or("(none)".into(), |p| p.display().to_string())
            )));
        }
        check_global_batch(
            (given.batch_size, given.ranks),
            (saved.batch_size, saved.ranks),
        )?;
        // Compared above, or told in the data's own terms below.
        let apart = [
            "task",
            "model",
            "train",
            "eval",
            "batch_size",
            "ranks",
            "examples",
        ];
        check_same_run(&given, &saved, &apart)?;
        if given.examples != saved.examples {
            return Err(invalid(format!(
                "the data now makes {} training items, the run in {out} had {}: \
                 an exact resume needs the same items",
                given.examples, saved.examples
            )));
        }
        Ok(())
    }
}

/// The trainer state and moments of checkpoint `dir`, its parameters loaded
/// into `model`, after checking that it is this command's run, that it
/// fits the model and the data, and that it has steps left.
pub(super) fn resume_from<M: Trainable>(
    dir: &Path,
    job: &Job,
    opts: &FinetuneOptions,
    model: &mut M,
    n_examples: usize,
    steps: Steps,
) -> Result<(TrainState, OptimState)> {
    let (total, schedule_steps) = (steps.total, steps.schedule);
    let (state, opt) = load_train_state(dir)?;
    job.check(dir, &state, Some(n_examples))?;
    let num_params = model.params().len();
    if state.num_params != num_params {
        return Err(invalid(format!(
            "{}: the checkpoint's model has {} parameters, this command's {num_params}",
            dir.display(),
            state.num_params
        )));
    }
    let DataPosition { epoch, cursor } = state.data;
    if epoch >= opts.epochs as u64 || cursor > n_examples as u64 {
        return Err(invalid(format!(
            "{}: data position (epoch {epoch}, item {cursor}) is outside the run's {} epochs of {n_examples} items",
            dir.display(),
            opts.epochs
        )));
    }
    if state.step >= schedule_steps {
        return Err(invalid(format!(
            "the run in {} is complete: all {} epochs ({schedule_steps} steps) are done and its model is there; \
             nothing to resume",
            job.output.display(),
            opts.epochs
        )));
    }
    if state.step >= total {
        return Err(invalid(format!(
            "the checkpoint is at step {}, already at `max_steps` {total}; raise `max_steps` (or drop it) to continue",
            state.step
        )));
    }
    let (config, file) = open_model_dir_for(dir, None)?;
    let layout = model.layout().clone();
    load_params(
        &layout,
        model.params_and_grads().0,
        &file,
        config.family(),
        LoadOptions::default(),
    )?;
    Ok((state, opt))
}
