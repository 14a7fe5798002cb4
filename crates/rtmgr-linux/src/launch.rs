//! Starting an unmodified program in an ARTiS class (ARTiS §2.4: "it is
//! possible to set the priority of a task to RT0 using a helper program"):
//! between fork and exec the child joins its cpuset, takes its affinity and
//! its scheduling policy, so its first instruction already runs in its class.
//! Also: forwarding signals to it and passing its exit status on.

use crate::sched::{self, Policy};
use rtmgr_core::CpuSet;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus};

pub struct Launch {
    pub program: String,
    pub args: Vec<String>,
    pub cpus: CpuSet,
    pub policy: Policy,
    /// A cgroup membership file (`tasks` or `cgroup.procs`, machine path) to join first.
    pub cgroup_file: Option<PathBuf>,
    pub env: Vec<(String, String)>,
}

/// Start the program. Errors from the child's set-up (before exec) are
/// reported by spawn, e.g. "Operation not permitted" for SCHED_FIFO without root.
pub fn spawn(l: &Launch) -> std::io::Result<Child> {
    let mut cmd = Command::new(&l.program);
    cmd.args(&l.args);
    for (k, v) in &l.env {
        cmd.env(k, v);
    }
    let cgroup = l
        .cgroup_file
        .as_ref()
        .map(|p| {
            CString::new(p.as_os_str().as_bytes())
                .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))
        })
        .transpose()?;
    let cpus = l.cpus.clone();
    let policy = l.policy;
    // SAFETY: the closure runs between fork and exec in the child. It only makes
    // system calls (open, write, close, sched_setaffinity, sched_setattr) on data
    // prepared before the fork; set_affinity builds a cpu_set_t on the stack and
    // allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if let Some(path) = &cgroup {
                let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // "0" means the writing task itself (cgroup v1 `tasks`, v2 `cgroup.procs`).
                let rc = libc::write(fd, b"0".as_ptr().cast(), 1);
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if rc != 1 {
                    return Err(err);
                }
            }
            sched::set_affinity(0, &cpus)?;
            sched::set_policy(0, policy)?;
            Ok(())
        });
    }
    cmd.spawn()
}

/// Wait for the child, forwarding the signals a supervisor receives.
/// Signals that come from the terminal (Ctrl-C, Ctrl-\) reach the child
/// directly through its process group and are not sent twice.
pub fn wait_forwarding(child: &mut Child) -> std::io::Result<ExitStatus> {
    use signal_hook::consts::signal::*;
    use signal_hook::iterator::exfiltrator::WithOrigin;
    use signal_hook::iterator::SignalsInfo;
    let pid = child.id() as libc::pid_t;
    let mut signals = SignalsInfo::<WithOrigin>::new([
        SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT, SIGWINCH,
    ])?;
    let handle = signals.handle();
    let forwarder = std::thread::spawn(move || {
        for origin in signals.forever() {
            let from_terminal =
                origin.process.is_none() && matches!(origin.signal, SIGINT | SIGQUIT | SIGWINCH);
            if !from_terminal {
                // SAFETY: kill with a pid we spawned; no memory involved.
                unsafe {
                    libc::kill(pid, origin.signal);
                }
            }
        }
    });
    let status = child.wait();
    handle.close();
    let _ = forwarder.join();
    status
}

/// Terminate this process the way the child ended: same exit code, or the same
/// signal (default action restored first). Returns the code to exit with when
/// re-raising did not end the process.
pub fn exit_like(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        return code as u8;
    }
    if let Some(sig) = status.signal() {
        // SAFETY: restoring the default action and raising a signal on ourselves.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return 128u8.wrapping_add(sig as u8);
    }
    1
}

/// Let a write to a closed pipe end the process quietly (as for `rtmgr status | head`)
/// instead of panicking in println!.
pub fn default_sigpipe() {
    // SAFETY: setting the default disposition of SIGPIPE; no handler involved.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
