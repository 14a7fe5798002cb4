//! rtmgr-sys: the one thin syscall layer under `rtmgr-linux` and `rtmgr-rt`
//! (docs/architecture.md "syscall layer"): safe functions over the calls the seeds rely on
//! (McKenney §2.1: CLOCK_MONOTONIC, absolute sleeps, SCHED_FIFO, mlockall;
//! ARTiS §2.4: affinity and policies; budget-based RTAI §3.3: the thread CPU
//! clock and SCHED_DEADLINE).
//!
//! Most calls go through `rustix` (direct system calls: no errno, no locks,
//! so they are also safe in a signal handler and between fork and exec); the
//! few it lacks (`sched_setattr`, `wait4`'s resource usage, `sysconf`, …) are
//! wrapped here with `libc`. All `unsafe` of rtmgr outside rtmgr-rt's signal,
//! timer, lock-free FIFO and C ABI code lives in this crate.
//!
//! Conventions: times are [`Nanos`] (u64 ns: instants on CLOCK_MONOTONIC or a
//! CPU clock, and durations); thread ids are [`Tid`] (u32; 0 = the caller).

pub mod child;
#[cfg(feature = "count-alloc")]
pub mod count_alloc;
pub mod errno;
pub mod fd;
pub mod filelock;
pub mod futex;
pub mod interest;
pub mod ioprio;
pub mod lock;
pub mod mem;
pub mod ns;
pub mod pidfd;
pub mod process;
pub mod sched;
pub mod time;

/// Nanoseconds: an instant on CLOCK_MONOTONIC or a CPU-time clock, or a duration.
pub type Nanos = u64;

/// A kernel thread id (as from `gettid`); 0 means the calling thread.
pub type Tid = u32;

/// A rustix error as a std one (same errno, same message).
pub(crate) fn io_err(e: rustix::io::Errno) -> std::io::Error {
    std::io::Error::from_raw_os_error(e.raw_os_error())
}
