//! Data-parallel runs: the [`Communicator`] of this process — MPI's world
//! when started by `mpirun` / `srun` (built with the `mpi` feature), else
//! one process — and the rule that a rank's error ends the whole job.

use anyhow::{bail, Result};
use lmkit::util::comm::{launcher_world_size, Communicator, SingleProcess};
use std::time::Duration;

/// The flags of the commands that train data-parallel (`pretrain`,
/// `finetune`).
#[derive(clap::Args, Debug, Clone, PartialEq)]
pub struct DistArgs {
    /// Data-parallel runs (`mpirun -np N lmkit ...`): each rank keeps the
    /// AdamW moments of 1/N of the parameters (ZeRO stage 1); the same
    /// weights.
    #[arg(long)]
    pub shard_optimizer: bool,
    /// Data-parallel runs: a collective that waits longer than this many
    /// seconds for the other ranks (one died or stalled) ends the job; it must
    /// exceed the time rank 0 takes to save a checkpoint.
    #[arg(long, default_value_t = 600.0)]
    pub comm_timeout: f64,
    /// Data-parallel runs: all-reduce the gradients after backward instead
    /// of beside it (faster where the ranks share a machine's cores, whose
    /// time the all-reduce would take from backward).
    #[arg(long)]
    pub no_comm_overlap: bool,
}

impl Default for DistArgs {
    fn default() -> Self {
        DistArgs {
            shard_optimizer: false,
            comm_timeout: 600.0,
            no_comm_overlap: false,
        }
    }
}

impl DistArgs {
    /// This process's communicator, with `--comm-timeout` checked.
    pub fn communicator(&self) -> Result<Box<dyn Communicator>> {
        if !(self.comm_timeout.is_finite() && self.comm_timeout > 0.0) {
            bail!("--comm-timeout {}: expected seconds > 0", self.comm_timeout);
        }
        communicator(
            Duration::from_secs_f64(self.comm_timeout),
            !self.no_comm_overlap,
        )
    }
}

/// This process's communicator. `timeout`: a collective that waits longer
/// ends the job; `overlap`: the gradient all-reduce runs beside backward
/// (MPI only).
pub fn communicator(timeout: Duration, overlap: bool) -> Result<Box<dyn Communicator>> {
    let world = launcher_world_size().unwrap_or(1);
    if world <= 1 {
        return Ok(Box::new(SingleProcess));
    }
    mpi_communicator(world, timeout, overlap)
}

#[cfg(feature = "mpi")]
fn mpi_communicator(
    world: usize,
    timeout: Duration,
    overlap: bool,
) -> Result<Box<dyn Communicator>> {
    let comm = lmkit::util::comm::mpi::MpiComm::init(timeout, overlap)
        .map_err(|e| anyhow::anyhow!("starting MPI: {e}"))?;
    if comm.world_size() != world {
        bail!(
            "the launcher says {world} processes, MPI_COMM_WORLD has {}: \
             is this lmkit built against the MPI that launched it?",
            comm.world_size()
        );
    }
    Ok(Box::new(comm))
}

#[cfg(not(feature = "mpi"))]
fn mpi_communicator(
    world: usize,
    _timeout: Duration,
    _overlap: bool,
) -> Result<Box<dyn Communicator>> {
    // Each process would otherwise train alone and all write the same files.
    bail!(
        "started by an MPI launcher with {world} processes, but this lmkit was built \
         without MPI: build it with `cargo build --release -p lmkit-cli --features mpi`"
    )
}

/// On a job of several ranks, an error on one ends them all (the others
/// would wait for it in their next collective): print it naming the rank,
/// then abort. One process: the error is returned as it is.
pub fn or_abort<T>(comm: &dyn Communicator, r: Result<T>) -> Result<T> {
    match r {
        Err(e) if comm.world_size() > 1 => {
            eprintln!(
                "error: rank {} of {}: {e:#}",
                comm.rank(),
                comm.world_size()
            );
            comm.abort(1)
        }
        r => r,
    }
}

/// An error when started by an MPI launcher with several processes: the
/// commands other than `pretrain` and `finetune` run as one process.
pub fn single_process_only() -> Result<()> {
    match launcher_world_size() {
        Some(n) if n > 1 => bail!(
            "started by an MPI launcher with {n} processes: only `pretrain` and \
             `finetune` train data-parallel; run this command as one process"
        ),
        _ => Ok(()),
    }
}
