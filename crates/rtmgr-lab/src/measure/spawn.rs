//! Starting measurement helpers (stress-ng, cyclictest) as children in their own
//! process group, pinned and with their scheduling policy set before they run,
//! optionally held stopped until the caller has moved them into a cpuset; and
//! ending them: the whole group is signalled and verified gone (ARTiS §3.1
//! loads must never outlive the measurement).

use super::{MeasureError, Result};
use rtmgr_core::CpuSet;
use rtmgr_sys::child::ChildSetup;
use rtmgr_sys::process::{self, ChildUsage};
use rtmgr_sys::sched::CpuMask;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How to start a child.
pub struct SpawnSpec<'a> {
    pub program: &'a str,
    pub args: Vec<String>,
    pub cpus: Option<CpuSet>,
    /// Run at SCHED_IDLE (inherited by the child's own children); otherwise SCHED_OTHER.
    pub sched_idle: bool,
    /// Where stdout and stderr go.
    pub log: Option<std::fs::File>,
    /// Called with the child's pid while it is stopped, before it runs the program.
    pub before_run: Option<&'a dyn Fn(u32) -> Result<()>>,
}

/// A child in its own process group; killed with its group on drop.
pub struct GroupChild {
    child: Child,
    pgid: i32,
    reaped: Option<ChildUsage>,
}

fn cpu_mask(cpus: &CpuSet) -> Result<CpuMask> {
    CpuMask::from_cpus(cpus.iter()).map_err(|e| MeasureError::Setup(e.to_string()))
}

impl GroupChild {
    pub fn spawn(spec: SpawnSpec<'_>) -> Result<GroupChild> {
        let gated = spec.before_run.is_some();
        let mut cmd = if gated {
            // sh stops itself; the caller moves it, then continues it into exec.
            let mut c = Command::new("/bin/sh");
            c.arg("-c")
                .arg("kill -STOP $$; exec \"$@\"")
                .arg("sh")
                .arg(spec.program)
                .args(&spec.args);
            c
        } else {
            let mut c = Command::new(spec.program);
            c.args(&spec.args);
            c
        };
        cmd.stdin(Stdio::null()).process_group(0);
        match spec.log {
            Some(f) => {
                let f2 = f.try_clone().map_err(|e| MeasureError::io("log file", e))?;
                cmd.stdout(f).stderr(f2);
            }
            None => {
                cmd.stdout(Stdio::null()).stderr(Stdio::null());
            }
        }
        // A gated child is pinned after `before_run` has moved it into its cpuset:
        // before that, the target CPUs may lie outside its current cpuset (EINVAL).
        let mask = if gated {
            None
        } else {
            spec.cpus.as_ref().map(cpu_mask).transpose()?
        };
        // A gated child gets SCHED_IDLE after the gate too: at SCHED_IDLE on a
        // busy CPU it might take seconds to even reach the gate.
        let idle = spec.sched_idle && !gated;
        let mut setup = ChildSetup::new();
        if let Some(mask) = mask {
            setup = setup.affinity(mask);
        }
        // Children never inherit the orchestrator's real-time policy.
        setup.time_sharing(idle).install(&mut cmd);
        let child = cmd
            .spawn()
            .map_err(|e| MeasureError::io(format!("start {}", spec.program), e))?;
        let pgid = child.id() as i32;
        let mut gc = GroupChild {
            child,
            pgid,
            reaped: None,
        };
        if let Some(f) = spec.before_run {
            gc.wait_stopped()?;
            f(pgid as u32)?;
            if let Some(cpus) = &spec.cpus {
                // A v1 cpuset attach resets the affinity to the cpuset's CPUs.
                rtmgr_linux::sched::set_affinity(pgid as u32, cpus)
                    .map_err(|e| MeasureError::io("pin gated child", e))?;
            }
            if spec.sched_idle {
                rtmgr_linux::sched::set_policy(pgid as u32, rtmgr_linux::sched::Policy::Idle)
                    .map_err(|e| MeasureError::io("SCHED_IDLE for gated child", e))?;
            }
            let _ = process::kill(-pgid, libc::SIGCONT);
        }
        Ok(gc)
    }

    fn wait_stopped(&mut self) -> Result<()> {
        // WUNTRACED reports the stop without reaping.
        match process::wait_stopped_or_ended(self.pgid) {
            Ok(w) if w.stopped() => Ok(()),
            r => Err(MeasureError::Setup(format!(
                "child {} did not stop at its start gate (status {:#x})",
                self.pgid,
                r.map_or(0, |w| w.raw())
            ))),
        }
    }

    pub fn pid(&self) -> u32 {
        self.pgid as u32
    }

    /// Signal every process of the group.
    pub fn signal_group(&self, sig: i32) {
        let _ = process::kill(-self.pgid, sig);
    }

    /// Has the leader exited? Reaps it (keeping its resource usage) if so.
    pub fn try_reap(&mut self) -> bool {
        if self.reaped.is_some() {
            return true;
        }
        match process::try_reap(self.pgid) {
            Ok(Some(usage)) => {
                self.reaped = Some(usage);
                true
            }
            Ok(None) => false,
            Err(_) => true, // ECHILD: already reaped elsewhere
        }
    }

    /// Wait for the leader, up to `timeout`.
    pub fn wait_timeout(&mut self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if self.try_reap() {
                return true;
            }
            if Instant::now() >= end {
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Does any process of the group still exist?
    pub fn group_alive(&self) -> bool {
        process::exists(-self.pgid)
    }

    /// Stop the group: `sig` first, then SIGKILL after `grace`; verify it is gone.
    pub fn stop(&mut self, sig: i32, grace: Duration) -> Result<()> {
        if !self.try_reap() || self.group_alive() {
            self.signal_group(sig);
            let end = Instant::now() + grace;
            while Instant::now() < end && (!self.try_reap() || self.group_alive()) {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if !self.try_reap() || self.group_alive() {
            self.signal_group(libc::SIGKILL);
            self.wait_timeout(Duration::from_secs(5));
            let end = Instant::now() + Duration::from_secs(5);
            while self.group_alive() && Instant::now() < end {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        if self.group_alive() {
            return Err(MeasureError::Load(format!(
                "process group {} still has members after SIGKILL",
                self.pgid
            )));
        }
        Ok(())
    }

    /// User + system CPU time of the reaped leader and its waited-for children, ns.
    pub fn cpu_time_ns(&self) -> Option<u64> {
        self.reaped.map(|u| u.user_ns + u.system_ns)
    }

    /// The reaped leader's resource usage and wait status.
    pub fn usage(&self) -> Option<ChildUsage> {
        self.reaped
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        if let Err(e) = self.stop(libc::SIGKILL, Duration::from_millis(0)) {
            eprintln!("rtmgr: {e}");
        }
        let _ = &self.child;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_is_gone_after_stop_and_drop() {
        let mut c = GroupChild::spawn(SpawnSpec {
            program: "/bin/sh",
            args: vec!["-c".into(), "sleep 30 & sleep 30 & wait".into()],
            cpus: None,
            sched_idle: true,
            log: None,
            before_run: None,
        })
        .unwrap();
        let pgid = c.pid();
        std::thread::sleep(Duration::from_millis(100));
        assert!(c.group_alive());
        c.stop(libc::SIGTERM, Duration::from_secs(2)).unwrap();
        assert!(!c.group_alive());
        drop(c);
        assert!(!process::exists(-(pgid as i32)));
    }

    #[test]
    fn gate_runs_before_the_program_and_drop_kills() {
        let seen = std::sync::Mutex::new(None);
        let f = |pid: u32| {
            let st = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            *seen.lock().unwrap() = Some(st.contains(") T "));
            Ok(())
        };
        let c = GroupChild::spawn(SpawnSpec {
            program: "sleep",
            args: vec!["30".into()],
            cpus: Some(CpuSet::single(0)),
            sched_idle: true,
            log: None,
            before_run: Some(&f),
        })
        .unwrap();
        assert_eq!(
            *seen.lock().unwrap(),
            Some(true),
            "child was stopped at the gate"
        );
        let pgid = c.pid() as i32;
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            rtmgr_linux::sched::get_affinity(pgid as u32).unwrap(),
            CpuSet::single(0)
        );
        drop(c);
        assert!(!process::exists(-pgid));
    }
}
