//! The daemon's own request loop at a low SCHED_FIFO priority on the NRT
//! CPUs (DROPS §4.1: the resource manager answers requests; McKenney §3:
//! ordinary load must not delay what real time needs). At SCHED_OTHER the
//! loop shares the NRT CPUs with the load it governs, and an answer waits
//! for the scheduler's slices (3.6 ms median beside one spinning client on
//! this VM); at SCHED_FIFO 1 it preempts ordinary work at once and stays
//! below every RT grant and the kernel's own RT threads.

use crate::host::Host;
use rtmgr_core::CpuSet;
use rtmgr_sys::sched::{SchedAttr, SCHED_FIFO, SCHED_FLAG_RESET_ON_FORK, SCHED_OTHER};

/// `[serve] loop_priority` by default.
pub const DEFAULT: u32 = 1;

/// The calling thread (the request loop) at SCHED_FIFO `priority`, pinned
/// to `nrt` (so that it never lands on an RT CPU, whatever the cgroup
/// layout); 0 leaves it as it is. What was done, for the log; a refusal
/// (no CAP_SYS_NICE in a container) is said, not fatal: the loop then runs
/// at SCHED_OTHER as before.
pub fn raise(host: &Host, priority: u32, nrt: &CpuSet) -> String {
    if priority == 0 {
        return "request loop at SCHED_OTHER ([serve] loop_priority = 0)".into();
    }
    let tid = rtmgr_sys::sched::gettid();
    if let Err(e) = host.set_affinity(tid, nrt) {
        return format!("request loop left at SCHED_OTHER: pinning it to the NRT CPUs {nrt}: {e}");
    }
    match fifo(host, priority) {
        Ok(()) => format!("request loop at SCHED_FIFO {priority} on the NRT CPUs {nrt}"),
        Err(e) => format!("request loop left at SCHED_OTHER: SCHED_FIFO {priority}: {e}"),
    }
}

/// Is the calling thread at SCHED_FIFO (`raise` worked)?
pub fn is_fifo(host: &Host) -> bool {
    host.get_attr(rtmgr_sys::sched::gettid())
        .is_ok_and(|a| a.policy == SCHED_FIFO)
}

fn fifo(host: &Host, priority: u32) -> Result<(), crate::host::HostError> {
    let attr = SchedAttr {
        policy: SCHED_FIFO,
        flags: SCHED_FLAG_RESET_ON_FORK,
        priority,
        ..SchedAttr::default()
    };
    host.set_attr(rtmgr_sys::sched::gettid(), &attr)
}

/// The calling thread back at SCHED_FIFO `priority` after `lower`
/// (`loop_share.rs`); a refusal is logged, the loop goes on.
pub fn set_fifo(host: &Host, priority: u32) {
    if let Err(e) = fifo(host, priority) {
        tracing::warn!("request loop left at SCHED_OTHER: SCHED_FIFO {priority}: {e}");
    }
}

/// Back to SCHED_OTHER before the stop's long steps (waiting out deadline
/// periods, resetting the partition), and past its share of the CPU
/// (`loop_share.rs`).
pub fn lower(host: &Host) {
    let tid = rtmgr_sys::sched::gettid();
    let attr = SchedAttr {
        policy: SCHED_OTHER,
        ..SchedAttr::default()
    };
    let _ = host.set_attr(tid, &attr);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_changes_nothing_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        let said = raise(&host, 0, &CpuSet::single(0));
        assert!(said.contains("SCHED_OTHER"), "{said}");
    }

    #[test]
    fn the_config_refuses_a_priority_above_98() {
        let e =
            crate::daemon::ServeConfig::from_toml("rt_cpus = \"1\"\n[serve]\nloop_priority = 99\n")
                .unwrap_err();
        assert!(e.contains("loop_priority 99"), "{e}");
        let ok = crate::daemon::ServeConfig::from_toml("rt_cpus = \"1\"\n").unwrap();
        assert_eq!(ok.serve.loop_priority, DEFAULT);
    }
}
