//! The bottom layer: small pieces everything above shares, one of each.
//!
//! - [`rng`]: the one PRNG (xoshiro256**), serializable for exact resume.
//! - [`bf16`]: f32 ⇄ bf16 conversion (round to nearest even).
//! - [`parallel`]: [`parallel::SendPtr`] for disjoint writes from rayon tasks.
//! - [`fs`]: atomic file writes and `sync_dir` (an fsync error is an error).
//! - [`mod@slice`]: two disjoint mutable views of one buffer.
//! - [`comm`]: the [`comm::Communicator`] of data-parallel training (one
//!   process, threads, or MPI with the `mpi` feature).
//! - [`size`]: byte sizes as written on a command line (`4GiB`, `5GB`).
//! - [`alloc`]: malloc kept from returning memory between training steps.
//! - [`fpenv`]: denormal floats flushed to zero on the compute threads.
//! - [`profile`]: per-phase wall time of a training step (`--profile`).

pub mod alloc;
pub mod bf16;
pub mod comm;
pub mod fpenv;
pub mod fs;
pub mod parallel;
pub mod profile;
pub mod rng;
pub mod size;
pub mod slice;

pub use rng::Rng;
