//! The irqbalance knob (McKenney §2.1: steer interrupts away from the RT CPU;
//! DROPS §4.1: one owner per resource). irqbalance rewrites every IRQ's
//! affinity at each rebalance (10 s by default), undoing the `irqs` knob; so
//! `apply` refuses beside it, or (`--irqbalance ban`) bans the RT CPUs through
//! irqbalance's own run-time socket (`settings cpus LIST`, as irqbalance-ui
//! does) and journals the ban it had, which `reset` gives back. Verify finds
//! an irqbalance started since (it forgot the ban); repair bans it again.

use super::knob::{ApplyCx, Knob, PartitionKnobs, PreviewCx, RepairCx, UndoCx, VerifyCx};
use super::{PartitionError, Result};
use crate::drift::{Drift, Fix};
use crate::journal::Record;
use crate::step::Step;
use crate::{cpus, tasks, Host};
use rtmgr_core::partition::coexist;
use rtmgr_core::partition::{IrqbalanceMode, KnobId, KnobReport, PartitionPlan};
use rtmgr_core::CpuSet;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where irqbalance (1.4.0 and later) puts its socket, `irqbalance<PID>.sock`.
pub const SOCKET_DIR: &str = "/run/irqbalance";
/// Its environment file (Debian; Red Hat uses /etc/sysconfig/irqbalance).
pub const CONFIG_FILES: &[&str] = &["/etc/default/irqbalance", "/etc/sysconfig/irqbalance"];
/// The variable that sets its banned CPUs from the environment file.
pub const BANNED_VAR: &str = "IRQBALANCE_BANNED_CPULIST";

/// A running irqbalance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    pub pid: u32,
    pub start_time: u64,
    /// Its socket (a machine path), whether or not it exists.
    pub socket: PathBuf,
}

/// The running irqbalance, if any (by process name).
pub fn running(host: &Host) -> Option<Running> {
    tasks::find_process(host, "irqbalance").map(|t| Running {
        pid: t.pid,
        start_time: t.start_time,
        socket: PathBuf::from(format!("{SOCKET_DIR}/irqbalance{}.sock", t.pid)),
    })
}

/// How long to wait for irqbalance's answer: irqbalance up to 1.9.3 does
/// not serve its socket for one sleep interval (10 s) after a rescan, and a
/// client that gives up earlier kills it (its late answer raises SIGPIPE).
pub const ANSWER_WAIT: Duration = Duration::from_secs(15);

fn send(host: &Host, socket: &Path, command: &str) -> std::io::Result<UnixStream> {
    let mut s = UnixStream::connect(host.path(socket))?;
    s.set_read_timeout(Some(ANSWER_WAIT))?;
    s.set_write_timeout(Some(ANSWER_WAIT))?;
    s.write_all(command.as_bytes())?;
    s.shutdown(std::net::Shutdown::Write)?;
    Ok(s)
}

/// Ask irqbalance a question (`setup`, `stats`) through its socket and read
/// the answer. irqbalance accepts only root: the kernel attaches our
/// credentials because its socket asks for them (SO_PASSCRED).
pub fn ask(host: &Host, socket: &Path, command: &str) -> std::io::Result<String> {
    let mut s = send(host, socket, command)?;
    let mut reply = String::new();
    s.read_to_string(&mut reply)?;
    Ok(reply)
}

/// Give irqbalance a `settings` command. It answers nothing, and it reads
/// the command when it serves its socket again (see `ANSWER_WAIT`): the
/// command waits in the socket, this does not.
pub fn tell(host: &Host, socket: &Path, command: &str) -> std::io::Result<()> {
    send(host, socket, command).map(drop)
}

/// The CPUs irqbalance bans now, asked through its socket.
pub fn banned_now(host: &Host, ib: &Running) -> std::io::Result<CpuSet> {
    let reply = ask(host, &ib.socket, "setup")?;
    coexist::irqbalance_banned_from_setup(&reply).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("no BANNED mask in its answer to setup: {reply:?}"),
        )
    })
}

/// `IRQBALANCE_BANNED_CPULIST` as the running irqbalance got it (its
/// environment), else as its environment file sets it, with the file read.
pub fn configured_ban(host: &Host, pid: Option<u32>) -> (Option<String>, Option<&'static str>) {
    if let Some(env) = pid.and_then(|p| host.read_opt(format!("/proc/{p}/environ"))) {
        return (coexist::env_value(&env, BANNED_VAR), None);
    }
    for file in CONFIG_FILES {
        if let Some(text) = host.read_opt(file) {
            return (coexist::env_value(&text, BANNED_VAR), Some(file));
        }
    }
    (None, None)
}

/// What irqbalance bans by its own rules (no ban given through the socket).
pub fn its_default(host: &Host, pid: Option<u32>) -> CpuSet {
    let (env, _) = configured_ban(host, pid);
    coexist::irqbalance_default_banned(
        env.as_deref(),
        &cpus::isolated(host),
        &cpus::nohz_full(host),
    )
}

fn refuse(ib: &Running) -> PartitionError {
    PartitionError::Irqbalance(format!(
        "irqbalance (pid {}) is running and would move IRQs back onto the RT CPUs at its next rebalance: pass --irqbalance ban (or irqbalance = \"ban\" in the config) to ban the RT CPUs through its socket for the partition's lifetime, or stop it (systemctl stop irqbalance), or set {BANNED_VAR} to the RT CPUs in its config and restart it",
        ib.pid
    ))
}

pub(super) struct Irqbalance;

impl Step<PartitionKnobs> for Irqbalance {
    fn name(&self) -> &'static str {
        self.id().name()
    }

    fn apply(&self, cx: &mut ApplyCx<'_>) -> Result<()> {
        let Some(ib) = running(cx.host) else {
            cx.unavailable("irqbalance is not running");
            return Ok(());
        };
        if cx.plan.irqbalance == IrqbalanceMode::Refuse {
            return Err(refuse(&ib));
        }
        let socket_err =
            |e: std::io::Error| PartitionError::Irqbalance(format!("{}: {e}", ib.socket.display()));
        let before = banned_now(cx.host, &ib).map_err(socket_err)?;
        let restore =
            coexist::irqbalance_restore_command(&before, &its_default(cx.host, Some(ib.pid)));
        cx.journal.record(&Record::Irqbalance {
            pid: ib.pid,
            start_time: ib.start_time,
            socket: ib.socket.clone(),
            restore: restore.clone(),
        })?;
        let ban = before.union(&cx.plan.rt);
        ask(
            cx.host,
            &ib.socket,
            &coexist::irqbalance_ban_command(Some(&ban)),
        )
        .map_err(socket_err)?;
        cx.say(format!(
            "irqbalance (pid {}) bans CPUs {ban} from its next rebalance (it banned {}); reset sends `{restore}`",
            ib.pid,
            if before.is_empty() { "none".into() } else { before.to_list() }
        ));
        Ok(())
    }

    /// A running irqbalance that was not told the ban (started or
    /// restarted since apply) moves IRQs back at its next rebalance. Under
    /// `irqbalance = "refuse"` that is said, not repaired.
    fn verify(&self, cx: &VerifyCx<'_>) -> Vec<Drift> {
        let Some(ib) = running(cx.host) else {
            return Vec::new();
        };
        let told = cx.records.iter().any(|r| {
            matches!(r, Record::Irqbalance { pid, start_time, .. }
                if *pid == ib.pid && *start_time == ib.start_time)
        });
        if told {
            return Vec::new();
        }
        let (what, fix) = match cx.applied.plan.irqbalance {
            IrqbalanceMode::Ban if cx.host.exists(&ib.socket) => (
                format!("irqbalance (pid {}) started without the ban of RT CPUs", ib.pid),
                Fix::Irqbalance {
                    pid: ib.pid,
                    start_time: ib.start_time,
                },
            ),
            _ => (
                format!(
                    "irqbalance (pid {}) runs and will move IRQs back onto the RT CPUs (irqbalance = \"refuse\", or no socket)",
                    ib.pid
                ),
                Fix::Report,
            ),
        };
        vec![Drift {
            knob: self.name(),
            what,
            fix,
        }]
    }

    fn undo(&self, cx: &mut UndoCx<'_>) -> Vec<String> {
        let mut problems = Vec::new();
        for r in cx.records.iter().rev() {
            let Record::Irqbalance {
                pid,
                start_time,
                socket,
                restore,
            } = r
            else {
                continue;
            };
            if !tasks::same_task(cx.host, *pid, *start_time) {
                cx.report.notes.push(format!(
                    "irqbalance (pid {pid}) is gone: a new one follows its own config, nothing to give back"
                ));
                continue;
            }
            match tell(cx.host, socket, restore) {
                Ok(_) => cx
                    .report
                    .notes
                    .push(format!("irqbalance (pid {pid}): sent `{restore}`")),
                Err(e) => {
                    problems.push(format!("irqbalance (pid {pid}) {}: {e}", socket.display()))
                }
            }
        }
        problems
    }
}

impl Knob for Irqbalance {
    fn id(&self) -> KnobId {
        KnobId::Irqbalance
    }

    fn explain(&self) -> &'static str {
        "irqbalance rewrites every interrupt's affinity at each rebalance (every 10 s), which \
         puts interrupts back on the RT CPUs the `irqs` knob cleared (McKenney §2.1: steer \
         interrupts away from the real-time CPU; DROPS §4.1: one owner per resource). Beside a \
         running irqbalance, apply refuses unless told `--irqbalance ban`: then it asks \
         irqbalance through its own socket (`settings cpus`, as irqbalance-ui does) to ban the \
         RT CPUs as well as those it banned already, so irqbalance keeps balancing the NRT CPUs. \
         The ban it had is journalled; reset gives it back (or its own rules, when the ban was \
         what they give). A restarted irqbalance forgets run-time bans: tuned's irqbalance \
         plugin restarts it."
    }

    fn preflight(&self, host: &Host, plan: &PartitionPlan) -> Result<()> {
        let Some(ib) = running(host) else {
            return Ok(());
        };
        match plan.irqbalance {
            IrqbalanceMode::Refuse => Err(refuse(&ib)),
            IrqbalanceMode::Ban if !host.exists(&ib.socket) => Err(PartitionError::Irqbalance(format!(
                "irqbalance (pid {}) has no socket {} (built without its UI socket, or older than 1.4): set {BANNED_VAR}={} in its config and restart it, or stop it",
                ib.pid,
                ib.socket.display(),
                plan.rt.to_list()
            ))),
            IrqbalanceMode::Ban => Ok(()),
        }
    }

    fn preview(&self, cx: &PreviewCx<'_>) -> KnobReport {
        let Some(ib) = running(cx.host) else {
            return cx.unavailable(self.id(), "irqbalance is not running");
        };
        let line = match cx.plan.irqbalance {
            IrqbalanceMode::Refuse => format!(
                "irqbalance (pid {}) runs: apply refuses without --irqbalance ban",
                ib.pid
            ),
            IrqbalanceMode::Ban => format!(
                "irqbalance (pid {}) will ban CPUs {} through {}",
                ib.pid,
                cx.plan.rt,
                ib.socket.display()
            ),
        };
        cx.report(self.id(), vec![line])
    }

    /// Journal what gives it back its own rules, then ban the RT CPUs beside
    /// those its rules ban (a fresh irqbalance has no run-time ban). The
    /// command is left in its socket: no waiting for its answer.
    fn repair(&self, cx: &mut RepairCx<'_>, drift: &[&Drift]) -> Result<usize> {
        let mut n = 0;
        for d in drift {
            let Fix::Irqbalance { pid, start_time } = d.fix else {
                continue;
            };
            let socket = PathBuf::from(format!("{SOCKET_DIR}/irqbalance{pid}.sock"));
            let own = its_default(cx.host, Some(pid));
            let restore = coexist::irqbalance_restore_command(&own, &own);
            cx.journal.record(&Record::Irqbalance {
                pid,
                start_time,
                socket: socket.clone(),
                restore,
            })?;
            let ban = own.union(&cx.applied.plan.rt);
            let told = tell(
                cx.host,
                &socket,
                &coexist::irqbalance_ban_command(Some(&ban)),
            );
            n += usize::from(told.is_ok());
        }
        Ok(n)
    }
}

#[cfg(test)]
#[path = "irqbalance_tests.rs"]
mod tests;
