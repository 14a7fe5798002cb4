//! A grant's scheduling attributes (DROPS "Taming Linux" §4: the resource
//! manager grants CPU time; budget-based RTAI §3.3: hard reservations as
//! SCHED_DEADLINE, soft ones as SCHED_FIFO; rtkit: reset-on-fork).

use super::{drifted, live, note, placement, Cx, Drafting, GrantStep, GrantSteps, On};
use crate::daemon::grants_journal::{Grant, ThreadBefore};
use crate::drift::Drift;
use crate::host::{Host, HostError};
use crate::step::Step;
use crate::tasks;
use rtmgr_core::admission::{Demand, Kind};
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

/// The lowest SCHED_FIFO priority: a hard grant's thread runs under it
/// while the kernel refuses it SCHED_DEADLINE where it waits (`pending.rs`).
/// Lowest, so that every soft grant (rt1+, priority ≥ 1 by the class) and
/// the kernel's own RT threads keep their order above it; on its RT CPU any
/// SCHED_DEADLINE task preempts it whatever its priority.
pub const PLACEHOLDER_PRIORITY: u32 = 1;

/// What a hard grant's thread runs under until it first runs on its RT CPU
/// (docs/protocol.md "When the policy takes effect").
pub fn placeholder_attr() -> SchedAttr {
    SchedAttr {
        policy: SCHED_FIFO,
        flags: SCHED_FLAG_RESET_ON_FORK,
        priority: PLACEHOLDER_PRIORITY,
        ..SchedAttr::default()
    }
}

/// Is this thread of a hard grant at the placeholder (pending)?
pub fn is_placeholder(now: &SchedAttr) -> bool {
    matches(now, &placeholder_attr())
}

/// Is this thread of a hard grant held (`zero_lag.rs`): at its own policy
/// while its last server's 0-lag time, in the grant's record, is ahead?
pub fn is_held(t: &ThreadBefore, now: &SchedAttr, now_ns: u64) -> bool {
    t.hold_until_ns.is_some_and(|z| z > now_ns) && matches(now, &t.attr)
}

/// Does a thread's policy still match the grant's (flags and nice aside)?
fn matches(now: &SchedAttr, want: &SchedAttr) -> bool {
    now.policy == want.policy
        && now.priority == want.priority
        && (want.policy != SCHED_DEADLINE
            || (now.runtime, now.deadline, now.period)
                == (want.runtime, want.deadline, want.period))
}

/// Each thread at the grant's policy: the last step of a grant, the first
/// to go back (`is_policy`).
pub struct SchedAttrs;

impl Step<GrantSteps> for SchedAttrs {
    fn name(&self) -> &'static str {
        "scheduling attributes"
    }

    fn snapshot(&self, at: &mut Drafting<'_>) -> Result<(), HostError> {
        let (cx, draft, g) = (at.cx, at.draft, &mut *at.g);
        for t in g.threads.iter_mut().filter(|t| draft.is_fresh(t)) {
            t.attr = cx.host.get_attr(t.tid)?;
        }
        Ok(())
    }

    /// Threads at the policy already (set before their move, by
    /// `DeadlineWhereItWaits`) are left as they are; held ones (`Cx::held`:
    /// they overran their last server) keep their own policy, as after
    /// their release, until that server's 0-lag time. A hard grant's thread
    /// the kernel refuses SCHED_DEADLINE because it still waits on another
    /// CPU's run queue gets the placeholder, SCHED_FIFO 1, instead: the
    /// daemon sets SCHED_DEADLINE once it is seen on its RT CPU (`pending.rs`).
    fn apply(&self, at: &mut On<'_>) -> Result<(), HostError> {
        let On { cx, g } = *at;
        let attr = granted_attr(&g.demand);
        for t in &g.threads {
            if has(cx.host, t.tid, &attr) {
                continue;
            }
            if attr.policy == SCHED_DEADLINE && cx.held.contains(&t.tid) {
                tracing::info!(
                    "reservation {}: thread {} spent its budget under its last SCHED_DEADLINE grant: its own policy until that server's 0-lag time, then SCHED_DEADLINE",
                    g.id,
                    t.tid
                );
                if !has(cx.host, t.tid, &t.attr) {
                    cx.host.set_attr(t.tid, &t.attr)?;
                }
                continue;
            }
            match cx.host.set_attr(t.tid, &attr) {
                Err(e) if refused_where_it_waits(cx, g, t.tid, &attr, &e) => {
                    tracing::info!(
                        "reservation {}: thread {} waits on CPU {:?}, where the kernel refuses SCHED_DEADLINE ({e}): SCHED_FIFO {PLACEHOLDER_PRIORITY} until the kernel admits it on CPU {}",
                        g.id,
                        t.tid,
                        tasks::run_queue_cpu(cx.host, t.tid),
                        g.cpu
                    );
                    cx.host.set_attr(t.tid, &placeholder_attr())?;
                }
                r => r.map_err(|e| explain(cx.host, t.tid, g.cpu, &attr, e))?,
            }
        }
        Ok(())
    }

    /// A hard grant's thread at the placeholder, or held at its own policy
    /// until its last server's 0-lag time, is pending, not drifted
    /// (`pending.rs` owns it).
    fn verify(&self, at: &On<'_>) -> Vec<Drift> {
        let On { cx, g } = *at;
        let want = granted_attr(&g.demand);
        let now = rtmgr_sys::time::mono_ns();
        let ok = |t: &ThreadBefore, a: &SchedAttr| {
            matches(a, &want) || (g.demand.is_hard() && (is_placeholder(a) || is_held(t, a, now)))
        };
        live(cx.host, g)
            .filter(|t| cx.host.get_attr(t.tid).is_ok_and(|a| !ok(t, &a)))
            .map(|t| drifted(self, format!("thread {} policy", t.tid)))
            .collect()
    }

    fn undo(&self, at: &mut On<'_>) -> Vec<String> {
        let On { cx, g } = *at;
        let mut problems = Vec::new();
        for t in live(cx.host, g) {
            let r = cx.host.set_attr(t.tid, &t.attr);
            note(&mut problems, format!("thread {} policy", t.tid), r);
        }
        problems
    }
}

impl GrantStep for SchedAttrs {
    fn is_policy(&self) -> bool {
        true
    }
}

/// Is the thread at `want` already?
fn has(host: &Host, tid: u32, want: &SchedAttr) -> bool {
    host.get_attr(tid).is_ok_and(|a| matches(&a, want))
}

/// Did the kernel refuse SCHED_DEADLINE because of where the thread waits,
/// so that it waits at SCHED_FIFO 1 (`pending.rs`)? EPERM (the root domain
/// of the run queue it was on at the call): on cgroup v1, where its RT CPU
/// is a root domain of its own (the thread may have moved to that CPU's
/// run queue since the call: the look that finds it there sets it); not
/// on v2, where rtmgr makes no per-CPU root domain and the refusal is
/// explained instead (`explain`). EBUSY (that root domain's bandwidth): on
/// another CPU's run queue, or anywhere when the grant's CPU's books are
/// known to differ from admission's (`Cx::busy_pending`).
fn refused_where_it_waits(cx: &Cx, g: &Grant, tid: u32, attr: &SchedAttr, e: &HostError) -> bool {
    let elsewhere = || tasks::run_queue_cpu(cx.host, tid).is_some_and(|c| c != g.cpu);
    attr.policy == SCHED_DEADLINE
        && match e.errno() {
            Some(libc::EPERM) => placement::target(cx.layout, g).is_some(),
            Some(libc::EBUSY) => cx.busy_pending || elsewhere(),
            _ => false,
        }
}

/// The kernel admits a SCHED_DEADLINE thread only if its affinity covers
/// the root domain of the run queue it is on now (`__sched_setscheduler`:
/// `cpumask_subset(rq->rd->span, p->cpus_ptr)`, else EPERM); say so, with
/// the CPU it waits on, instead of a bare errno.
fn explain(host: &Host, tid: u32, cpu: u32, attr: &SchedAttr, e: HostError) -> HostError {
    if e.errno() != Some(libc::EPERM) || attr.policy != SCHED_DEADLINE {
        return e;
    }
    let on =
        tasks::run_queue_cpu(host, tid).map_or("an unknown CPU".into(), |c| format!("CPU {c}"));
    HostError::Io {
        op: "sched_setattr",
        path: format!(
            "thread {tid} (SCHED_DEADLINE: the thread waits on {on}'s run queue, and the kernel admits it only with an affinity covering that CPU's root domain, which it had neither before nor after its move to CPU {cpu}: pinned by its program to fewer CPUs than its cpuset, refused there, or on cgroup v2, where rtmgr makes no per-CPU root domains; see docs/protocol.md \"When the policy takes effect\")"
        ),
        source: std::io::Error::from_raw_os_error(libc::EPERM),
    }
}

/// A hard grant on cgroup v1, before the placement steps: each thread that
/// waits asleep or stopped on another CPU's run queue than its RT CPU's
/// (not a runnable one: the move migrates it) gets SCHED_DEADLINE where it
/// is, in its own cpuset. The kernel books its bandwidth in that root
/// domain, and the cpuset move that follows carries it over to the RT
/// CPU's (`cpuset_can_attach` books it there, `set_cpus_allowed_dl` frees
/// it where it was): the admitted bandwidth ends where rtmgr's admission
/// put it. A thread on its RT CPU's run queue, or runnable, gets its
/// policy after the move (`SchedAttrs`). Best
/// effort: a thread the kernel refuses here (its affinity narrower than
/// its root domain, or EBUSY in that root domain) gets its policy after
/// the move, or SCHED_FIFO 1 until it runs on its RT CPU (`pending.rs`).
/// Skipped when the RT CPU's deadline books differ from admission's
/// (`Cx::busy_pending`: its cpuset move could be refused with EBUSY).
/// Policy step: it goes back with the policies (`is_policy`), from the
/// same record as `SchedAttrs`.
pub struct DeadlineWhereItWaits;

impl Step<GrantSteps> for DeadlineWhereItWaits {
    fn name(&self) -> &'static str {
        "deadline before the move"
    }

    fn apply(&self, at: &mut On<'_>) -> Result<(), HostError> {
        let On { cx, g } = *at;
        if !g.demand.is_hard() || placement::target(cx.layout, g).is_none() || cx.busy_pending {
            return Ok(());
        }
        let attr = granted_attr(&g.demand);
        for t in &g.threads {
            match tasks::run_queue(cx.host, t.tid) {
                None => return Err(super::gone(t.tid)),
                Some((c, _)) if c == g.cpu => continue,
                // Runnable: the cpuset move takes it to its RT CPU's run
                // queue at once, and `SchedAttrs` sets the policy there.
                // Made SCHED_DEADLINE here, it would run as a deadline task
                // on the NRT CPU until the move, ahead of everything there
                // (the grant worker doing the move included), past its
                // budget until the next tick: a spinning client held the
                // worker off for 3.3 ms per grant (tracefs, 16 clients).
                Some((_, 'R')) => continue,
                Some(_) if has(cx.host, t.tid, &attr) || cx.held.contains(&t.tid) => continue,
                Some(_) => {}
            }
            // Taken over from a grant being revoked without having run
            // since: pinned to its RT CPU but waiting on another, where the
            // kernel admits it only with an affinity covering that CPU's
            // root domain. Back to its own cpuset and affinity first; the
            // cpuset step moves it again.
            if !placement::found_elsewhere(cx, g, t) && placement::in_target(cx, g, t.tid) {
                let mut problems = Vec::new();
                placement::put_back(cx, t, &mut problems);
                if !problems.is_empty() {
                    tracing::debug!("reservation {}: {problems:?}", g.id);
                }
            }
            match cx.host.set_attr(t.tid, &attr) {
                Err(e) if e.is_gone() => return Err(e),
                // After the move, then (`SchedAttrs`).
                Err(e) => tracing::info!(
                    "reservation {}: thread {} waiting on CPU {:?}: SCHED_DEADLINE before the move refused ({e}); after the move, then",
                    g.id,
                    t.tid,
                    tasks::run_queue_cpu(cx.host, t.tid)
                ),
                Ok(()) => {}
            }
        }
        Ok(())
    }

    /// `SchedAttrs` verifies the policy.
    fn verify(&self, _at: &On<'_>) -> Vec<Drift> {
        Vec::new()
    }

    /// A soft grant's apply did nothing here, nor does its undo (the
    /// policy goes back with `SchedAttrs`: one sched_setattr per thread,
    /// not two).
    fn undo(&self, at: &mut On<'_>) -> Vec<String> {
        if !at.g.demand.is_hard() {
            return Vec::new();
        }
        SchedAttrs.undo(at)
    }
}

impl GrantStep for DeadlineWhereItWaits {
    fn is_policy(&self) -> bool {
        true
    }

    /// A release or revocation undoes `SchedAttrs` too, which sets the
    /// same old policy: one sched_setattr per thread, not two. Alone (an
    /// apply stopped before `SchedAttrs`), this undo sets it.
    fn undone_with(&self) -> Option<&'static str> {
        Some(SchedAttrs.name())
    }
}
