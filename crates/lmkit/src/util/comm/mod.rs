//! Collective communication between the processes (ranks) of one training
//! job: the [`Communicator`] trait data-parallel training runs on, with
//! three implementations —
//!
//! - [`SingleProcess`]: one rank, every collective a no-op (the default);
//! - [`ThreadGroup`]: N ranks as threads of one process (tests, and a
//!   check of the data-parallel arithmetic without MPI);
//! - `mpi::MpiComm` (cargo feature `mpi`): the system MPI through the `mpi`
//!   crate, for `mpirun` / `srun` jobs on one machine or many.
//!
//! A GPU backend (NCCL) implements the same trait. Every collective is
//! blocking and must be called by every rank in the same order with the
//! same lengths (as in MPI); lengths are the caller's invariants, checked
//! with assertions. Results are identical on every rank (each element is
//! summed in one order, then shared), so ranks that apply the same update
//! to the same weights stay bit-identical.

#[cfg(feature = "mpi")]
pub mod mpi;

use std::sync::{Arc, Barrier, Mutex};

/// The collectives data-parallel training needs. `Sync`: a step's
/// gradient all-reduce runs on a second thread while backward still runs
/// (the two threads never call collectives at once).
pub trait Communicator: Sync {
    /// This process's index, `0..world_size()`.
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
    /// `buf` ← the element-wise sum of every rank's `buf`.
    fn all_reduce_sum(&self, buf: &mut [f32]);
    /// As [`Communicator::all_reduce_sum`], in f64 (losses, counts, flags).
    fn all_reduce_sum_f64(&self, buf: &mut [f64]);
    /// `send`: `[world_size · n]` on every rank; `recv`: `[n]` ← block `rank`
    /// of the element-wise sum of every rank's `send`.
    fn reduce_scatter_sum(&self, send: &[f32], recv: &mut [f32]);
    /// `send`: `[n]`; `recv`: `[world_size · n]` ← every rank's `send`, in rank order.
    fn all_gather(&self, send: &[f32], recv: &mut [f32]);
    /// `buf` ← `root`'s `buf` (same length on every rank).
    fn broadcast(&self, buf: &mut [u8], root: usize);
    fn barrier(&self);
    /// The optimizer step under way, named by a watchdog when a collective
    /// stalls (implementations without one ignore it).
    fn set_step(&self, _step: u64) {}
    /// Turns the stall watchdog off (`false`) while ranks wait on purpose
    /// for rank 0 (preparing data), and back on.
    fn set_watch(&self, _on: bool) {}
    /// Whether a training step all-reduces its gradients beside backward,
    /// on a thread of its own (the default), rather than after it. Off
    /// pays where the transport's work takes the cores backward needs
    /// (ranks sharing a machine's cores, over TCP or shared memory).
    fn overlap_backward(&self) -> bool {
        true
    }

    /// Ends every rank of the job now, with exit status `code` (after an
    /// error on this rank, which the others would otherwise wait on).
    fn abort(&self, code: i32) -> !;

    /// Rank 0: the one that writes files and prints.
    fn is_root(&self) -> bool {
        self.rank() == 0
    }
    /// Whether any rank says `flag` (e.g. a stop request seen by one rank).
    fn any(&self, flag: bool) -> bool {
        let mut v = [f64::from(u8::from(flag))];
        self.all_reduce_sum_f64(&mut v);
        v[0] > 0.0
    }
}

/// One process, no peers: every collective leaves its data as it is.
#[derive(Debug, Clone, Copy, Default)]
pub struct SingleProcess;

impl Communicator for SingleProcess {
    fn rank(&self) -> usize {
        0
    }
    fn world_size(&self) -> usize {
        1
    }
    fn all_reduce_sum(&self, _buf: &mut [f32]) {}
    fn all_reduce_sum_f64(&self, _buf: &mut [f64]) {}
    fn reduce_scatter_sum(&self, send: &[f32], recv: &mut [f32]) {
        recv.copy_from_slice(send);
    }
    fn all_gather(&self, send: &[f32], recv: &mut [f32]) {
        recv.copy_from_slice(send);
    }
    fn broadcast(&self, _buf: &mut [u8], _root: usize) {}
    fn barrier(&self) {}
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

/// The number of processes of the MPI job this process belongs to, as its
/// launcher (`mpirun` of Open MPI or MPICH, Slurm's `srun` with PMI) says in
/// the environment; `None` when not started by one.
pub fn launcher_world_size() -> Option<usize> {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"]
        .iter()
        .find_map(|v| std::env::var(v).ok()?.trim().parse().ok())
}

/// Block `i` of `n` elements cut into `parts` contiguous blocks of
/// `n / parts`, the last one also taking the remainder: the shape
/// reduce-scatter and all-gather move (equal blocks) plus a short tail.
pub fn block_range(n: usize, parts: usize, i: usize) -> std::ops::Range<usize> {
    let parts = parts.max(1);
    let q = n / parts;
    let end = if i + 1 >= parts { n } else { (i + 1) * q };
    (i * q).min(end)..end
}

/// The state the ranks of a [`ThreadGroup`] share: one slot per rank, and a
/// barrier between writing the slots and reading them.
struct Shared {
    slots: Vec<Mutex<Vec<f64>>>,
    barrier: Barrier,
}

/// N ranks as threads of one process (`ThreadGroup::new(n)` gives one
/// communicator per thread). Collectives go through shared slots: every rank
/// writes its data, then each reads what it needs, summing in rank order —
/// the same sums on every rank, as MPI gives. For tests and small runs (the
/// slots hold f64, which every f32 and byte converts to exactly).
pub struct ThreadGroup {
    rank: usize,
    shared: Arc<Shared>,
}

impl ThreadGroup {
    pub fn new(n: usize) -> Vec<ThreadGroup> {
        let n = n.max(1);
        let shared = Arc::new(Shared {
            slots: (0..n).map(|_| Mutex::new(Vec::new())).collect(),
            barrier: Barrier::new(n),
        });
        (0..n)
            .map(|rank| ThreadGroup {
                rank,
                shared: shared.clone(),
            })
            .collect()
    }

    fn publish(&self, data: impl Iterator<Item = f64>) {
        let mut slot = self.shared.slots[self.rank].lock().expect("slot");
        slot.clear();
        slot.extend(data);
        drop(slot);
        self.shared.barrier.wait();
    }

    /// Reads every rank's slot (after [`Self::publish`]), then waits until
    /// every rank has read before a slot may be written again.
    fn read<R>(&self, f: impl FnOnce(&[std::sync::MutexGuard<'_, Vec<f64>>]) -> R) -> R {
        let guards: Vec<_> = self
            .shared
            .slots
            .iter()
            .map(|s| s.lock().expect("slot"))
            .collect();
        let r = f(&guards);
        drop(guards);
        self.shared.barrier.wait();
        r
    }

    /// Sums `range` of every slot into `out`, in rank order and in the
    /// element type's precision (an f32 sum rounds after every add, as an
    /// MPI reduction of floats does).
    fn sum_into<T: Copy + std::ops::Add<Output = T>>(
        &self,
        range: std::ops::Range<usize>,
        out: &mut [T],
        from: fn(f64) -> T,
    ) {
        self.read(|slots| {
            for (k, o) in range.zip(out.iter_mut()) {
                *o = slots[1..]
                    .iter()
                    .fold(from(slots[0][k]), |acc, s| acc + from(s[k]));
            }
        });
    }
}

impl Communicator for ThreadGroup {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.shared.slots.len()
    }
    fn all_reduce_sum(&self, buf: &mut [f32]) {
        self.publish(buf.iter().map(|&x| f64::from(x)));
        self.sum_into(0..buf.len(), buf, |x| x as f32);
    }
    fn all_reduce_sum_f64(&self, buf: &mut [f64]) {
        self.publish(buf.iter().copied());
        self.sum_into(0..buf.len(), buf, |x| x);
    }
    fn reduce_scatter_sum(&self, send: &[f32], recv: &mut [f32]) {
        let n = recv.len();
        assert_eq!(send.len(), n * self.world_size(), "reduce_scatter lengths");
        self.publish(send.iter().map(|&x| f64::from(x)));
        self.sum_into(self.rank * n..(self.rank + 1) * n, recv, |x| x as f32);
    }
    fn all_gather(&self, send: &[f32], recv: &mut [f32]) {
        let n = send.len();
        assert_eq!(recv.len(), n * self.world_size(), "all_gather lengths");
        self.publish(send.iter().map(|&x| f64::from(x)));
        self.read(|slots| {
            for (r, s) in slots.iter().enumerate() {
                for (o, &x) in recv[r * n..(r + 1) * n].iter_mut().zip(s.iter()) {
                    *o = x as f32;
                }
            }
        });
    }
    fn broadcast(&self, buf: &mut [u8], root: usize) {
        self.publish(buf.iter().map(|&b| f64::from(b)));
        self.read(|slots| {
            for (o, &x) in buf.iter_mut().zip(slots[root].iter()) {
                *o = x as u8;
            }
        });
    }
    fn barrier(&self) {
        self.shared.barrier.wait();
    }
    fn abort(&self, code: i32) -> ! {
        // Threads of one process: the test (or caller) sees the panic.
        panic!(
            "rank {} aborted the thread group (status {code})",
            self.rank
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_ranges_cover_in_order() {
        for n in [0, 1, 7, 10, 13] {
            for parts in 1..5 {
                let mut next = 0;
                for i in 0..parts {
                    let r = block_range(n, parts, i);
                    assert_eq!(r.start, next);
                    next = r.end;
                }
                assert_eq!(next, n);
            }
        }
    }

    #[test]
    fn thread_group_collectives() {
        let n = 3;
        let results: Vec<_> = std::thread::scope(|s| {
            let handles: Vec<_> = ThreadGroup::new(n)
                .into_iter()
                .map(|c| {
                    s.spawn(move || {
                        let r = c.rank() as f32;
                        let mut a = vec![r, 1.0, 0.1];
                        c.all_reduce_sum(&mut a);
                        let send: Vec<f32> = (0..2 * n).map(|k| k as f32 + r).collect();
                        let mut part = vec![0.0; 2];
                        c.reduce_scatter_sum(&send, &mut part);
                        let mut all = vec![0.0; 2 * n];
                        c.all_gather(&[r, -r], &mut all);
                        let mut b = [c.rank() as u8; 4];
                        c.broadcast(&mut b, 2);
                        let any = c.any(c.rank() == 1);
                        let none = c.any(false);
                        (a, part, all, b, any, none)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (rank, (a, part, all, b, any, none)) in results.into_iter().enumerate() {
            assert_eq!(a, vec![3.0, 3.0, 0.1f32 + 0.1 + 0.1]);
            let r = rank as f32;
            // Block `rank` of sum over ranks q of (k + q): 3k + 3.
            assert_eq!(
                part,
                vec![3.0 * (2.0 * r) + 3.0, 3.0 * (2.0 * r + 1.0) + 3.0]
            );
            assert_eq!(all, vec![0.0, 0.0, 1.0, -1.0, 2.0, -2.0]);
            assert_eq!(b, [2; 4]);
            assert!(any);
            assert!(!none);
        }
    }

    #[test]
    fn single_process_is_identity() {
        let c = SingleProcess;
        let mut a = [1.0f32, 2.0];
        c.all_reduce_sum(&mut a);
        assert_eq!(a, [1.0, 2.0]);
        let mut out = [0.0; 2];
        c.reduce_scatter_sum(&a, &mut out);
        assert_eq!(out, a);
        assert!(!c.any(false) && c.any(true));
    }
}
