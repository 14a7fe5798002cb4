//! Threads and their scheduling: thread ids, CPU affinity, SCHED_OTHER/BATCH/
//! IDLE/FIFO/RR and SCHED_DEADLINE through `sched_setattr` (ARTiS §2.4: RT
//! tasks are SCHED_FIFO tasks bound with sched_setaffinity; budget-based RTAI
//! §3.3: hard budgets as SCHED_DEADLINE reservations).

use crate::{io_err, Nanos, Tid};
use rustix::process::Pid;
use rustix::thread::CpuSet;
use std::io;

pub const SCHED_OTHER: u32 = libc::SCHED_OTHER as u32;
pub const SCHED_FIFO: u32 = libc::SCHED_FIFO as u32;
pub const SCHED_RR: u32 = libc::SCHED_RR as u32;
pub const SCHED_BATCH: u32 = libc::SCHED_BATCH as u32;
pub const SCHED_IDLE: u32 = libc::SCHED_IDLE as u32;
pub const SCHED_DEADLINE: u32 = 6;
/// Reset-on-fork: children of an RT task start as SCHED_OTHER.
pub const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;
/// SCHED_DEADLINE: send SIGXCPU when the task overruns its runtime.
pub const SCHED_FLAG_DL_OVERRUN: u64 = 0x04;

/// The calling thread's id.
pub fn gettid() -> Tid {
    rustix::thread::gettid().as_raw_nonzero().get() as Tid
}

/// The target of a per-thread call: None = the caller; ids that no thread
/// can have are refused like the kernel refuses a negative pid.
fn target(tid: Tid) -> io::Result<Option<Pid>> {
    match i32::try_from(tid) {
        Ok(raw) => Ok(Pid::from_raw(raw)),
        Err(_) => Err(io::Error::from_raw_os_error(libc::EINVAL)),
    }
}

/// The CPU the calling thread runs on now (glibc's `sched_getcpu`: read from
/// rseq or the vDSO, no system call; 0 if it fails).
pub fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu takes no arguments.
    let c = unsafe { libc::sched_getcpu() };
    c.max(0) as u32
}

/// Give up the CPU (`sched_yield`).
pub fn yield_now() {
    rustix::thread::sched_yield();
}

/// Number of online CPUs (not this thread's affinity, which a partition may narrow).
pub fn online_cpus() -> u32 {
    // SAFETY: sysconf takes no pointers and has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as u32
}

/// A CPU number the affinity calls cannot express (≥ [`CpuMask::CAPACITY`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuOutOfRange(pub u32);

impl std::fmt::Display for CpuOutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CPU {} out of range", self.0)
    }
}

impl From<CpuOutOfRange> for io::Error {
    fn from(_: CpuOutOfRange) -> Self {
        io::Error::from_raw_os_error(libc::EINVAL)
    }
}

/// A fixed-size CPU mask as the kernel takes it (plain data: it can be built
/// before a fork and used after it without allocating).
#[derive(Clone, Copy)]
pub struct CpuMask(CpuSet);

impl CpuMask {
    /// CPUs 0..CAPACITY can be expressed (libc's `CPU_SETSIZE`).
    pub const CAPACITY: u32 = CpuSet::MAX_CPU as u32;

    pub fn empty() -> Self {
        CpuMask(CpuSet::new())
    }

    /// The mask of `cpus`; the first CPU out of range is an error.
    pub fn from_cpus(cpus: impl IntoIterator<Item = u32>) -> Result<Self, CpuOutOfRange> {
        let mut set = CpuSet::new();
        for c in cpus {
            if c >= Self::CAPACITY {
                return Err(CpuOutOfRange(c));
            }
            set.set(c as usize);
        }
        Ok(CpuMask(set))
    }

    pub fn contains(&self, cpu: u32) -> bool {
        cpu < Self::CAPACITY && self.0.is_set(cpu as usize)
    }

    /// The CPUs in the mask, ascending.
    pub fn cpus(&self) -> impl Iterator<Item = u32> + '_ {
        (0..Self::CAPACITY).filter(|&c| self.0.is_set(c as usize))
    }

    pub fn count(&self) -> u32 {
        self.0.count()
    }
}

impl std::fmt::Debug for CpuMask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_set().entries(self.cpus()).finish()
    }
}

impl PartialEq for CpuMask {
    fn eq(&self, other: &Self) -> bool {
        self.cpus().eq(other.cpus())
    }
}

impl Eq for CpuMask {}

/// The CPUs thread `tid` may run on. Async-signal-safe.
pub fn get_affinity(tid: Tid) -> io::Result<CpuMask> {
    rustix::thread::sched_getaffinity(target(tid)?)
        .map(CpuMask)
        .map_err(io_err)
}

/// Bind thread `tid` to `mask`. Async-signal-safe.
pub fn set_affinity(tid: Tid, mask: &CpuMask) -> io::Result<()> {
    rustix::thread::sched_setaffinity(target(tid)?, &mask.0).map_err(io_err)
}

/// Bind the calling thread to one CPU.
pub fn pin_to(cpu: u32) -> io::Result<()> {
    set_affinity(0, &CpuMask::from_cpus([cpu])?)
}

/// A scheduling policy with its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(tag = "policy", rename_all = "lowercase")
)]
pub enum Policy {
    Other {
        nice: i32,
    },
    Batch {
        nice: i32,
    },
    Idle,
    Fifo {
        priority: u8,
    },
    Rr {
        priority: u8,
    },
    /// Times in ns.
    Deadline {
        runtime: Nanos,
        deadline: Nanos,
        period: Nanos,
    },
}

/// The fields of the kernel's `struct sched_attr` (sched_setattr(2)). With
/// the `serde` feature it is also the form rtmgr-linux's journals keep a
/// thread's old attributes in: its field names are part of that format.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct SchedAttr {
    pub policy: u32,
    pub flags: u64,
    pub nice: i32,
    pub priority: u32,
    pub runtime: Nanos,
    pub deadline: Nanos,
    pub period: Nanos,
}

/// `struct sched_attr` as the kernel lays it out.
#[repr(C)]
#[derive(Default)]
struct RawSchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

const RAW_SIZE: u32 = std::mem::size_of::<RawSchedAttr>() as u32;

impl From<Policy> for SchedAttr {
    fn from(p: Policy) -> Self {
        let mut a = SchedAttr::default();
        match p {
            Policy::Other { nice } => {
                a.policy = SCHED_OTHER;
                a.nice = nice;
            }
            Policy::Batch { nice } => {
                a.policy = SCHED_BATCH;
                a.nice = nice;
            }
            Policy::Idle => a.policy = SCHED_IDLE,
            Policy::Fifo { priority } => {
                a.policy = SCHED_FIFO;
                a.priority = priority as u32;
            }
            Policy::Rr { priority } => {
                a.policy = SCHED_RR;
                a.priority = priority as u32;
            }
            Policy::Deadline {
                runtime,
                deadline,
                period,
            } => {
                a.policy = SCHED_DEADLINE;
                a.runtime = runtime;
                a.deadline = deadline;
                a.period = period;
            }
        }
        a
    }
}

impl From<&SchedAttr> for Policy {
    fn from(a: &SchedAttr) -> Self {
        match a.policy {
            SCHED_FIFO => Policy::Fifo {
                priority: a.priority as u8,
            },
            SCHED_RR => Policy::Rr {
                priority: a.priority as u8,
            },
            SCHED_BATCH => Policy::Batch { nice: a.nice },
            SCHED_IDLE => Policy::Idle,
            SCHED_DEADLINE => Policy::Deadline {
                runtime: a.runtime,
                deadline: a.deadline,
                period: a.period,
            },
            _ => Policy::Other { nice: a.nice },
        }
    }
}

/// `sched_setattr` for thread `tid`. Async-signal-safe.
pub fn set_attr(tid: Tid, a: &SchedAttr) -> io::Result<()> {
    let raw = RawSchedAttr {
        size: RAW_SIZE,
        sched_policy: a.policy,
        sched_flags: a.flags,
        sched_nice: a.nice,
        sched_priority: a.priority,
        sched_runtime: a.runtime,
        sched_deadline: a.deadline,
        sched_period: a.period,
    };
    // SAFETY: the kernel reads `raw.size` bytes from a valid, initialised struct.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            tid as libc::pid_t,
            &raw as *const RawSchedAttr,
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// `sched_getattr` for thread `tid`.
pub fn get_attr(tid: Tid) -> io::Result<SchedAttr> {
    let mut raw = RawSchedAttr::default();
    // SAFETY: the kernel writes at most RAW_SIZE bytes into `raw`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid as libc::pid_t,
            &mut raw as *mut RawSchedAttr,
            RAW_SIZE,
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(SchedAttr {
        policy: raw.sched_policy,
        flags: raw.sched_flags,
        nice: raw.sched_nice,
        priority: raw.sched_priority,
        runtime: raw.sched_runtime,
        deadline: raw.sched_deadline,
        period: raw.sched_period,
    })
}

/// Set the policy of one thread (tid 0 = the caller) with sched_setattr; the
/// nice value of SCHED_OTHER/BATCH is part of the policy.
pub fn set_policy(tid: Tid, policy: Policy) -> io::Result<()> {
    set_attr(tid, &policy.into())
}

/// Read the policy of one thread.
pub fn get_policy(tid: Tid) -> io::Result<Policy> {
    get_attr(tid).map(|a| Policy::from(&a))
}

/// `sched_setscheduler(tid, policy, priority)`: unlike [`set_policy`] it keeps
/// the nice value. Async-signal-safe.
pub fn set_scheduler(tid: Tid, policy: u32, priority: i32) -> io::Result<()> {
    let p = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: a valid sched_param; no memory is kept.
    if unsafe { libc::sched_setscheduler(tid as libc::pid_t, policy as i32, &p) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Highest SCHED_FIFO priority (1..=99).
pub fn max_fifo_priority() -> u8 {
    // SAFETY: no pointers.
    let p = unsafe { libc::sched_get_priority_max(libc::SCHED_FIFO) };
    p.clamp(1, 99) as u8
}

/// The calling thread's policy, priority, nice value and affinity, to restore later.
#[derive(Debug, Clone, Copy)]
pub struct SavedSched {
    policy: u32,
    priority: u32,
    nice: i32,
    affinity: CpuMask,
}

impl SavedSched {
    pub fn save() -> io::Result<SavedSched> {
        let a = get_attr(0)?;
        Ok(SavedSched {
            policy: a.policy,
            priority: a.priority,
            nice: a.nice,
            affinity: get_affinity(0)?,
        })
    }

    /// Back to the saved policy (without flags), nice value (best effort) and affinity.
    pub fn restore(&self) -> io::Result<()> {
        set_attr(
            0,
            &SchedAttr {
                policy: self.policy,
                priority: self.priority,
                ..SchedAttr::default()
            },
        )?;
        if self.policy == SCHED_OTHER || self.policy == SCHED_BATCH {
            let _ = rustix::process::setpriority_process(None, self.nice);
        }
        set_affinity(0, &self.affinity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affinity_round_trip_on_self() {
        let orig = get_affinity(gettid()).unwrap();
        assert!(orig.count() > 0);
        let first = orig.cpus().next().unwrap();
        pin_to(first).unwrap();
        assert_eq!(
            get_affinity(0).unwrap(),
            CpuMask::from_cpus([first]).unwrap()
        );
        assert!(current_cpu() == first);
        set_affinity(0, &orig).unwrap();
        assert_eq!(get_affinity(0).unwrap(), orig);
    }

    #[test]
    fn masks_refuse_cpus_out_of_range() {
        let m = CpuMask::from_cpus([0, 3]).unwrap();
        assert_eq!(m.cpus().collect::<Vec<_>>(), vec![0, 3]);
        assert!(m.contains(3) && !m.contains(1) && !m.contains(u32::MAX));
        let e = CpuMask::from_cpus([1, CpuMask::CAPACITY, 5000]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("CPU {} out of range", CpuMask::CAPACITY)
        );
        assert_eq!(io::Error::from(e).raw_os_error(), Some(libc::EINVAL));
        assert_eq!(
            set_affinity(u32::MAX, &m).unwrap_err().raw_os_error(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn policy_reads_back_and_saved_state_restores() {
        std::thread::spawn(|| {
            let saved = SavedSched::save().unwrap();
            let before = get_policy(0).unwrap();
            set_policy(0, Policy::Batch { nice: 5 }).unwrap();
            assert_eq!(get_policy(0).unwrap(), Policy::Batch { nice: 5 });
            // Raising back to nice 0 needs CAP_SYS_NICE; only check when allowed.
            if saved.restore().is_ok() && crate::process::is_root() {
                assert_eq!(get_policy(0).unwrap(), before);
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn policies_convert_both_ways() {
        for p in [
            Policy::Other { nice: -3 },
            Policy::Batch { nice: 7 },
            Policy::Idle,
            Policy::Fifo { priority: 99 },
            Policy::Rr { priority: 1 },
            Policy::Deadline {
                runtime: 1,
                deadline: 2,
                period: 3,
            },
        ] {
            assert_eq!(Policy::from(&SchedAttr::from(p)), p);
        }
        assert!(online_cpus() >= 1);
        assert!((1..=99).contains(&max_fifo_priority()));
        assert_ne!(gettid(), 0);
    }
}
