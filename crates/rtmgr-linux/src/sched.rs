//! Scheduling system calls in rtmgr's CPU-set type: CPU affinity,
//! SCHED_FIFO/RR/OTHER/IDLE and SCHED_DEADLINE through sched_setattr, mlockall
//! (ARTiS §2.4: RT tasks are SCHED_FIFO tasks bound with sched_setaffinity;
//! McKenney §2.1: mlockall). The calls themselves are `rtmgr_sys`'s.

use rtmgr_core::CpuSet;
use rtmgr_sys::sched::CpuMask;
use std::io;

pub use rtmgr_sys::mem::mlockall;
pub use rtmgr_sys::process::is_root;
pub use rtmgr_sys::sched::{
    get_policy, set_policy, Policy, SCHED_DEADLINE, SCHED_FLAG_RESET_ON_FORK,
};
pub use rtmgr_sys::Tid;

pub fn get_affinity(tid: Tid) -> io::Result<CpuSet> {
    Ok(rtmgr_sys::sched::get_affinity(tid)?.cpus().collect())
}

pub fn set_affinity(tid: Tid, cpus: &CpuSet) -> io::Result<()> {
    rtmgr_sys::sched::set_affinity(tid, &CpuMask::from_cpus(cpus.iter())?)
}

/// Can this process use SCHED_FIFO? Tries priority 1 on a short-lived thread
/// (the policy goes with the thread); the errno when refused.
pub fn fifo_available() -> Result<(), i32> {
    std::thread::spawn(|| {
        set_policy(0, Policy::Fifo { priority: 1 }).map_err(|e| e.raw_os_error().unwrap_or(0))
    })
    .join()
    .unwrap_or(Err(0))
}

/// Can this process use SCHED_DEADLINE? Tries it on a short-lived thread.
pub fn deadline_available() -> Result<(), String> {
    std::thread::spawn(|| {
        let p = Policy::Deadline {
            runtime: 100_000,
            deadline: 10_000_000,
            period: 10_000_000,
        };
        match set_policy(0, p) {
            Ok(()) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    })
    .join()
    .unwrap_or_else(|_| Err("probe thread panicked".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affinity_round_trip_on_self() {
        let tid = rtmgr_sys::sched::gettid();
        let orig = get_affinity(tid).unwrap();
        assert!(!orig.is_empty());
        let one = CpuSet::single(orig.first().unwrap());
        set_affinity(tid, &one).unwrap();
        assert_eq!(get_affinity(tid).unwrap(), one);
        set_affinity(tid, &orig).unwrap();
        assert_eq!(get_affinity(tid).unwrap(), orig);
        let e = set_affinity(tid, &CpuSet::single(CpuMask::CAPACITY)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    }
}
