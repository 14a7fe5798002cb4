//! Clocks and sleeps in [`Nanos`](crate::Nanos) (McKenney §2.1: CLOCK_MONOTONIC
//! and absolute sleeps, so no drift accumulates; budget-based RTAI §3.3: the
//! thread CPU clock). All readings are async-signal-safe (vDSO or a system call).

use crate::Nanos;
use rustix::io::Errno;
use rustix::thread::{clock_nanosleep_absolute, clock_nanosleep_relative};
use rustix::time::{clock_gettime, ClockId, Timespec};

const NS_PER_S: u64 = 1_000_000_000;

fn read(clock: ClockId) -> Nanos {
    let t = clock_gettime(clock);
    t.tv_sec as u64 * NS_PER_S + t.tv_nsec as u64
}

/// CLOCK_MONOTONIC in ns.
pub fn mono_ns() -> Nanos {
    read(ClockId::Monotonic)
}

/// Whole seconds since the Unix epoch (CLOCK_REALTIME; 0 before it): what
/// journals, reports and cached results are stamped with. rtmgr's one wall clock.
pub fn unix_now_s() -> u64 {
    clock_gettime(ClockId::Realtime).tv_sec.max(0) as u64
}

/// The calling thread's CPU time in ns (precise: read from the scheduler).
pub fn thread_cpu_ns() -> Nanos {
    read(ClockId::ThreadCPUTime)
}

/// The calling process's CPU time in ns (all threads).
pub fn process_cpu_ns() -> Nanos {
    read(ClockId::ProcessCPUTime)
}

fn timespec(ns: Nanos) -> Timespec {
    Timespec {
        tv_sec: (ns / NS_PER_S) as _,
        tv_nsec: (ns % NS_PER_S) as _,
    }
}

/// `ns` as a libc `timespec`, for the calls this crate does not wrap
/// (POSIX timers, `sigtimedwait`).
pub fn libc_timespec(ns: Nanos) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / NS_PER_S) as libc::time_t,
        tv_nsec: (ns % NS_PER_S) as libc::c_long,
    }
}

/// Sleep until CLOCK_MONOTONIC reaches `t_ns` (absolute: no drift from the
/// time spent computing the deadline; restarted after a signal).
/// Async-signal-safe.
pub fn sleep_until(t_ns: Nanos) {
    let t = timespec(t_ns);
    while clock_nanosleep_absolute(ClockId::Monotonic, &t) == Err(Errno::INTR) {}
}

/// Sleep `d_ns` on CLOCK_MONOTONIC (relative: the time to compute the next
/// sleep accumulates); a signal simply ends it early.
pub fn sleep_for(d_ns: Nanos) {
    let _ = clock_nanosleep_relative(ClockId::Monotonic, &timespec(d_ns));
}

/// `later − earlier` as a signed number of ns (negative when `later` is in
/// fact earlier, e.g. a wake-up before its intended release).
pub fn diff_ns(later: Nanos, earlier: Nanos) -> i64 {
    later.wrapping_sub(earlier) as i64
}

/// The kernel's clock tick rate (`USER_HZ`, the unit of /proc/stat times).
pub fn clock_ticks_per_second() -> u64 {
    rustix::param::clock_ticks_per_second()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_advance_and_sleeps_reach_their_deadline() {
        let (t0, c0) = (mono_ns(), thread_cpu_ns());
        sleep_until(t0 + 2_000_000);
        assert!(mono_ns() >= t0 + 2_000_000);
        let t1 = mono_ns();
        sleep_for(1_000_000);
        assert!(mono_ns() >= t1 + 1_000_000);
        while thread_cpu_ns() == c0 {
            std::hint::black_box(0u64);
        }
        assert!(process_cpu_ns() >= thread_cpu_ns() - c0);
    }

    #[test]
    fn the_wall_clock_is_the_system_time_in_whole_seconds() {
        let std_s =
            |t: std::time::SystemTime| t.duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        let before = std_s(std::time::SystemTime::now());
        let ours = unix_now_s();
        let after = std_s(std::time::SystemTime::now());
        assert!(
            (before..=after).contains(&ours),
            "{before} <= {ours} <= {after}"
        );
    }

    #[test]
    fn signed_differences() {
        assert_eq!(diff_ns(10, 3), 7);
        assert_eq!(diff_ns(3, 10), -7);
        let ts = libc_timespec(3_000_000_007);
        assert_eq!((ts.tv_sec, ts.tv_nsec), (3, 7));
        assert!(clock_ticks_per_second() > 0);
    }
}

/// Another thread's CPU time in ns (its CPU-time clock, CLOCK_THREAD_CPUTIME
/// of `tid`, which any process may read). Reading it makes the scheduler
/// charge a thread that is running now for the time since it last did
/// (`task_sched_runtime`): afterwards its SCHED_DEADLINE server's remaining
/// runtime, as /proc/<tid>/sched shows it, is current, not up to a tick old.
pub fn task_cpu_ns(tid: u32) -> std::io::Result<Nanos> {
    // The kernel's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED):
    // (~tid << 3) | CPUCLOCK_SCHED (2) | CPUCLOCK_PERTHREAD_MASK (4).
    let clock = (!(tid as libc::clockid_t) << 3) | 6;
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec for the call's duration;
    // clock_gettime writes only into it and returns -1 with errno set for a
    // clock that names no task (EINVAL).
    if unsafe { libc::clock_gettime(clock, &mut t) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(t.tv_sec as u64 * NS_PER_S + t.tv_nsec as u64)
}

#[cfg(test)]
mod task_clock_tests {
    use super::*;

    /// Another thread's CPU clock reads that thread's time (it grows while
    /// the thread spins, not while it sleeps); a tid that names no task is
    /// an error.
    #[test]
    fn another_thread_s_cpu_clock_is_its_own() {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (tx, rx) = std::sync::mpsc::channel();
        let spin = stop.clone();
        let t = std::thread::spawn(move || {
            tx.send(rustix::thread::gettid().as_raw_nonzero().get() as u32)
                .unwrap();
            while !spin.load(std::sync::atomic::Ordering::Relaxed) {}
        });
        let tid = rx.recv().unwrap();
        let a = task_cpu_ns(tid).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(30));
        let b = task_cpu_ns(tid).unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        t.join().unwrap();
        assert!(b > a, "{a} -> {b}");
        let mine = thread_cpu_ns();
        assert!(
            task_cpu_ns(rustix::thread::gettid().as_raw_nonzero().get() as u32).unwrap() >= mine
        );
        // pid_max itself is never a task's id.
        let pid_max: u32 = std::fs::read_to_string("/proc/sys/kernel/pid_max")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(task_cpu_ns(pid_max).is_err());
    }
}
