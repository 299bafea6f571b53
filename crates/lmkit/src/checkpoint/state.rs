//! Training checkpoints: `ROOT/step-NNNNNNNN/` folders, each complete and
//! self-contained — the model in its architecture's own (HF) layout, written
//! by a callback, plus `optimizer.safetensors` (AdamW moments `exp_avg`,
//! `exp_avg_sq`, flat `[P]`) and `trainer_state.json` (step, data position,
//! RNG, hyper-parameters).
//!
//! Atomicity: everything is written into `ROOT/.tmp-step-N/`, every file is
//! fsynced, then the folder is renamed to `step-N` (atomic) and ROOT fsynced.
//! The latest checkpoint is simply the highest complete `step-N`, so a crash
//! (or a full disk) at any moment leaves the previous one intact; old
//! checkpoints are removed only after the new one is in place.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::safetensors::{write_safetensors, Dtype, SafeTensors, TensorRef};
use crate::spec::optim::OptimConfig;
use crate::util::fs::sync_dir;
use crate::util::rng::Rng;

pub const STATE_FILE: &str = "trainer_state.json";
pub const OPTIM_FILE: &str = "optimizer.safetensors";
const STATE_FORMAT: u32 = 1;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error("writing the model into {}: {message}", path.display())]
    Model { path: PathBuf, message: String },
    #[error(transparent)]
    File(#[from] crate::Error),
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> StateError + '_ {
    move |source| StateError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Where the sampler stands: the epoch and the next window index in its
/// permutation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DataPosition {
    pub epoch: u64,
    pub cursor: u64,
}

/// AdamW moments and the number of optimizer steps taken.
#[derive(Debug, Clone, PartialEq)]
pub struct OptimState {
    pub m: Vec<f32>,
    pub v: Vec<f32>,
    /// Optimizer steps completed (the next step is `step + 1`, 1-based in AdamW).
    pub step: u64,
}

impl OptimState {
    /// Zero moments, the zeros written now (in huge pages where the kernel
    /// allows). `vec![0.0; n]` maps the zero page lazily, and the first
    /// update reads each moment before writing it: a copy-on-write fault per
    /// 4 KiB page, each flushing the TLB of every core the process runs on
    /// (124M: 250k of them in the first step).
    pub fn new(num_params: usize) -> Self {
        OptimState {
            m: crate::util::alloc::huge_zeroed(num_params),
            v: crate::util::alloc::huge_zeroed(num_params),
            step: 0,
        }
    }
}

/// Everything besides parameters and moments that resuming needs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainState {
    pub format: u32,
    /// Optimizer steps completed.
    pub step: u64,
    pub data: DataPosition,
    /// RNG for anything random during training (sampling); data order is
    /// derived from `seed` and `data`.
    pub rng: Rng,
    pub seed: u64,
    pub tokens_seen: u64,
    pub elapsed_s: f64,
    pub optim: OptimConfig,
    pub batch_size: usize,
    pub seq_len: usize,
    pub num_params: usize,
    /// Architecture-specific facts (e.g. `{"arch": "gpt2"}`), checked on resume.
    pub extra: serde_json::Value,
}

impl TrainState {
    pub fn new(
        seed: u64,
        optim: OptimConfig,
        batch_size: usize,
        seq_len: usize,
        num_params: usize,
    ) -> Self {
        TrainState {
            format: STATE_FORMAT,
            step: 0,
            data: DataPosition::default(),
            rng: Rng::derive(seed, 0x5a4d_504c),
            seed,
            tokens_seen: 0,
            elapsed_s: 0.0,
            optim,
            batch_size,
            seq_len,
            num_params,
            extra: serde_json::Value::Null,
        }
    }
}

/// Name of the folder for step `step`.
pub fn step_dir_name(step: u64) -> String {
    format!("step-{step:08}")
}

fn parse_step(name: &str) -> Option<u64> {
    name.strip_prefix("step-")
        .filter(|s| s.len() >= 8 && s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse().ok())
}

/// All complete checkpoints under `root`, oldest first.
pub fn list_checkpoints(root: &Path) -> Result<Vec<(u64, PathBuf)>, StateError> {
    if !root.exists() {
        return Ok(vec![]);
    }
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root).map_err(io_err(root))? {
        let entry = entry.map_err(io_err(root))?;
        if let Some(step) = entry.file_name().to_str().and_then(parse_step) {
            if entry.path().join(STATE_FILE).is_file() {
                out.push((step, entry.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// The most recent complete checkpoint under `root`, if any.
pub fn latest_checkpoint(root: &Path) -> Result<Option<PathBuf>, StateError> {
    Ok(list_checkpoints(root)?.pop().map(|(_, p)| p))
}

/// Writes the flat moments as a safetensors file (F32 tensors `exp_avg`,
/// `exp_avg_sq`, shape [P]) plus `step` in the metadata.
fn write_optimizer(path: &Path, opt: &OptimState) -> Result<(), StateError> {
    let n = opt.m.len();
    let tensors = [
        TensorRef {
            name: "exp_avg".into(),
            shape: vec![n],
            data: &opt.m,
        },
        TensorRef {
            name: "exp_avg_sq".into(),
            shape: vec![n],
            data: &opt.v,
        },
    ];
    let meta = BTreeMap::from([("step".to_string(), opt.step.to_string())]);
    Ok(write_safetensors(path, &tensors, &meta)?)
}

/// Reads what [`write_optimizer`] wrote, checking names, dtypes and sizes
/// against the model's `num_params` before allocating.
fn read_optimizer(path: &Path, num_params: usize) -> Result<OptimState, StateError> {
    let bad = |message: String| StateError::Invalid {
        path: path.to_path_buf(),
        message,
    };
    let file = SafeTensors::open(path)?;
    let tensor = |name: &str| -> Result<Vec<f32>, StateError> {
        match (file.dtype(name), file.shape(name)) {
            (None, _) => Err(bad(format!("missing tensor `{name}`"))),
            (Some(Dtype::F32), Some([n])) if *n == num_params => {
                Ok(file.tensor_f32(name)?.into_owned())
            }
            (Some(Dtype::F32), Some(shape)) => Err(bad(format!(
                "tensor `{name}` has shape {shape:?}, the model has {num_params} parameters"
            ))),
            (Some(d), _) => Err(bad(format!("tensor `{name}` is {d:?}, expected F32"))),
        }
    };
    let step = file
        .metadata()
        .and_then(|m| m.get("step"))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("metadata has no `step`".into()))?;
    Ok(OptimState {
        m: tensor("exp_avg")?,
        v: tensor("exp_avg_sq")?,
        step,
    })
}

/// Model writer callback: writes the model files into the given folder.
pub type WriteModel<'a> =
    dyn FnMut(&Path) -> Result<(), Box<dyn std::error::Error + Send + Sync>> + 'a;

/// Writes checkpoint `root/step-N` atomically (see the module doc) and then
/// removes all but the newest `keep` checkpoints (keep ≥ 1).
pub fn save_checkpoint(
    root: &Path,
    state: &TrainState,
    opt: &OptimState,
    write_model: &mut WriteModel,
    keep: usize,
) -> Result<PathBuf, StateError> {
    std::fs::create_dir_all(root).map_err(io_err(root))?;
    let name = step_dir_name(state.step);
    let tmp = root.join(format!(".tmp-{name}"));
    let fin = root.join(&name);
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io_err(&tmp))?;
    }
    let result = (|| -> Result<(), StateError> {
        std::fs::create_dir_all(&tmp).map_err(io_err(&tmp))?;
        write_model(&tmp).map_err(|e| StateError::Model {
            path: tmp.clone(),
            message: e.to_string(),
        })?;
        write_optimizer(&tmp.join(OPTIM_FILE), opt)?;
        let json = serde_json::to_vec_pretty(state).expect("state serializes");
        let sp = tmp.join(STATE_FILE);
        let mut f = File::create(&sp).map_err(io_err(&sp))?;
        f.write_all(&json).map_err(io_err(&sp))?;
        f.sync_all().map_err(io_err(&sp))?;
        // The model writer may not fsync; make every file durable before the rename.
        for entry in std::fs::read_dir(&tmp).map_err(io_err(&tmp))? {
            let p = entry.map_err(io_err(&tmp))?.path();
            if p.is_file() {
                File::open(&p)
                    .and_then(|f| f.sync_all())
                    .map_err(io_err(&p))?;
            }
        }
        sync_dir(&tmp)?;
        if fin.exists() {
            // Same step saved twice (e.g. the end of a run right after a
            // periodic save): move the old one aside, then drop it.
            let old = root.join(format!(".old-{name}"));
            let _ = std::fs::remove_dir_all(&old);
            std::fs::rename(&fin, &old).map_err(io_err(&fin))?;
            std::fs::rename(&tmp, &fin).map_err(io_err(&fin))?;
            let _ = std::fs::remove_dir_all(&old);
        } else {
            std::fs::rename(&tmp, &fin).map_err(io_err(&fin))?;
        }
        Ok(sync_dir(root)?)
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    // Leftovers of a run killed mid-save or mid-prune (never a complete `step-N`).
    if let Ok(entries) = std::fs::read_dir(root) {
        for e in entries.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if [".tmp-step-", ".trash-step-", ".old-step-"]
                .iter()
                .any(|p| name.starts_with(p))
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let all = list_checkpoints(root)?;
    let keep = keep.max(1);
    if all.len() > keep {
        for (_, old) in &all[..all.len() - keep] {
            // Rename first so a crash mid-delete never leaves a partial `step-N`.
            let trash = root.join(format!(
                ".trash-{}",
                old.file_name().and_then(|n| n.to_str()).unwrap_or("old")
            ));
            if std::fs::rename(old, &trash).is_ok() {
                let _ = std::fs::remove_dir_all(&trash);
            }
        }
    }
    Ok(fin)
}

/// Step folders under `root` that are not complete checkpoints (no
/// `trainer_state.json`: a copy cut short, or a file removed by hand), newer
/// than the newest complete one — what a resume passes over, so it can say so.
pub fn skipped_checkpoints(root: &Path) -> Result<Vec<PathBuf>, StateError> {
    if !root.exists() {
        return Ok(vec![]);
    }
    let newest = list_checkpoints(root)?.last().map_or(0, |(s, _)| *s + 1);
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root).map_err(io_err(root))? {
        let entry = entry.map_err(io_err(root))?;
        if let Some(step) = entry.file_name().to_str().and_then(parse_step) {
            if step >= newest && !entry.path().join(STATE_FILE).is_file() {
                out.push((step, entry.path()));
            }
        }
    }
    out.sort();
    Ok(out.into_iter().map(|(_, p)| p).collect())
}

/// Reads only the trainer state of checkpoint `dir` (not the moments).
pub fn read_train_state(dir: &Path) -> Result<TrainState, StateError> {
    let sp = dir.join(STATE_FILE);
    let text = std::fs::read_to_string(&sp).map_err(io_err(&sp))?;
    let state: TrainState = serde_json::from_str(&text).map_err(|e| StateError::Invalid {
        path: sp.clone(),
        message: e.to_string(),
    })?;
    if state.format != STATE_FORMAT {
        return Err(StateError::Invalid {
            path: sp,
            message: format!(
                "state format {} (this build reads {STATE_FORMAT})",
                state.format
            ),
        });
    }
    Ok(state)
}

/// Reads the training state and optimizer moments of checkpoint `dir`.
pub fn load_train_state(dir: &Path) -> Result<(TrainState, OptimState), StateError> {
    let state = read_train_state(dir)?;
    let opt = read_optimizer(&dir.join(OPTIM_FILE), state.num_params)?;
    if opt.step != state.step {
        return Err(StateError::Invalid {
            path: dir.join(OPTIM_FILE),
            message: format!("optimizer step {} != trainer step {}", opt.step, state.step),
        });
    }
    Ok((state, opt))
}
