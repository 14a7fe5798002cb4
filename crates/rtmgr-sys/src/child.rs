//! What a child process does between fork and exec, so that its first
//! instruction already runs in its class (ARTiS §2.4: "it is possible to set
//! the priority of a task to RT0 using a helper program"): join a cgroup, take
//! its CPU affinity, take its scheduling policy.

use crate::io_err;
use crate::sched::{self, CpuMask, Policy, SchedAttr};
use rustix::fs::{Mode, OFlags};
use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

/// How the child's scheduling policy is set.
#[derive(Debug, Clone, Copy)]
enum ChildPolicy {
    /// sched_setattr: the policy with its nice value or priority.
    Attr(SchedAttr),
    /// sched_setscheduler with priority 0: the nice value is inherited.
    KeepNice(u32),
}

/// The set-up steps, prepared before the fork (nothing is allocated after it),
/// run in this order: cgroup, affinity, policy. A failing step makes
/// `Command::spawn` return its error.
#[derive(Debug, Default)]
pub struct ChildSetup {
    cgroup: Option<CString>,
    affinity: Option<CpuMask>,
    policy: Option<ChildPolicy>,
    parent_death_signal: Option<rustix::process::Signal>,
}

impl ChildSetup {
    pub fn new() -> Self {
        Self::default()
    }

    /// Join a cgroup by writing "0" (the writing task itself) to its
    /// membership file (`tasks` for cgroup v1, `cgroup.procs` for v2).
    pub fn join_cgroup(mut self, membership_file: &Path) -> io::Result<Self> {
        let c = CString::new(membership_file.as_os_str().as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        self.cgroup = Some(c);
        Ok(self)
    }

    pub fn affinity(mut self, mask: CpuMask) -> Self {
        self.affinity = Some(mask);
        self
    }

    /// Set `policy` with sched_setattr (including its nice value).
    pub fn policy(mut self, policy: Policy) -> Self {
        self.policy = Some(ChildPolicy::Attr(policy.into()));
        self
    }

    /// SCHED_IDLE (`idle`) or SCHED_OTHER, keeping the inherited nice value:
    /// children never inherit the parent's real-time policy.
    pub fn time_sharing(mut self, idle: bool) -> Self {
        let p = if idle {
            sched::SCHED_IDLE
        } else {
            sched::SCHED_OTHER
        };
        self.policy = Some(ChildPolicy::KeepNice(p));
        self
    }

    /// Have the kernel send SIGTERM to the child when the thread that spawned
    /// it ends (a test's daemon must not outlive a killed test: on SIGTERM
    /// it gives the machine back).
    pub fn term_with_parent(mut self) -> Self {
        self.parent_death_signal = Some(rustix::process::Signal::TERM);
        self
    }

    /// The same with SIGKILL (a test's client processes).
    pub fn kill_with_parent(mut self) -> Self {
        self.parent_death_signal = Some(rustix::process::Signal::KILL);
        self
    }

    /// Run the steps in the child of `cmd`, between fork and exec.
    pub fn install(self, cmd: &mut Command) {
        // SAFETY: the closure runs in the forked child. It only makes system
        // calls (open, write, close, sched_setaffinity, sched_setattr or
        // sched_setscheduler, prctl) on data prepared before the fork, allocates
        // nothing (errors are built from raw errno values or error kinds) and
        // takes no locks.
        unsafe {
            cmd.pre_exec(move || self.run_in_child());
        }
    }

    fn run_in_child(&self) -> io::Result<()> {
        if let Some(sig) = self.parent_death_signal {
            rustix::process::set_parent_process_death_signal(Some(sig)).map_err(io_err)?;
        }
        if let Some(path) = &self.cgroup {
            let fd = rustix::fs::open(
                path.as_c_str(),
                OFlags::WRONLY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .map_err(io_err)?;
            if rustix::io::write(&fd, b"0").map_err(io_err)? != 1 {
                return Err(io::ErrorKind::WriteZero.into());
            }
        }
        if let Some(mask) = &self.affinity {
            sched::set_affinity(0, mask)?;
        }
        match self.policy {
            Some(ChildPolicy::Attr(a)) => sched::set_attr(0, &a)?,
            Some(ChildPolicy::KeepNice(p)) => sched::set_scheduler(0, p, 0)?,
            None => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn child_starts_with_its_affinity_and_policy() {
        let cpu = sched::get_affinity(0).unwrap().cpus().next().unwrap();
        let mut cmd = Command::new("/bin/sh");
        // Field 41 of /proc/<pid>/stat is the policy (inherited by grep and cut).
        cmd.args([
            "-c",
            "grep Cpus_allowed_list /proc/self/status; cut -d' ' -f41 /proc/self/stat",
        ]);
        ChildSetup::new()
            .affinity(CpuMask::from_cpus([cpu]).unwrap())
            .policy(Policy::Batch { nice: 19 })
            .install(&mut cmd);
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        let words: Vec<&str> = text.split_whitespace().collect();
        assert_eq!(
            words[1..],
            [cpu.to_string(), sched::SCHED_BATCH.to_string()]
        );
    }

    #[test]
    fn a_failing_step_is_the_spawn_error() {
        let mut cmd = Command::new("/bin/true");
        ChildSetup::new()
            .join_cgroup(Path::new("/nonexistent/cgroup.procs"))
            .unwrap()
            .time_sharing(true)
            .install(&mut cmd);
        let e = cmd.spawn().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
        assert!(ChildSetup::new().join_cgroup(Path::new("a\0b")).is_err());
    }
}
