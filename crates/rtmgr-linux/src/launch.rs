//! Starting an unmodified program in an ARTiS class (ARTiS §2.4: "it is
//! possible to set the priority of a task to RT0 using a helper program"):
//! between fork and exec the child joins its cpuset, takes its affinity and
//! its scheduling policy, so its first instruction already runs in its class.
//! Also: forwarding signals to it and passing its exit status on.

use crate::sched::Policy;
use rtmgr_core::CpuSet;
use rtmgr_sys::child::ChildSetup;
use rtmgr_sys::process;
use rtmgr_sys::sched::CpuMask;
use std::os::unix::process::ExitStatusExt;
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
    let mut setup = ChildSetup::new();
    if let Some(p) = &l.cgroup_file {
        setup = setup.join_cgroup(p)?;
    }
    setup
        .affinity(CpuMask::from_cpus(l.cpus.iter())?)
        .policy(l.policy)
        .install(&mut cmd);
    cmd.spawn()
}

/// Wait for the child, forwarding the signals a supervisor receives.
/// Signals that come from the terminal (Ctrl-C, Ctrl-\) reach the child
/// directly through its process group and are not sent twice.
pub fn wait_forwarding(child: &mut Child) -> std::io::Result<ExitStatus> {
    use signal_hook::consts::signal::*;
    use signal_hook::iterator::exfiltrator::WithOrigin;
    use signal_hook::iterator::SignalsInfo;
    let pid = child.id() as i32;
    let mut signals = SignalsInfo::<WithOrigin>::new([
        SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCONT, SIGWINCH,
    ])?;
    let handle = signals.handle();
    let forwarder = std::thread::spawn(move || {
        for origin in signals.forever() {
            let from_terminal =
                origin.process.is_none() && matches!(origin.signal, SIGINT | SIGQUIT | SIGWINCH);
            if !from_terminal {
                let _ = process::kill(pid, origin.signal);
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
        process::raise_default(sig);
        return 128u8.wrapping_add(sig as u8);
    }
    1
}

/// Let a write to a closed pipe end the process quietly (as for `rtmgr status | head`)
/// instead of panicking in println!.
pub fn default_sigpipe() {
    process::default_signal_action(libc::SIGPIPE);
}
