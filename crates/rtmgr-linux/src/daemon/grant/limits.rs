//! A grant's process limits (DROPS "Taming Linux" §4: the resource manager
//! grants memory too; rtkit: a runaway RT thread gets SIGXCPU, then SIGKILL;
//! McKenney §4: locked memory for an RT task).
//!
//! Two steps over the grant's `limits` record: `RLIMITS` (RLIMIT_RTTIME for
//! SCHED_FIFO grants, RLIMIT_RTPRIO no higher than the granted priority) and
//! `LOCKED_MEMORY` (RLIMIT_MEMLOCK at least the policy's allowance; the
//! allowance itself, `resources.memlock_bytes`, is counted against
//! MemAvailable by the manager while the grant lives). Limits are per
//! process: the first grant of a process sets them, later ones carry the
//! same record, the last one to go restores them (`Cx::process_limits`).

use super::{drifted, note, Allowance, Drafting, GrantStep, GrantSteps, On};
use crate::daemon::grants_journal::{Grant, LimitChange};
use crate::drift::Drift;
use crate::host::{Host, HostError, Limit, LimitKind};
use crate::step::Step;
use crate::tasks;
use rtmgr_core::admission::{Demand, Kind};

/// The limits of some kinds.
pub struct LimitStep {
    name: &'static str,
    kinds: &'static [LimitKind],
}

pub const RLIMITS: LimitStep = LimitStep {
    name: "rlimits",
    kinds: &[LimitKind::RtTime, LimitKind::RtPrio],
};

pub const LOCKED_MEMORY: LimitStep = LimitStep {
    name: "locked memory",
    kinds: &[LimitKind::MemLock],
};

impl LimitStep {
    fn changes<'g>(&self, g: &'g Grant) -> impl DoubleEndedIterator<Item = &'g LimitChange> {
        let kinds = self.kinds;
        g.limits.iter().filter(move |c| kinds.contains(&c.kind))
    }
}

/// A limit of `pid`; None where reading it needs CAP_SYS_RESOURCE (another
/// user's process, a container's root without it): such limits are left as
/// they are, and the grant shows it.
fn get(host: &Host, pid: u32, kind: LimitKind) -> Result<Option<Limit>, HostError> {
    match host.get_limit(pid, kind) {
        Err(e) if e.errno() == Some(libc::EPERM) => Ok(None),
        r => r.map(Some),
    }
}

/// What a grant makes of one limit. `enforce` (unprivileged clients): hard
/// limits too, so the client cannot raise them back; for root only the soft
/// RLIMIT_RTTIME (root may raise its limits anyway, and a lowered hard limit
/// may not come back without CAP_SYS_RESOURCE).
fn change(kind: LimitKind, old: Limit, d: &Demand, a: &Allowance) -> Option<LimitChange> {
    let min = |x: Option<u64>, y: u64| Some(x.map_or(y, |x| x.min(y)));
    let new = match (kind, d.kind) {
        (LimitKind::RtTime, Kind::Soft { .. }) => {
            let hard = if a.enforce {
                min(old.hard, a.rttime_us.saturating_mul(2))
            } else {
                old.hard
            };
            Limit {
                soft: min(old.soft.min(hard), a.rttime_us),
                hard,
            }
        }
        (LimitKind::RtPrio, Kind::Soft { priority }) if a.enforce => {
            let p = u64::from(priority);
            Limit {
                soft: min(old.soft, p),
                hard: min(old.hard, p),
            }
        }
        (LimitKind::MemLock, _) => {
            let max = |x: Option<u64>| x.map(|x| x.max(a.memlock_bytes));
            Limit {
                soft: max(old.soft),
                hard: max(old.hard),
            }
        }
        _ => return None,
    };
    (new != old).then_some(LimitChange { kind, old, new })
}

/// Raising a hard limit needs CAP_SYS_RESOURCE: where the kernel refuses,
/// the soft limit alone changes.
fn soft_only(c: &LimitChange) -> Limit {
    Limit {
        soft: match (c.new.soft, c.old.hard) {
            (Some(s), Some(h)) => Some(s.min(h)),
            (s, _) => s,
        },
        hard: c.old.hard,
    }
}

/// CAP_SYS_RESOURCE (capability 24) in the daemon's effective set, from its
/// /proc/self/status (unreadable: assumed, as for root).
fn can_raise_hard_limits(host: &Host) -> bool {
    const CAP_SYS_RESOURCE: u32 = 24;
    host.read_opt("/proc/self/status")
        .and_then(|s| {
            let hex = s.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
            u64::from_str_radix(hex.trim(), 16).ok()
        })
        .is_none_or(|bits| bits & (1 << CAP_SYS_RESOURCE) != 0)
}

fn set_limit(host: &Host, pid: u32, c: &LimitChange) -> Result<(), HostError> {
    match host.set_limit(pid, c.kind, c.new) {
        Err(e) if e.errno() == Some(libc::EPERM) => {
            tracing::info!(
                "process {pid} {:?}: the kernel refused to change the hard limit (no CAP_SYS_RESOURCE); soft limit set",
                c.kind
            );
            host.set_limit(pid, c.kind, soft_only(c))
        }
        r => r,
    }
}

/// Back to the old limit; without CAP_SYS_RESOURCE a lowered hard limit stays lowered.
fn restore_limit(host: &Host, pid: u32, c: &LimitChange) -> Result<(), HostError> {
    match host.set_limit(pid, c.kind, c.old) {
        Err(e) if e.errno() == Some(libc::EPERM) => host.set_limit(
            pid,
            c.kind,
            Limit {
                soft: c.old.soft.min(c.new.hard).or(c.new.hard),
                hard: c.new.hard,
            },
        ),
        r => r,
    }
}

impl Step<GrantSteps> for LimitStep {
    fn name(&self) -> &'static str {
        self.name
    }

    fn snapshot(&self, at: &mut Drafting<'_>) -> Result<(), HostError> {
        let (cx, draft, g) = (at.cx, at.draft, &mut *at.g);
        if !draft.fresh_limits {
            return Ok(());
        }
        for &kind in self.kinds {
            if let Some(old) = get(cx.host, g.pid, kind)? {
                g.limits
                    .extend(change(kind, old, &g.demand, &draft.allowance));
            }
        }
        Ok(())
    }

    fn apply(&self, at: &mut On<'_>) -> Result<(), HostError> {
        let On { cx, g } = *at;
        if !cx.process_limits {
            return Ok(());
        }
        self.changes(g)
            .try_for_each(|c| set_limit(cx.host, g.pid, c))
    }

    /// The limit as set; without CAP_SYS_RESOURCE, as far as the kernel
    /// lets it be set (`soft_only`: a raise of the hard limit is refused
    /// every time, so repairing it would be in vain).
    fn verify(&self, at: &On<'_>) -> Vec<Drift> {
        let On { cx, g } = *at;
        if !tasks::same_task(cx.host, g.pid, g.pid_start) {
            return Vec::new();
        }
        let soft_only_too = !can_raise_hard_limits(cx.host);
        let as_granted =
            |c: &LimitChange, now: Limit| now == c.new || (soft_only_too && now == soft_only(c));
        self.changes(g)
            .filter(|c| {
                get(cx.host, g.pid, c.kind)
                    .ok()
                    .flatten()
                    .is_some_and(|now| !as_granted(c, now))
            })
            .map(|c| drifted(self, format!("process {} {:?}", g.pid, c.kind)))
            .collect()
    }

    fn undo(&self, at: &mut On<'_>) -> Vec<String> {
        let On { cx, g } = *at;
        let mut problems = Vec::new();
        if !cx.process_limits || !tasks::same_task(cx.host, g.pid, g.pid_start) {
            return problems;
        }
        for c in self.changes(g).rev() {
            let r = restore_limit(cx.host, g.pid, c);
            note(&mut problems, format!("process {} {:?}", g.pid, c.kind), r);
        }
        problems
    }
}

impl GrantStep for LimitStep {}
