//! What a grant does to the machine and how it is undone (budget-based RTAI
//! §3.3: hard reservations as SCHED_DEADLINE, soft ones as SCHED_FIFO with
//! the rtmgr-rt soft budget; ARTiS §2.4: an RT task is bound to one RT CPU;
//! rtkit: RLIMIT_RTTIME and reset-on-fork on every grant). The journal record
//! (`journal::Grant`) is written before `apply`; `revoke` undoes it from the
//! record alone, so it also works for a daemon that was `kill -9`ed.

use super::journal::{Grant, LimitChange, SavedAttr, ThreadBefore};
use crate::cgroup::{self, Layout};
use crate::host::{Host, HostError, Limit, LimitKind};
use crate::tasks;
use rtmgr_core::admission::{Demand, Kind};
use rtmgr_core::CpuSet;
use rtmgr_sys::sched::{SchedAttr, SCHED_DEADLINE, SCHED_FIFO, SCHED_FLAG_RESET_ON_FORK};

/// The scheduling attributes a grant gives each of its threads.
pub fn granted_attr(d: &Demand) -> SchedAttr {
    match d.kind {
        Kind::Hard => SchedAttr {
            policy: SCHED_DEADLINE,
            flags: SCHED_FLAG_RESET_ON_FORK,
            runtime: d.budget_ns,
            deadline: d.deadline_ns,
            period: d.period_ns,
            ..SchedAttr::default()
        },
        Kind::Soft { priority } => SchedAttr {
            policy: SCHED_FIFO,
            flags: SCHED_FLAG_RESET_ON_FORK,
            priority: u32::from(priority),
            ..SchedAttr::default()
        },
    }
}

/// A thread as it is now (journalled before it changes).
pub fn snapshot_thread(
    host: &Host,
    layout: &Layout,
    pid: u32,
    tid: u32,
) -> Result<ThreadBefore, HostError> {
    let info = tasks::info(host, pid, tid).ok_or_else(|| gone(tid))?;
    Ok(ThreadBefore {
        tid,
        start_time: info.start_time,
        attr: SavedAttr::from(host.get_attr(tid)?),
        affinity: host.get_affinity(tid)?,
        cgroup: cgroup::task_cgroup(host, layout, tid),
    })
}

fn gone(tid: u32) -> HostError {
    HostError::Io {
        op: "find",
        path: format!("task {tid}"),
        source: std::io::Error::from_raw_os_error(libc::ESRCH),
    }
}

/// The limits a grant sets: RLIMIT_RTTIME for SCHED_FIFO grants (rtkit: a
/// runaway RT thread gets SIGXCPU, then SIGKILL), RLIMIT_RTPRIO no higher
/// than the granted priority, RLIMIT_MEMLOCK at least the policy's allowance.
/// `enforce` (unprivileged clients): hard limits too, so the client cannot
/// raise them back; for root only the soft RLIMIT_RTTIME (root may raise its
/// limits anyway, and a lowered hard limit may not come back without
/// CAP_SYS_RESOURCE).
pub fn limit_changes(
    host: &Host,
    pid: u32,
    d: &Demand,
    rttime_us: u64,
    memlock_bytes: u64,
    enforce: bool,
) -> Result<Vec<LimitChange>, HostError> {
    let mut out = Vec::new();
    // prlimit on another user's process needs CAP_SYS_RESOURCE (a
    // container's root may lack it): such limits are left as they are, and
    // the grant shows it (its rttime_us / memlock_bytes are 0).
    let get = |kind| match host.get_limit(pid, kind) {
        Err(e) if e.errno() == Some(libc::EPERM) => Ok(None),
        r => r.map(Some),
    };
    let min = |a: Option<u64>, b: u64| Some(a.map_or(b, |a| a.min(b)));
    if let Kind::Soft { priority } = d.kind {
        if let Some(old) = get(LimitKind::RtTime)? {
            let hard = if enforce {
                min(old.hard, rttime_us.saturating_mul(2))
            } else {
                old.hard
            };
            let new = Limit {
                soft: min(old.soft.min(hard), rttime_us),
                hard,
            };
            out.push(LimitChange {
                kind: LimitKind::RtTime,
                old,
                new,
            });
        }
        if let Some(old) = get(LimitKind::RtPrio)?.filter(|_| enforce) {
            let p = u64::from(priority);
            let new = Limit {
                soft: min(old.soft, p),
                hard: min(old.hard, p),
            };
            out.push(LimitChange {
                kind: LimitKind::RtPrio,
                old,
                new,
            });
        }
    }
    if let Some(old) = get(LimitKind::MemLock)? {
        let max = |a: Option<u64>| a.map(|a| a.max(memlock_bytes));
        let new = Limit {
            soft: max(old.soft),
            hard: max(old.hard),
        };
        out.push(LimitChange {
            kind: LimitKind::MemLock,
            old,
            new,
        });
    }
    out.retain(|c| c.old != c.new);
    Ok(out)
}

/// Set a limit; raising a hard limit needs CAP_SYS_RESOURCE, so a refused
/// raise falls back to the soft limit alone (noted, not an error).
fn set_limit(
    host: &Host,
    pid: u32,
    c: &LimitChange,
    notes: &mut Vec<String>,
) -> Result<(), HostError> {
    match host.set_limit(pid, c.kind, c.new) {
        Err(e) if e.errno() == Some(libc::EPERM) => {
            let soft_only = Limit {
                soft: match (c.new.soft, c.old.hard) {
                    (Some(s), Some(h)) => Some(s.min(h)),
                    (s, _) => s,
                },
                hard: c.old.hard,
            };
            host.set_limit(pid, c.kind, soft_only)?;
            notes.push(format!(
                "{:?}: the kernel refused to change the hard limit (no CAP_SYS_RESOURCE); soft limit set",
                c.kind
            ));
            Ok(())
        }
        r => r,
    }
}

/// Put a grant into effect: each thread into the CPU's cpuset (v1), pinned,
/// at its policy; the process's limits; the IRQ. The record must be
/// journalled first. On error nothing of it is left (revoked) and the error
/// says which step failed.
pub fn apply(
    host: &Host,
    layout: &Layout,
    g: &Grant,
    set_limits: bool,
) -> Result<Vec<String>, HostError> {
    let mut notes = Vec::new();
    let r = (|| {
        let attr = granted_attr(&g.demand);
        let one = CpuSet::single(g.cpu);
        for t in &g.threads {
            if let (Layout::V1(_), Some(dir)) = (layout, &g.cgroup) {
                cgroup::attach(host, layout, dir, t.tid)?;
            }
            host.set_affinity(t.tid, &one)?;
            set_attr_when_moved(host, t.tid, &attr)?;
        }
        if set_limits {
            for c in &g.limits {
                set_limit(host, g.pid, c, &mut notes)?;
            }
        }
        if let Some((irq, _)) = g.irq {
            crate::irq::set_affinity(host, irq, &one)?;
        }
        let tids: Vec<u32> = g.threads.iter().map(|t| t.tid).collect();
        crate::resources::grant::apply(host, &g.resources, &tids)?;
        Ok(())
    })();
    match r {
        Ok(()) => Ok(notes),
        Err(e) => {
            revoke(host, layout, g, set_limits);
            Err(e)
        }
    }
}

/// The kernel checks a SCHED_DEADLINE request against the root domain of
/// the runqueue the thread is on now; a thread asleep since its affinity
/// changed is still on its old CPU (it moves when it next runs), and the
/// kernel answers EPERM. The client library keeps its thread runnable while
/// it waits for the answer, so it moves within a scheduler tick: retry for
/// up to 200 ms.
fn set_attr_when_moved(host: &Host, tid: u32, attr: &SchedAttr) -> Result<(), HostError> {
    let mut tries = 0;
    loop {
        match host.set_attr(tid, attr) {
            Err(e)
                if e.errno() == Some(libc::EPERM)
                    && attr.policy == SCHED_DEADLINE
                    && tries < 400 =>
            {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_micros(500));
            }
            r => return r,
        }
    }
}

/// Undo a grant from its record: threads that are still the same threads
/// get their policy, cpuset and affinity back; the process (if it is still
/// the same) its limits; the IRQ its mask. Returns what could not be undone.
pub fn revoke(host: &Host, layout: &Layout, g: &Grant, restore_limits: bool) -> Vec<String> {
    let mut problems = revoke_policy(host, g);
    problems.extend(revoke_placement(host, layout, g, restore_limits));
    problems
}

fn note(problems: &mut Vec<String>, what: String, r: Result<(), HostError>) {
    if let Err(e) = r {
        if !e.is_gone() {
            problems.push(format!("{what}: {e}"));
        }
    }
}

/// First half of a revocation: the threads' old policies. A thread leaving
/// SCHED_DEADLINE keeps its bandwidth in its CPU's root domain until its
/// 0-lag time (at most a period later), and the kernel then returns it to
/// the root domain of the CPU the thread is on: so a live deadline thread
/// must stay on its RT CPU for a period before `revoke_placement` moves it.
pub fn revoke_policy(host: &Host, g: &Grant) -> Vec<String> {
    let mut problems = Vec::new();
    for t in &g.threads {
        if tasks::same_task(host, t.tid, t.start_time) {
            let r = host.set_attr(t.tid, &SchedAttr::from(t.attr));
            note(&mut problems, format!("thread {} policy", t.tid), r);
        }
    }
    problems
}

/// Does this grant have to wait a period between its two halves?
pub fn must_wait(host: &Host, g: &Grant) -> bool {
    g.demand.is_hard()
        && g.threads
            .iter()
            .any(|t| tasks::same_task(host, t.tid, t.start_time))
}

/// Second half: cpuset, affinity, limits, IRQ mask.
pub fn revoke_placement(
    host: &Host,
    layout: &Layout,
    g: &Grant,
    restore_limits: bool,
) -> Vec<String> {
    let threads: Vec<(u32, u64)> = g.threads.iter().map(|t| (t.tid, t.start_time)).collect();
    let mut problems = crate::resources::grant::revoke(host, &g.resources, &threads);
    for t in &g.threads {
        if !tasks::same_task(host, t.tid, t.start_time) {
            continue;
        }
        if let (Layout::V1(_), Some(_)) = (layout, &g.cgroup) {
            let back = t
                .cgroup
                .as_deref()
                .map(|rel| layout.dir(rel))
                .filter(|d| host.exists(d))
                .unwrap_or_else(|| layout.mount().to_path_buf());
            let r = cgroup::attach(host, layout, &back, t.tid);
            note(&mut problems, format!("thread {} cpuset", t.tid), r);
        }
        let r = host.set_affinity(t.tid, &t.affinity);
        note(&mut problems, format!("thread {} affinity", t.tid), r);
    }
    if restore_limits && tasks::same_task(host, g.pid, g.pid_start) {
        for c in g.limits.iter().rev() {
            let r = match host.set_limit(g.pid, c.kind, c.old) {
                // Without CAP_SYS_RESOURCE a lowered hard limit stays lowered.
                Err(e) if e.errno() == Some(libc::EPERM) => host.set_limit(
                    g.pid,
                    c.kind,
                    Limit {
                        soft: c.old.soft.min(c.new.hard).or(c.new.hard),
                        hard: c.new.hard,
                    },
                ),
                r => r,
            };
            note(&mut problems, format!("process {} {:?}", g.pid, c.kind), r);
        }
    }
    if let Some((irq, old)) = &g.irq {
        if host.exists(format!("/proc/irq/{irq}")) {
            let r = crate::irq::write_raw_mask(host, *irq, old);
            note(&mut problems, format!("IRQ {irq} mask"), r);
        }
    }
    problems
}

/// Is the grant still as applied? Names what drifted.
pub fn drift(host: &Host, g: &Grant) -> Vec<String> {
    let mut out = Vec::new();
    let want = granted_attr(&g.demand);
    for t in &g.threads {
        if !tasks::same_task(host, t.tid, t.start_time) {
            continue;
        }
        match host.get_attr(t.tid) {
            Ok(a) if a.policy != want.policy || a.priority != want.priority => {
                out.push(format!("thread {} policy", t.tid))
            }
            _ => {}
        }
        match host.get_affinity(t.tid) {
            Ok(a) if a != CpuSet::single(g.cpu) => out.push(format!("thread {} affinity", t.tid)),
            _ => {}
        }
    }
    if let Some((irq, _)) = g.irq {
        match crate::irq::affinity(host, irq) {
            Ok(a) if a != CpuSet::single(g.cpu) => out.push(format!("IRQ {irq}")),
            _ => {}
        }
    }
    out
}
