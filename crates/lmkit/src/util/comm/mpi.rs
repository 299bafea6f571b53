//! [`Communicator`] over the system MPI (Open MPI, MPICH: whatever `mpicc`
//! names), through the `mpi` crate: one rank per process of an `mpirun` /
//! `srun` job, `MPI_COMM_WORLD`.
//!
//! A watchdog thread ends the whole job (`MPI_Abort`) when one collective
//! waits longer than the timeout — a peer that died without the launcher
//! noticing, or one that stalled — with a message naming this rank, the
//! collective and the optimizer step, instead of hanging forever. When
//! another rank dies, the launcher ends this one with SIGTERM: it says
//! which step it was at before it goes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mpi::collective::SystemOperation;
use mpi::environment::{Threading, Universe};
use mpi::topology::SimpleCommunicator;
use mpi::traits::{Communicator as _, CommunicatorCollectives as _, Root as _};

use super::Communicator;

/// Elements reduced per MPI call: bounds the send copy MPI needs (no
/// portable in-place constant in the bindings) to 16 MiB.
const CHUNK: usize = 1 << 22;

/// What the watchdog sees: the collective under way (since when) and the step.
struct WatchState {
    op: Option<(&'static str, Instant)>,
    step: u64,
    on: bool,
    done: bool,
}

/// `MPI_COMM_WORLD` of this job, with its watchdog.
pub struct MpiComm {
    world: SimpleCommunicator,
    rank: usize,
    size: usize,
    watch: Arc<Mutex<WatchState>>,
    /// Held through every MPI call: the send copy of `all_reduce_sum`, and
    /// the lock that keeps calls from two threads one after the other.
    serial: Mutex<Vec<f32>>,
    overlap: bool,
    // Last: MPI_Finalize (the universe's drop) after the communicator.
    _universe: Universe,
}

impl MpiComm {
    /// Initializes MPI (once per process). A collective that waits longer
    /// than `timeout` ends the job; `overlap`: see
    /// [`Communicator::overlap_backward`]. An error when MPI was already
    /// initialized or does not start.
    pub fn init(timeout: Duration, overlap: bool) -> Result<MpiComm, String> {
        let (universe, threading) = mpi::initialize_with_threading(Threading::Multiple)
            .ok_or("MPI is already initialized in this process")?;
        // Training all-reduces gradients from a second thread while backward
        // runs; `serial` keeps the calls one at a time, which SERIALIZED allows.
        if threading < Threading::Serialized {
            return Err(format!(
                "this MPI gives threading level {threading:?}; lmkit needs MPI_THREAD_SERIALIZED \
                 or MULTIPLE (an MPI built with thread support)"
            ));
        }
        let world = universe.world();
        let rank = usize::try_from(world.rank()).map_err(|_| "negative MPI rank")?;
        let size = usize::try_from(world.size()).map_err(|_| "negative MPI size")?;
        let watch = Arc::new(Mutex::new(WatchState {
            op: None,
            step: 0,
            on: true,
            done: false,
        }));
        let w = watch.clone();
        // MPI_Abort from this thread while the main one is inside MPI needs
        // MPI_THREAD_MULTIPLE; without it, exiting non-zero makes the
        // launcher end the job instead.
        let can_abort = threading == Threading::Multiple;
        on_sigterm::install(rank, size);
        std::thread::Builder::new()
            .name("lmkit-mpi-watchdog".into())
            .spawn(move || watchdog(&w, timeout, rank, size, can_abort))
            .map_err(|e| format!("starting the MPI watchdog thread: {e}"))?;
        Ok(MpiComm {
            world,
            rank,
            size,
            watch,
            serial: Mutex::new(Vec::new()),
            overlap,
            _universe: universe,
        })
    }

    /// Runs one collective under the watchdog, holding `serial` (given to
    /// `f` as the send scratch).
    fn watched<R>(&self, op: &'static str, f: impl FnOnce(&mut Vec<f32>) -> R) -> R {
        let mut scratch = self.serial.lock().unwrap_or_else(|e| e.into_inner());
        self.watch.lock().expect("watch").op = Some((op, Instant::now()));
        let r = f(&mut scratch);
        self.watch.lock().expect("watch").op = None;
        r
    }
}

fn watchdog(
    watch: &Mutex<WatchState>,
    timeout: Duration,
    rank: usize,
    size: usize,
    can_abort: bool,
) {
    let tick = (timeout / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    loop {
        std::thread::sleep(tick);
        let w = watch.lock().expect("watch");
        if w.done {
            return;
        }
        let Some((op, since)) = w.op.filter(|_| w.on) else {
            continue;
        };
        if since.elapsed() < timeout {
            continue;
        }
        eprintln!(
            "error: rank {rank} of {size}: {op} at step {} waited more than {} s for the other ranks \
             (one died or stalled); ending the job. Checkpoints saved so far are intact: resume from the last one",
            w.step,
            timeout.as_secs_f64()
        );
        if can_abort {
            // SAFETY: MPI is initialized with MPI_THREAD_MULTIPLE, so any
            // thread may call MPI_Abort; it ends every rank and does not return.
            unsafe {
                mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, 3);
            }
        }
        std::process::exit(3);
    }
}

// SAFETY: `SimpleCommunicator` is a handle to MPI_COMM_WORLD, which MPI
// lets any thread use at the threading level `init` checked (SERIALIZED or
// MULTIPLE) as long as calls do not overlap; every MPI call through an
// `MpiComm` holds `serial`, so calls from several threads run one at a time.
// (`abort` and the watchdog's MPI_Abort need no lock: MPI allows them from
// any thread under MULTIPLE, and the watchdog only calls it then.)
unsafe impl Sync for MpiComm {}

impl Drop for MpiComm {
    fn drop(&mut self) {
        if let Ok(mut w) = self.watch.lock() {
            w.done = true;
            w.op = None;
        }
    }
}

/// MPI counts are `int`.
fn count(n: usize) -> usize {
    assert!(
        i32::try_from(n).is_ok(),
        "MPI collective of {n} elements (> 2^31)"
    );
    n
}

impl Communicator for MpiComm {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.size
    }
    fn all_reduce_sum(&self, buf: &mut [f32]) {
        for chunk in buf.chunks_mut(CHUNK) {
            self.watched("all_reduce", |scratch| {
                scratch.clear();
                scratch.extend_from_slice(chunk);
                self.world
                    .all_reduce_into(&scratch[..], chunk, SystemOperation::sum())
            });
        }
    }
    fn all_reduce_sum_f64(&self, buf: &mut [f64]) {
        let send = buf.to_vec();
        count(buf.len());
        self.watched("all_reduce", |_| {
            self.world
                .all_reduce_into(&send[..], buf, SystemOperation::sum())
        });
    }
    fn reduce_scatter_sum(&self, send: &[f32], recv: &mut [f32]) {
        assert_eq!(send.len(), recv.len() * self.size, "reduce_scatter lengths");
        count(send.len());
        self.watched("reduce_scatter", |_| {
            self.world
                .reduce_scatter_block_into(send, recv, SystemOperation::sum())
        });
    }
    fn all_gather(&self, send: &[f32], recv: &mut [f32]) {
        assert_eq!(recv.len(), send.len() * self.size, "all_gather lengths");
        count(recv.len());
        self.watched("all_gather", |_| self.world.all_gather_into(send, recv));
    }
    fn broadcast(&self, buf: &mut [u8], root: usize) {
        count(buf.len());
        let root = i32::try_from(root).expect("rank fits an int");
        self.watched("broadcast", |_| {
            self.world.process_at_rank(root).broadcast_into(buf)
        });
    }
    fn barrier(&self) {
        self.watched("barrier", |_| self.world.barrier());
    }
    fn abort(&self, code: i32) -> ! {
        self.world.abort(code)
    }
    fn set_step(&self, step: u64) {
        self.watch.lock().expect("watch").step = step;
        STEP.store(step, Ordering::Relaxed);
    }
    fn set_watch(&self, on: bool) {
        self.watch.lock().expect("watch").on = on;
    }
    fn overlap_backward(&self) -> bool {
        self.overlap
    }
}

/// The step for the SIGTERM message (read in a signal handler: an atomic).
static STEP: AtomicU64 = AtomicU64::new(0);

/// SIGTERM — what `mpirun` / `srun` send the other ranks when one dies —
/// prints `rank R of N: ended by the launcher at step S` and exits 143.
#[cfg(unix)]
mod on_sigterm {
    use super::STEP;
    use std::sync::atomic::{AtomicU64, Ordering};

    static RANK: AtomicU64 = AtomicU64::new(0);
    static SIZE: AtomicU64 = AtomicU64::new(0);

    pub fn install(rank: usize, size: usize) {
        RANK.store(rank as u64, Ordering::Relaxed);
        SIZE.store(size as u64, Ordering::Relaxed);
        let handler: extern "C" fn(libc::c_int) = handle;
        // SAFETY: installs a handler that only reads atomics, formats on the
        // stack and calls write(2) and _exit(2), all async-signal-safe.
        unsafe {
            libc::signal(libc::SIGTERM, handler as libc::sighandler_t);
        }
    }

    /// Appends the decimal digits of `n` to `buf` at `*at` (no allocation).
    fn push_num(buf: &mut [u8], at: &mut usize, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut k = 0;
        loop {
            digits[k] = b'0' + (n % 10) as u8;
            k += 1;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        while k > 0 && *at < buf.len() {
            k -= 1;
            buf[*at] = digits[k];
            *at += 1;
        }
    }

    fn push(buf: &mut [u8], at: &mut usize, s: &[u8]) {
        for &b in s {
            if *at < buf.len() {
                buf[*at] = b;
                *at += 1;
            }
        }
    }

    extern "C" fn handle(_: libc::c_int) {
        let mut buf = [0u8; 256];
        let mut at = 0;
        push(&mut buf, &mut at, b"error: rank ");
        push_num(&mut buf, &mut at, RANK.load(Ordering::Relaxed));
        push(&mut buf, &mut at, b" of ");
        push_num(&mut buf, &mut at, SIZE.load(Ordering::Relaxed));
        push(&mut buf, &mut at, b": ended by the launcher at step ");
        push_num(&mut buf, &mut at, STEP.load(Ordering::Relaxed));
        push(
            &mut buf,
            &mut at,
            b" (another rank failed); the last checkpoint is intact\n",
        );
        // SAFETY: write(2) and _exit(2) are async-signal-safe; `buf` is ours.
        unsafe {
            libc::write(2, buf.as_ptr().cast(), at);
            libc::_exit(143);
        }
    }
}

#[cfg(not(unix))]
mod on_sigterm {
    pub fn install(_rank: usize, _size: usize) {}
}
