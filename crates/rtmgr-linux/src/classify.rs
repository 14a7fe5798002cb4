//! Putting a task in its ARTiS class on a (possibly) partitioned machine
//! (ARTiS §2.4: the helper program that sets a task's class; docs/architecture.md words
//! RT0/RT1+/Linux): find the RT0 tasks already bound to a CPU, and move a
//! running process — all its threads — into the cpuset, affinity and policy
//! of its class. Starting a new program in its class is `launch`.

use crate::partition::{self, Applied, PartitionError};
use crate::sched::Policy;
use crate::{tasks, Host, HostError};
use rtmgr_core::class::RT0_PRIORITY;
use rtmgr_core::CpuSet;

#[derive(Debug, thiserror::Error)]
pub enum ClassifyError {
    #[error("no process {0}")]
    NoProcess(u32),
    #[error("{0} is a kernel thread: rtmgr run --pid is for user processes")]
    KernelThread(u32),
    #[error(transparent)]
    Partition(#[from] PartitionError),
    #[error("{what} of thread {tid}: {source}")]
    Thread {
        what: &'static str,
        tid: u32,
        source: HostError,
    },
}

impl ClassifyError {
    /// The user named something that cannot be reclassified (nothing changed).
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            ClassifyError::NoProcess(_) | ClassifyError::KernelThread(_)
        )
    }
}

/// User tasks already running as RT0 on `cpu` (SCHED_FIFO 99 bound to it
/// alone), other than `except` and rtmgr itself.
pub fn rt0_tasks_on(host: &Host, cpu: u32, except: Option<u32>) -> Vec<u32> {
    let mut pids: Vec<u32> = tasks::all(host)
        .unwrap_or_default()
        .into_iter()
        .filter(|t| !t.kthread && t.is_fifo_or_rr() && t.rt_priority == RT0_PRIORITY as u32)
        .filter(|t| Some(t.pid) != except && t.pid != std::process::id())
        .filter(|t| {
            host.get_affinity(t.tid)
                .map(|a| a == CpuSet::single(cpu))
                .unwrap_or(false)
        })
        .map(|t| t.pid)
        .collect();
    pids.dedup();
    pids
}

/// Move a running process into its class: its partition set (journalled),
/// then every thread's affinity and policy. Returns the threads changed.
pub fn reclassify(
    host: &Host,
    applied: Option<&Applied>,
    pid: u32,
    cpus: &CpuSet,
    policy: Policy,
) -> Result<usize, ClassifyError> {
    if tasks::threads_of(host, pid).is_empty() {
        return Err(ClassifyError::NoProcess(pid));
    }
    if tasks::info(host, pid, pid)
        .map(|t| t.kthread)
        .unwrap_or(false)
    {
        return Err(ClassifyError::KernelThread(pid));
    }
    if let Some(ap) = applied {
        partition::place_process(host, ap, pid, cpus)?;
    }
    let mut done = 0;
    for tid in tasks::threads_of(host, pid) {
        let thread = |what, source| ClassifyError::Thread { what, tid, source };
        host.set_affinity(tid, cpus)
            .map_err(|e| thread("affinity", e))?;
        host.set_policy(tid, policy)
            .map_err(|e| thread("policy", e))?;
        done += 1;
    }
    Ok(done)
}
