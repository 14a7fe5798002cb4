//! The grant worker: a journalled grant's kernel steps (cpuset attach,
//! migration, policy), a revocation's placement steps, run on their own
//! thread, off the request loop, so that other clients' answers do not wait
//! for them (DROPS §4.1: the resource manager answers requests; issue 27: a
//! cgroup v1 attach can wait a grace period or a preempted vCPU,
//! milliseconds), and a root domain's rebuild (`dl_leak.rs`). Jobs run one
//! at a time, in order: the kernel serialises attaches under `cgroup_mutex`
//! anyway.

use super::grant;
use super::grants_journal::Grant;
use crate::cgroup::Layout;
use crate::host::{Host, HostError};
use rtmgr_core::CpuSet;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::mpsc;
use std::thread::JoinHandle;

/// A journalled grant to put into effect: everything `grant::apply` needs,
/// owned, so that it can cross to the worker.
pub struct ApplyWork {
    pub host: Host,
    pub layout: Layout,
    pub grant: Grant,
    /// The first grant of its process: it sets the process's limits.
    pub first_of_pid: bool,
    /// The kernel's deadline books on the CPU may differ from admission's
    /// (`grant::Cx::busy_pending`).
    pub busy_pending: bool,
    /// Threads held from SCHED_DEADLINE (`grant::Cx::held`).
    pub held: Vec<u32>,
    /// Threads whose cgroup the snapshot read (`grant::Cx::fresh`).
    pub fresh: Vec<u32>,
}

impl ApplyWork {
    /// Quick enough to apply on the request loop (`grant::quick`).
    pub fn quick(&self) -> bool {
        let mut cx = grant::Cx::new(&self.host, &self.layout, self.first_of_pid);
        cx.fresh = self.fresh.clone();
        grant::quick(&cx, &self.grant)
    }

    /// Apply the grant. EBUSY on the way (the early SCHED_DEADLINE's cpuset
    /// move, or the policy on the RT CPU: the kernel's books differ from
    /// admission's) is undone already; once more without the early step,
    /// EBUSY then pending too (`pending.rs`). No wait.
    pub fn run(&self) -> Result<(), HostError> {
        let mut cx = grant::Cx::new(&self.host, &self.layout, self.first_of_pid);
        cx.busy_pending = self.busy_pending;
        cx.held = self.held.clone();
        cx.fresh = self.fresh.clone();
        let g = &self.grant;
        let applied = grant::apply(&cx, g);
        let ebusy = applied
            .as_ref()
            .is_err_and(|e| e.errno() == Some(libc::EBUSY));
        if g.demand.is_hard() && !cx.busy_pending && ebusy {
            tracing::info!(
                "reservation {}: the kernel refused SCHED_DEADLINE on the way (EBUSY); its threads wait at SCHED_FIFO 1 where refused",
                g.id
            );
            cx.busy_pending = true;
            return grant::apply(&cx, g);
        }
        applied
    }
}

/// A revoked grant's placement to give back (cpuset, affinity, limits,
/// IRQ, I/O, cache: `grant::revoke_placement`), its policy back already.
pub struct UndoWork {
    pub host: Host,
    pub layout: Layout,
    pub grant: Grant,
    /// The last grant of its process: it restores the process's limits.
    pub last_of_pid: bool,
}

impl UndoWork {
    /// What could not be given back.
    pub fn run(&self) -> Vec<String> {
        let cx = grant::Cx::new(&self.host, &self.layout, self.last_of_pid);
        grant::revoke_placement(&cx, &self.grant)
    }
}

/// What the worker does.
pub enum Job {
    Apply(ApplyWork),
    Undo(UndoWork),
    /// Rebuild the root domain of this RT CPU's cpuset (`dl_leak.rs`).
    Rebuild {
        host: Host,
        dir: PathBuf,
    },
}

/// A job's outcome, in the order the jobs were sent.
#[derive(Debug)]
pub enum Outcome {
    Applied(Result<(), HostError>),
    Undone(Vec<String>),
    /// And how long it took, ns.
    Rebuilt(Result<(), HostError>, u64),
}

impl Job {
    /// Do it (on the worker, or wherever the worker is gone).
    pub fn run(&self) -> Outcome {
        match self {
            Job::Apply(w) => Outcome::Applied(w.run()),
            Job::Undo(w) => Outcome::Undone(w.run()),
            Job::Rebuild { host, dir } => {
                let (done, took) = Job::rebuild(host, dir);
                Outcome::Rebuilt(done, took)
            }
        }
    }

    /// Rebuild a root domain: what came of it, and how long it took (ns).
    pub fn rebuild(host: &Host, dir: &std::path::Path) -> (Result<(), HostError>, u64) {
        let t0 = rtmgr_sys::time::mono_ns();
        let done = super::domains::rebuild(host, dir);
        (done, rtmgr_sys::time::mono_ns() - t0)
    }
}

/// The worker thread, its job queue, and the socket that wakes the loop's
/// poll when a job is done.
pub struct GrantWorker {
    jobs: Option<mpsc::Sender<Box<Job>>>,
    done: mpsc::Receiver<Outcome>,
    wake: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl GrantWorker {
    /// Start the worker at the request loop's priority (`loop_priority.rs`:
    /// SCHED_FIFO `priority` on the NRT CPUs; 0 = SCHED_OTHER), so that
    /// ordinary load does not delay a grant either. It waits `wake_delay`
    /// (zero but in tests) between handing a job's outcome over and waking
    /// the loop: the loop may take the outcome before the wake-up comes, as
    /// from another CPU it can.
    pub(in crate::daemon) fn spawn_waking_after(
        host: &Host,
        priority: u32,
        nrt: &CpuSet,
        wake_delay: std::time::Duration,
    ) -> std::io::Result<Self> {
        let (wake, mut wake_tx) = UnixStream::pair()?;
        wake.set_nonblocking(true)?;
        wake_tx.set_nonblocking(true)?;
        let (jobs, job_rx) = mpsc::channel::<Box<Job>>();
        let (done_tx, done) = mpsc::channel();
        let (host, nrt) = (host.clone(), nrt.clone());
        let thread = std::thread::Builder::new()
            .name("rtmgr-grant".into())
            .spawn(move || {
                let raised = super::loop_priority::raise(&host, priority, &nrt);
                tracing::debug!("grant worker: {raised}");
                for work in job_rx {
                    if done_tx.send(work.run()).is_err() {
                        return;
                    }
                    if !wake_delay.is_zero() {
                        std::thread::sleep(wake_delay);
                    }
                    // A full socket means the loop is awake already.
                    let _ = wake_tx.write(&[1]);
                }
            })?;
        Ok(GrantWorker {
            jobs: Some(jobs),
            done,
            wake,
            thread: Some(thread),
        })
    }

    /// Readable when a job is done.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.wake.as_fd()
    }

    /// Queue a job; given back when the worker is gone.
    pub fn send(&self, work: Box<Job>) -> Result<(), Box<Job>> {
        match &self.jobs {
            Some(tx) => tx.send(work).map_err(|e| e.0),
            None => Err(work),
        }
    }

    /// Empty the wake-up socket. The loop must do it whenever its poll
    /// found the socket readable, whatever it still waits for: the worker
    /// writes its byte after handing the outcome over, so a loop that took
    /// the outcome first (`take`, or from another CPU) finds the byte
    /// later, and a byte left there makes every poll return at once (the
    /// loop spun at SCHED_FIFO, and the worker beside it on the same CPU
    /// never ran). Only then: a read that finds nothing is a system call
    /// for nothing (it was seven per grant round trip). One read takes
    /// every byte there (a stream socket); a full buffer reads again.
    pub fn drain_wake(&self) {
        let mut sink = [0u8; 64];
        while matches!((&self.wake).read(&mut sink), Ok(n) if n == sink.len()) {}
    }

    /// The oldest finished job's outcome, if one is there (without waiting).
    pub fn try_take(&self) -> Option<Outcome> {
        self.done.try_recv().ok()
    }

    /// Wait for the oldest job's outcome; None when the worker died. Its
    /// wake-up byte is left for the loop's poll to find (`drain_wake`).
    pub fn take(&self) -> Option<Outcome> {
        self.done.recv().ok()
    }
}

impl Drop for GrantWorker {
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[cfg(test)]
#[path = "grant_worker_tests.rs"]
mod tests;
