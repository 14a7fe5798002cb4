//! Scheduling system calls: CPU affinity, SCHED_FIFO/RR/OTHER/IDLE and
//! SCHED_DEADLINE through sched_setattr, mlockall (ARTiS §2.4: RT tasks are
//! SCHED_FIFO tasks bound with sched_setaffinity; McKenney §2.1: mlockall).

use rtmgr_core::CpuSet;
use std::io;

/// Largest CPU number the affinity calls handle (libc's cpu_set_t size).
const CPU_SETSIZE: u32 = libc::CPU_SETSIZE as u32;

pub fn get_affinity(tid: u32) -> io::Result<CpuSet> {
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: we pass the size of `set` and a valid pointer to it.
    let rc = unsafe {
        libc::sched_getaffinity(
            tid as libc::pid_t,
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut set,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET reads within the set for cpu < CPU_SETSIZE.
    Ok((0..CPU_SETSIZE)
        .filter(|&c| unsafe { libc::CPU_ISSET(c as usize, &set) })
        .collect())
}

pub fn set_affinity(tid: u32, cpus: &CpuSet) -> io::Result<()> {
    // SAFETY: zeroed cpu_set_t is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for c in cpus.iter() {
        if c >= CPU_SETSIZE {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: c < CPU_SETSIZE, within the set.
        unsafe { libc::CPU_SET(c as usize, &mut set) };
    }
    // SAFETY: valid pointer and size.
    let rc = unsafe {
        libc::sched_setaffinity(
            tid as libc::pid_t,
            std::mem::size_of::<libc::cpu_set_t>(),
            &set,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A scheduling policy with its parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "policy", rename_all = "lowercase")]
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
        runtime: u64,
        deadline: u64,
        period: u64,
    },
}

#[repr(C)]
#[derive(Default)]
struct SchedAttr {
    size: u32,
    sched_policy: u32,
    sched_flags: u64,
    sched_nice: i32,
    sched_priority: u32,
    sched_runtime: u64,
    sched_deadline: u64,
    sched_period: u64,
}

pub const SCHED_DEADLINE: u32 = 6;
/// Reset-on-fork: children of an RT task start as SCHED_OTHER.
pub const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;

fn to_attr(p: Policy) -> SchedAttr {
    let mut a = SchedAttr {
        size: std::mem::size_of::<SchedAttr>() as u32,
        ..Default::default()
    };
    match p {
        Policy::Other { nice } => {
            a.sched_policy = libc::SCHED_OTHER as u32;
            a.sched_nice = nice;
        }
        Policy::Batch { nice } => {
            a.sched_policy = libc::SCHED_BATCH as u32;
            a.sched_nice = nice;
        }
        Policy::Idle => a.sched_policy = libc::SCHED_IDLE as u32,
        Policy::Fifo { priority } => {
            a.sched_policy = libc::SCHED_FIFO as u32;
            a.sched_priority = priority as u32;
        }
        Policy::Rr { priority } => {
            a.sched_policy = libc::SCHED_RR as u32;
            a.sched_priority = priority as u32;
        }
        Policy::Deadline {
            runtime,
            deadline,
            period,
        } => {
            a.sched_policy = SCHED_DEADLINE;
            a.sched_runtime = runtime;
            a.sched_deadline = deadline;
            a.sched_period = period;
        }
    }
    a
}

fn from_attr(a: &SchedAttr) -> Policy {
    match a.sched_policy as i32 {
        libc::SCHED_FIFO => Policy::Fifo {
            priority: a.sched_priority as u8,
        },
        libc::SCHED_RR => Policy::Rr {
            priority: a.sched_priority as u8,
        },
        libc::SCHED_BATCH => Policy::Batch { nice: a.sched_nice },
        libc::SCHED_IDLE => Policy::Idle,
        p if p as u32 == SCHED_DEADLINE => Policy::Deadline {
            runtime: a.sched_runtime,
            deadline: a.sched_deadline,
            period: a.sched_period,
        },
        _ => Policy::Other { nice: a.sched_nice },
    }
}

/// Set the policy of one thread (tid 0 = the caller) with sched_setattr.
pub fn set_policy(tid: u32, policy: Policy) -> io::Result<()> {
    let attr = to_attr(policy);
    // SAFETY: sched_setattr reads `attr.size` bytes from a valid, initialised struct.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_setattr,
            tid as libc::pid_t,
            &attr as *const SchedAttr,
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Read the policy of one thread.
pub fn get_policy(tid: u32) -> io::Result<Policy> {
    let mut attr = SchedAttr::default();
    let size = std::mem::size_of::<SchedAttr>() as u32;
    // SAFETY: the kernel writes at most `size` bytes into `attr`.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_sched_getattr,
            tid as libc::pid_t,
            &mut attr as *mut SchedAttr,
            size,
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(from_attr(&attr))
}

/// Is this process running with root's effective user id?
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail and takes no arguments.
    unsafe { libc::geteuid() == 0 }
}

/// Lock all current and future memory of the calling process.
pub fn mlockall() -> io::Result<()> {
    // SAFETY: no pointers involved.
    let rc = unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
        let tid = unsafe { libc::gettid() } as u32;
        let orig = get_affinity(tid).unwrap();
        assert!(!orig.is_empty());
        let one = CpuSet::single(orig.first().unwrap());
        set_affinity(tid, &one).unwrap();
        assert_eq!(get_affinity(tid).unwrap(), one);
        set_affinity(tid, &orig).unwrap();
        assert_eq!(get_affinity(tid).unwrap(), orig);
    }

    #[test]
    fn policy_reads_back_on_a_thread() {
        std::thread::spawn(|| {
            let before = get_policy(0).unwrap();
            set_policy(0, Policy::Batch { nice: 5 }).unwrap();
            assert_eq!(get_policy(0).unwrap(), Policy::Batch { nice: 5 });
            // Raising back to nice 0 needs CAP_SYS_NICE; only check the read when allowed.
            let _ = set_policy(0, before);
        })
        .join()
        .unwrap();
    }
}
