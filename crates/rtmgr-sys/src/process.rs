//! Processes: ids and privileges, signals to processes and process groups,
//! waiting for children with their resource usage, per-thread context
//! switches, the descriptor limit, and signal dispositions (ARTiS §3.1:
//! measurement loads run as process groups that must never outlive a run).

use crate::{io_err, Nanos};
use rustix::process::{Pid, Resource, Rlimit, WaitOptions};
use std::io;

/// This process's id.
pub fn pid() -> i32 {
    rustix::process::getpid().as_raw_nonzero().get()
}

/// Is this process running with root's effective user id?
pub fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// `kill(pid, sig)`: a negative `pid` is a process group, signal 0 only
/// checks that the target exists. Any signal number may be sent.
pub fn kill(pid: i32, sig: i32) -> io::Result<()> {
    // SAFETY: kill takes no pointers.
    if unsafe { libc::kill(pid, sig) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// End this process at once with SIGKILL (crash-recovery tests).
pub fn kill_self() {
    let _ = kill(pid(), libc::SIGKILL);
}

/// Have the kernel send SIGKILL to the calling process when its parent dies
/// (a benchmark's SCHED_FIFO child must never outlive it).
pub fn die_with_parent() -> io::Result<()> {
    rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
        .map_err(io_err)
}

/// Does a process (or, for a negative id, a process group) with this id exist?
pub fn exists(pid: i32) -> bool {
    kill(pid, 0).is_ok()
}

/// Has the process with this id certainly exited (signal 0 fails with ESRCH)?
pub fn is_gone(pid: i32) -> bool {
    matches!(kill(pid, 0), Err(e) if e.raw_os_error() == Some(libc::ESRCH))
}

/// `waitpid(pid, WUNTRACED)`: Ok(raw wait status) once the child stopped or ended.
pub fn wait_stopped_or_ended(pid: i32) -> io::Result<WaitResult> {
    let target =
        Pid::from_raw(pid.max(0)).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    match rustix::process::waitpid(Some(target), WaitOptions::UNTRACED).map_err(io_err)? {
        Some((_, status)) => Ok(WaitResult {
            raw: status.as_raw(),
        }),
        None => Err(io::Error::from_raw_os_error(libc::ECHILD)),
    }
}

/// A wait status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitResult {
    raw: i32,
}

impl WaitResult {
    pub fn raw(&self) -> i32 {
        self.raw
    }
    pub fn stopped(&self) -> bool {
        libc::WIFSTOPPED(self.raw)
    }
}

/// CPU time a reaped child (with its waited-for children) used.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChildUsage {
    pub user_ns: Nanos,
    pub system_ns: Nanos,
    /// The raw wait status (`WIFEXITED`/`WEXITSTATUS` tell how it ended).
    pub status: i32,
}

impl ChildUsage {
    /// The exit code when the child exited (None when a signal ended it).
    pub fn exit_code(&self) -> Option<i32> {
        libc::WIFEXITED(self.status).then(|| libc::WEXITSTATUS(self.status))
    }
}

/// fork(); the child `_exit(0)`s at once and the parent waits for it: one
/// fork+exit+wait (DROPS §5.1 / lmbench lat_proc "fork").
pub fn fork_exit_wait() -> io::Result<()> {
    // SAFETY: the child calls only the async-signal-safe _exit, so forking a
    // multi-threaded process is sound.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid == 0 {
        // SAFETY: _exit ends the child without running any handler.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: waitpid with a valid pointer to a status word.
    if unsafe { libc::waitpid(pid, &mut status, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn timeval_ns(tv: libc::timeval) -> Nanos {
    tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000
}

/// `wait4(pid, WNOHANG)`: Ok(Some(usage)) when the child was reaped now,
/// Ok(None) while it runs, an error when there is no such child (ECHILD).
pub fn try_reap(pid: i32) -> io::Result<Option<ChildUsage>> {
    let mut status = 0;
    // SAFETY: zeroed rusage is valid plain data.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 with valid pointers to a status word and a rusage.
    let rc = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut ru) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    if rc == 0 {
        return Ok(None);
    }
    Ok(Some(ChildUsage {
        user_ns: timeval_ns(ru.ru_utime),
        system_ns: timeval_ns(ru.ru_stime),
        status,
    }))
}

/// Voluntary and involuntary context switches of the calling thread so far.
pub fn thread_switches() -> (u64, u64) {
    // SAFETY: zeroed rusage is valid plain data.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage fills the rusage it is given, for the calling thread.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    (ru.ru_nvcsw as u64, ru.ru_nivcsw as u64)
}

/// Raise the soft limit of open descriptors to the hard one (this process
/// only) when allowed; returns the soft limit now (u64::MAX: unlimited).
pub fn raise_nofile_limit() -> u64 {
    let r = rustix::process::getrlimit(Resource::Nofile);
    let (cur, max) = (r.current.unwrap_or(u64::MAX), r.maximum.unwrap_or(u64::MAX));
    if cur < max {
        let raised = Rlimit {
            current: r.maximum,
            maximum: r.maximum,
        };
        if rustix::process::setrlimit(Resource::Nofile, raised).is_ok() {
            return max;
        }
    }
    cur
}

/// Restore the default action of `sig` (e.g. SIGPIPE: a write to a closed
/// pipe ends the process quietly).
pub fn default_signal_action(sig: i32) {
    // SAFETY: installing SIG_DFL runs no code of ours.
    unsafe { libc::signal(sig, libc::SIG_DFL) };
}

/// Raise `sig` in this process with its default action, as a child that died
/// of it would have (returns only when that action does not end the process).
pub fn raise_default(sig: i32) {
    default_signal_action(sig);
    // SAFETY: raise takes no pointers.
    unsafe { libc::raise(sig) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn a_child_is_waited_for_signalled_and_reaped() {
        let mut child = Command::new("/bin/sh")
            .args(["-c", "kill -STOP $$; exit 3"])
            .spawn()
            .unwrap();
        let id = child.id() as i32;
        let w = wait_stopped_or_ended(id).unwrap();
        assert!(w.stopped(), "status {:#x}", w.raw());
        assert!(exists(id) && !is_gone(id));
        assert_eq!(try_reap(id).unwrap(), None, "stopped, not reaped");
        kill(id, libc::SIGCONT).unwrap();
        let t0 = std::time::Instant::now();
        while try_reap(id).unwrap().is_none() {
            assert!(t0.elapsed().as_secs() < 10);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(try_reap(id).is_err(), "ECHILD once reaped");
        assert!(is_gone(id));
        assert!(child.wait().is_err(), "already reaped");
    }

    #[test]
    fn limits_of_a_child_are_read_and_set() {
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let pid = child.id();
        let before = get_limit(pid, LimitKind::RtTime).unwrap();
        let new = Limit {
            soft: Some(100_000),
            hard: Some(200_000),
        };
        set_limit(pid, LimitKind::RtTime, new).unwrap();
        assert_eq!(get_limit(pid, LimitKind::RtTime).unwrap(), new);
        // Raising a hard limit back needs CAP_SYS_RESOURCE (a container's
        // root may lack it): then only lowering works.
        match set_limit(pid, LimitKind::RtTime, before) {
            Ok(()) => assert_eq!(get_limit(pid, LimitKind::RtTime).unwrap(), before),
            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EPERM)),
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(get_limit(u32::MAX >> 1, LimitKind::MemLock).is_err());
    }

    #[test]
    fn ids_limits_and_switches() {
        assert_eq!(pid() as u32, std::process::id());
        let _ = is_root();
        assert!(raise_nofile_limit() >= 3);
        let (v0, _) = thread_switches();
        std::thread::sleep(std::time::Duration::from_millis(2));
        assert!(thread_switches().0 > v0, "a sleep is a voluntary switch");
    }
}

/// The resource limits a grant sets on a client (rtkit's RLIMIT_RTTIME; the
/// priority and locked-memory allowances).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(
    feature = "serde",
    derive(serde::Serialize, serde::Deserialize),
    serde(rename_all = "snake_case")
)]
pub enum LimitKind {
    RtPrio,
    MemLock,
    RtTime,
}

impl LimitKind {
    fn resource(self) -> (Resource, libc::__rlimit_resource_t) {
        match self {
            LimitKind::RtPrio => (Resource::Rtprio, libc::RLIMIT_RTPRIO),
            LimitKind::MemLock => (Resource::Memlock, libc::RLIMIT_MEMLOCK),
            LimitKind::RtTime => (Resource::Rttime, libc::RLIMIT_RTTIME),
        }
    }
}

/// A soft and a hard limit; None = unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
pub struct Limit {
    pub soft: Option<u64>,
    pub hard: Option<u64>,
}

fn from_raw(v: libc::rlim_t) -> Option<u64> {
    (v != libc::RLIM_INFINITY).then_some(v)
}

/// `prlimit(pid, kind)`: read a process's limit.
pub fn get_limit(pid: u32, kind: LimitKind) -> io::Result<Limit> {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit reads no new limit (null) and writes `old`.
    let rc = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            kind.resource().1,
            std::ptr::null(),
            &mut old,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Limit {
        soft: from_raw(old.rlim_cur),
        hard: from_raw(old.rlim_max),
    })
}

/// `prlimit(pid, kind, new)`: set a process's limit (raising a hard limit
/// needs CAP_SYS_RESOURCE).
pub fn set_limit(pid: u32, kind: LimitKind, new: Limit) -> io::Result<()> {
    let raw = i32::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let target = Pid::from_raw(raw);
    rustix::process::prlimit(
        target,
        kind.resource().0,
        Rlimit {
            current: new.soft,
            maximum: new.hard,
        },
    )
    .map(|_| ())
    .map_err(io_err)
}
