//! The running kernel behind `Host`: control files are written in one
//! write(2), scheduling calls go to the kernel, debugfs is read in a private
//! mount namespace of a thread.

use super::{io_err, task_err, Host, Kernel, Result};
use crate::sched;
use rtmgr_core::CpuSet;
use std::io::Write;
use std::path::Path;

#[derive(Debug)]
pub(super) struct RealKernel;

/// A whole file as text, read into a buffer that fits a control file at
/// once (`read_file`: no stat or seek for a size hint /proc does not give,
/// and one read(2) for a task's one-piece file).
fn read_small(p: &Path, abs: &Path) -> std::io::Result<String> {
    super::read::into_text(super::read_file(p, abs)?)
}

impl Kernel for RealKernel {
    /// Into a 4 KiB buffer first: /proc and sysfs files report size 0, so
    /// `fs::read_to_string` would stat the file and then read it 32 bytes,
    /// 64, 128… (nine system calls for a task's `stat`, against four here;
    /// a grant reads a few dozen such files).
    fn read(&self, host: &Host, abs: &Path) -> Result<String> {
        let p = host.path(abs);
        read_small(&p, abs).map_err(|e| io_err("read", &p, e))
    }

    fn write(&self, host: &Host, abs: &Path, value: &str) -> Result<()> {
        let p = host.path(abs);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .map_err(|e| io_err("open", &p, e))?;
        f.write_all(value.as_bytes())
            .map_err(|e| io_err("write", &p, e))
    }

    fn mkdir(&self, host: &Host, abs: &Path) -> Result<()> {
        let p = host.path(abs);
        std::fs::create_dir(&p).map_err(|e| io_err("mkdir", &p, e))
    }

    fn rmdir(&self, host: &Host, abs: &Path) -> Result<()> {
        let p = host.path(abs);
        std::fs::remove_dir(&p).map_err(|e| io_err("rmdir", &p, e))
    }

    fn get_affinity(&self, _host: &Host, tid: u32) -> Result<CpuSet> {
        sched::get_affinity(tid).map_err(|e| task_err("sched_getaffinity", tid, e))
    }

    fn set_affinity(&self, _host: &Host, tid: u32, cpus: &CpuSet) -> Result<()> {
        sched::set_affinity(tid, cpus).map_err(|e| task_err("sched_setaffinity", tid, e))
    }

    fn get_policy(&self, _host: &Host, tid: u32) -> Result<sched::Policy> {
        sched::get_policy(tid).map_err(|e| task_err("sched_getattr", tid, e))
    }

    fn set_policy(&self, _host: &Host, tid: u32, policy: sched::Policy) -> Result<()> {
        sched::set_policy(tid, policy).map_err(|e| task_err("sched_setattr", tid, e))
    }

    fn get_attr(&self, _host: &Host, tid: u32) -> Result<rtmgr_sys::sched::SchedAttr> {
        rtmgr_sys::sched::get_attr(tid).map_err(|e| task_err("sched_getattr", tid, e))
    }

    fn set_attr(&self, _host: &Host, tid: u32, attr: &rtmgr_sys::sched::SchedAttr) -> Result<()> {
        rtmgr_sys::sched::set_attr(tid, attr).map_err(|e| task_err("sched_setattr", tid, e))
    }

    fn get_limit(&self, _host: &Host, pid: u32, kind: super::LimitKind) -> Result<super::Limit> {
        rtmgr_sys::process::get_limit(pid, kind).map_err(|e| task_err("prlimit", pid, e))
    }

    fn set_limit(
        &self,
        _host: &Host,
        pid: u32,
        kind: super::LimitKind,
        limit: super::Limit,
    ) -> Result<()> {
        rtmgr_sys::process::set_limit(pid, kind, limit).map_err(|e| task_err("prlimit", pid, e))
    }

    fn get_ioprio(&self, _host: &Host, tid: u32) -> Result<u16> {
        rtmgr_sys::ioprio::get(tid).map_err(|e| task_err("ioprio_get", tid, e))
    }

    fn set_ioprio(&self, _host: &Host, tid: u32, raw: u16) -> Result<()> {
        rtmgr_sys::ioprio::set(tid, raw).map_err(|e| task_err("ioprio_set", tid, e))
    }

    fn privileged(&self) -> bool {
        sched::is_root()
    }

    fn task_handle(&self, tid: u32) -> Option<rtmgr_sys::pidfd::Pidfd> {
        rtmgr_sys::pidfd::Pidfd::open_thread(tid).ok()
    }

    fn read_debugfs(&self, rel: &str) -> Result<String> {
        in_private_debugfs(rel, |p| std::fs::read_to_string(p))
    }

    fn open_debugfs(&self, rel: &str) -> Result<std::fs::File> {
        in_private_debugfs(rel, |p| std::fs::File::open(p))
    }

    fn write_debugfs(&self, rel: &str, value: &str) -> Result<()> {
        in_private_debugfs(rel, |p| {
            std::fs::OpenOptions::new()
                .write(true)
                .open(p)?
                .write_all(value.as_bytes())
        })
    }

    fn remount(&self, _host: &Host, target: &Path, mount_options: &str, data: &str) -> Result<()> {
        rtmgr_sys::ns::remount(target, mount_options, data)
            .map_err(|e| io_err("remount", target, e))
    }

    fn probe_deadline(&self) -> Option<std::result::Result<(), String>> {
        Some(sched::deadline_available())
    }

    fn probe_fifo(&self, _host: &Host) -> Option<std::result::Result<(), i32>> {
        Some(sched::fifo_available())
    }

    fn sched_clock_offset(&self, _host: &Host) -> std::result::Result<i64, String> {
        sched_clock_offset_ns()
    }
}

/// The scheduler's clock (SCHED_DEADLINE deadlines, /proc/<tid>/sched)
/// minus CLOCK_MONOTONIC, ns. They start together at boot and part by the
/// clock's correction since (4 ms here after a day). A short-lived thread
/// takes SCHED_DEADLINE: the kernel gives it the deadline "its run queue's
/// clock + D" there and then; CLOCK_MONOTONIC read just after is a little
/// later, so a reading is at most the true figure (the largest of
/// `OFFSET_READINGS` is kept) — unless the thread spent its budget before
/// its deadline was read: replenished, its deadline moved a period on,
/// and the reading was a period too high (seen here: +96 ms, which made
/// every hold of `daemon/zero_lag.rs` end before it began). So each
/// reading is taken by a fresh thread (a fresh server) and kept only when
/// it took less wall time than its budget: it cannot then have spent it.
fn sched_clock_offset_ns() -> std::result::Result<i64, String> {
    let mut kept = Vec::new();
    let mut why = String::from("no reading");
    for _ in 0..OFFSET_TRIES {
        match std::thread::spawn(sched_clock_offset_reading)
            .join()
            .unwrap_or_else(|_| Err("probe thread panicked".into()))
        {
            Ok(Some(offset)) => kept.push(offset),
            Ok(None) => why = "every reading took longer than its budget".into(),
            Err(e) => return Err(e),
        }
        if kept.len() == OFFSET_READINGS {
            break;
        }
    }
    kept.into_iter().max().ok_or(why)
}

/// Readings kept, out of at most `OFFSET_TRIES`.
const OFFSET_READINGS: usize = 3;
const OFFSET_TRIES: usize = 12;
/// The probe's reservation: a budget far above what one reading takes
/// (tens of µs), a deadline far from it.
const OFFSET_BUDGET_NS: u64 = 1_000_000;
const OFFSET_DEADLINE_NS: u64 = 100_000_000;

/// One reading by the calling (fresh) thread: Some(offset), or None when
/// it took `OFFSET_BUDGET_NS` or more of wall time (its budget may have
/// been spent and its deadline moved).
fn sched_clock_offset_reading() -> std::result::Result<Option<i64>, String> {
    let p = sched::Policy::Deadline {
        runtime: OFFSET_BUDGET_NS,
        deadline: OFFSET_DEADLINE_NS,
        period: OFFSET_DEADLINE_NS,
    };
    let before = rtmgr_sys::time::mono_ns();
    sched::set_policy(0, p).map_err(|e| format!("SCHED_DEADLINE: {e}"))?;
    let after = rtmgr_sys::time::mono_ns();
    let sched = std::fs::read_to_string("/proc/thread-self/sched");
    let done = rtmgr_sys::time::mono_ns();
    let _ = sched::set_policy(0, sched::Policy::Other { nice: 0 });
    let sched = sched.map_err(|e| format!("/proc/thread-self/sched: {e}"))?;
    let deadline = rtmgr_core::proctext::sched_field(&sched, "dl.deadline")
        .ok_or("/proc/thread-self/sched shows no dl.deadline")?;
    Ok(offset_reading(
        deadline,
        OFFSET_DEADLINE_NS,
        before,
        after,
        done,
        OFFSET_BUDGET_NS,
    ))
}

/// A reading from a deadline read back (`deadline`, relative `relative_ns`)
/// and CLOCK_MONOTONIC before the call, after it and after the read; None
/// when the whole took `budget_ns` or more (see `sched_clock_offset_ns`).
fn offset_reading(
    deadline: i64,
    relative_ns: u64,
    before: u64,
    after: u64,
    done: u64,
    budget_ns: u64,
) -> Option<i64> {
    (done.saturating_sub(before) < budget_ns).then(|| deadline - relative_ns as i64 - after as i64)
}

const DEBUGFS: &str = "/sys/kernel/debug";

/// Do `f` on the debugfs file `rel` in a thread of its own with debugfs
/// mounted in a private mount namespace (rtmgr_sys::ns): nothing is mounted
/// for others, and the mount goes away with the thread.
fn in_private_debugfs<T: Send>(
    rel: &str,
    f: impl FnOnce(&Path) -> std::io::Result<T> + Send,
) -> Result<T> {
    let path = Path::new(DEBUGFS).join(rel);
    if !sched::is_root() {
        let eperm = std::io::Error::from_raw_os_error(libc::EPERM);
        return Err(io_err("debugfs", &path, eperm));
    }
    let run = || {
        rtmgr_sys::ns::private_mounts_for_this_thread().map_err(|e| io_err("unshare", &path, e))?;
        rtmgr_sys::ns::mount_debugfs(Path::new(DEBUGFS))
            .map_err(|e| io_err("mount debugfs", &path, e))?;
        f(&path).map_err(|e| io_err("debugfs", &path, e))
    };
    std::thread::scope(|s| s.spawn(run).join()).unwrap_or_else(|_| {
        let panicked = std::io::Error::other("debugfs thread panicked");
        Err(io_err("debugfs", &path, panicked))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root only (SCHED_DEADLINE): the offset is read, and small against a
    /// day (the clocks start together at boot).
    #[test]
    fn the_scheduler_clock_offset_is_read() {
        if !sched::is_root() {
            eprintln!("skip: SCHED_DEADLINE needs root");
            return;
        }
        match sched_clock_offset_ns() {
            Ok(ns) => {
                eprintln!(
                    "scheduler clock − CLOCK_MONOTONIC: {:+.3} ms",
                    ns as f64 / 1e6
                );
                assert!(ns.abs() < 86_400_000_000_000, "{ns} ns");
            }
            Err(why) => eprintln!("skip: {why}"),
        }
    }

    /// Root only: two measurements a moment apart agree to within a
    /// millisecond (a reading of a replenished probe was a period, 100 ms,
    /// too high).
    #[test]
    fn two_measurements_of_the_clock_offset_agree() {
        if !sched::is_root() {
            eprintln!("skip: SCHED_DEADLINE needs root");
            return;
        }
        let (Ok(a), Ok(b)) = (sched_clock_offset_ns(), sched_clock_offset_ns()) else {
            eprintln!("skip: no reading (every one slower than its budget)");
            return;
        };
        assert!((a - b).abs() < 1_000_000, "{a} ns then {b} ns");
    }

    /// A reading slower than the probe's budget is not kept: its deadline
    /// may have moved a period on.
    #[test]
    fn a_reading_slower_than_its_budget_is_not_kept() {
        let ms = 1_000_000;
        // Deadline 100 ms after a scheduler clock 4 ms ahead.
        assert_eq!(
            offset_reading(
                204 * ms as i64,
                100 * ms,
                100 * ms,
                100 * ms,
                100 * ms + 50_000,
                ms
            ),
            Some(4 * ms as i64)
        );
        assert_eq!(
            offset_reading(304 * ms as i64, 100 * ms, 100 * ms, 100 * ms, 101 * ms, ms),
            None
        );
    }
}
