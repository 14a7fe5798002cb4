//! The set-up every real-time thread of rtmgr shares (McKenney §2.1: pinned,
//! SCHED_FIFO at the top priority, stack touched): the balancer's latency
//! guard and the lab's probes and workers. Its error type is the one the
//! measurements report.

use crate::sched::{self, Policy};
use rtmgr_core::CpuSet;
use rtmgr_sys::sched::gettid;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("{0}")]
    Setup(String),
    /// The cause is part of the message (not a `source`), so that it survives
    /// `to_string()` and is not printed twice in error chains.
    #[error("{what}: {cause}")]
    Io { what: String, cause: std::io::Error },
    #[error("{0} not found in PATH: install it with `apt-get install -y {1}`")]
    MissingTool(&'static str, &'static str),
    #[error("{0}")]
    Load(String),
}

impl MeasureError {
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        MeasureError::Io {
            what: what.into(),
            cause: source,
        }
    }
}

pub type Result<T> = std::result::Result<T, MeasureError>;

/// Called in each probe thread with its tid before it pins itself, e.g. to move
/// it into the RT cpuset of a partition.
pub type Prepare = Arc<dyn Fn(u32) -> Result<()> + Send + Sync>;

/// Highest SCHED_FIFO priority.
pub use rtmgr_sys::sched::max_fifo_priority;

/// Pin and raise the calling thread (after `prepare`): the probe threads' setup,
/// shared with the other measurements.
pub fn setup_rt_thread(cpu: u32, policy: Policy, prepare: Option<&Prepare>) -> Result<()> {
    let tid = gettid();
    if let Some(p) = prepare {
        p(tid)?;
    }
    sched::set_affinity(0, &CpuSet::single(cpu)).map_err(|e| {
        let hint = if e.raw_os_error() == Some(libc::EINVAL) {
            " (the CPU is outside this thread's cpuset: is a partition applied that rtmgr \
             does not know about, e.g. with another --journal?)"
        } else {
            ""
        };
        MeasureError::io(format!("pin thread to CPU {cpu}{hint}"), e)
    })?;
    sched::set_policy(0, policy).map_err(|e| {
        let hint = match (policy, e.raw_os_error()) {
            (Policy::Deadline { .. }, Some(libc::EPERM) | Some(libc::EBUSY)) => {
                " (SCHED_DEADLINE refuses threads pinned to part of their root domain; \
                 use fifo/rr, or a partition whose RT cpuset is its own root domain)"
            }
            (Policy::Deadline { .. }, _) => "",
            _ => " (needs root or CAP_SYS_NICE)",
        };
        MeasureError::Setup(format!("set {policy:?} on CPU {cpu}: {e}{hint}"))
    })?;
    // Touch some stack now so the loop does not fault it in later.
    let buf = std::hint::black_box([0u8; 64 * 1024]);
    std::hint::black_box(&buf);
    Ok(())
}
