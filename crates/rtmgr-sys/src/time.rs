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
