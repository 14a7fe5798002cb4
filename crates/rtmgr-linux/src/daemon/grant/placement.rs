//! A grant's placement: its threads in the RT CPU's cpuset (cgroup v1) and
//! pinned to that CPU (DROPS "Taming Linux" §4: the resource manager gives a
//! task its CPU; ARTiS §2.4: an RT task is bound to one RT CPU), and given
//! back with no CPU mask of rtmgr's left behind (`mask_back`).

use super::{drifted, live, note, Cx, Drafting, GrantStep, GrantSteps, On};
use crate::cgroup::{self, Layout};
use crate::daemon::grants_journal::{Grant, ThreadBefore};
use crate::drift::Drift;
use crate::host::HostError;
use crate::step::Step;
use rtmgr_core::CpuSet;
use std::path::Path;

/// Cpuset membership: on cgroup v1 each thread joins the RT CPU's cpuset
/// (on v2 a cpuset holds processes, not threads, and affinity alone pins).
pub struct Cpuset;

/// The cpuset a grant's threads join, if this step moves them.
pub(super) fn target<'g>(layout: &Layout, g: &'g Grant) -> Option<&'g Path> {
    match layout {
        Layout::V1(_) => g.cgroup.as_deref(),
        Layout::V2(_) => None,
    }
}

impl Step<GrantSteps> for Cpuset {
    fn name(&self) -> &'static str {
        "cpuset"
    }

    fn snapshot(&self, at: &mut Drafting<'_>) -> Result<(), HostError> {
        let (cx, draft, g) = (at.cx, at.draft, &mut *at.g);
        for t in g.threads.iter_mut().filter(|t| draft.is_fresh(t)) {
            t.cgroup = cgroup::task_cgroup(cx.host, cx.layout, t.tid);
        }
        Ok(())
    }

    fn apply(&self, at: &mut On<'_>) -> Result<(), HostError> {
        let On { cx, g } = *at;
        let Some(dir) = target(cx.layout, g) else {
            return Ok(());
        };
        for t in &g.threads {
            // A thread taken over from a grant still being revoked is there
            // already: an attach costs the kernel's cgroup locks (up to a
            // grace period, milliseconds) even when it moves nothing.
            if !found_elsewhere(cx, g, t) && in_target(cx, g, t.tid) {
                continue;
            }
            cgroup::attach(cx.host, cx.layout, dir, t.tid)?;
        }
        Ok(())
    }

    fn verify(&self, at: &On<'_>) -> Vec<Drift> {
        let On { cx, g } = *at;
        let Some(dir) = target(cx.layout, g) else {
            return Vec::new();
        };
        let want = cgroup::rel_path(cx.layout, dir);
        live(cx.host, g)
            .filter(|t| {
                cgroup::task_cgroup(cx.host, cx.layout, t.tid).is_some_and(|now| now != want)
            })
            .map(|t| drifted(self, format!("thread {} cpuset", t.tid)))
            .collect()
    }

    /// Back into its old cpuset (the mount when that is gone); the kernel
    /// resets a thread's affinity to its new cpuset's CPUs, so its own
    /// affinity goes back after the move.
    fn undo(&self, at: &mut On<'_>) -> Vec<String> {
        let On { cx, g } = *at;
        let mut problems = Vec::new();
        if target(cx.layout, g).is_none() {
            return problems;
        }
        for t in live(cx.host, g) {
            put_back(cx, t, &mut problems);
        }
        problems
    }
}

impl GrantStep for Cpuset {}

/// One thread back into its old cpuset (the mount when that is gone), then
/// its own affinity.
pub(super) fn put_back(cx: &Cx, t: &ThreadBefore, problems: &mut Vec<String>) {
    let back = t
        .cgroup
        .as_deref()
        .map(|rel| cx.layout.dir(rel))
        .filter(|d| cx.host.exists(d))
        .unwrap_or_else(|| cx.layout.mount().to_path_buf());
    let r = cgroup::attach(cx.host, cx.layout, &back, t.tid);
    note(problems, format!("thread {} cpuset", t.tid), r);
    let r = cx.host.set_affinity(t.tid, &mask_back(cx, t));
    note(problems, format!("thread {} affinity", t.tid), r);
}

/// Did this grant's snapshot just find the thread outside its cpuset?
/// Then, until its cpuset step moves it, it is not read again: only that
/// step moves a thread in.
pub(super) fn found_elsewhere(cx: &Cx, g: &Grant, t: &ThreadBefore) -> bool {
    target(cx.layout, g).is_some_and(|dir| {
        cx.fresh.contains(&t.tid)
            && t.cgroup.as_deref() != Some(cgroup::rel_path(cx.layout, dir).as_str())
    })
}

/// Is the thread in the grant's cpuset already (a thread taken over from a
/// grant still being revoked)?
pub(super) fn in_target(cx: &Cx, g: &Grant, tid: u32) -> bool {
    target(cx.layout, g).is_some_and(|dir| {
        cgroup::task_cgroup(cx.host, cx.layout, tid) == Some(cgroup::rel_path(cx.layout, dir))
    })
}

/// Affinity: each thread pinned to the grant's RT CPU.
pub struct Affinity;

impl Step<GrantSteps> for Affinity {
    fn name(&self) -> &'static str {
        "affinity"
    }

    fn snapshot(&self, at: &mut Drafting<'_>) -> Result<(), HostError> {
        let (cx, draft, g) = (at.cx, at.draft, &mut *at.g);
        for t in g.threads.iter_mut().filter(|t| draft.is_fresh(t)) {
            t.affinity = cx.host.get_affinity(t.tid)?;
            // Its cgroup as `Cpuset` (the step before) read it, not read again.
            t.cpuset_cpus = match &t.cgroup {
                Some(rel) => cgroup::cpuset_cpus_of(cx.host, cx.layout, rel),
                None => cgroup::task_cpuset_cpus(cx.host, cx.layout, t.tid),
            };
        }
        Ok(())
    }

    fn apply(&self, at: &mut On<'_>) -> Result<(), HostError> {
        let On { cx, g } = *at;
        let one = CpuSet::single(g.cpu);
        for t in &g.threads {
            // Pinned by the cpuset move already: setting it again would be
            // refused (EBUSY) for a deadline thread still waiting on an NRT
            // CPU's run queue (`sched::DeadlineWhereItWaits`).
            if cx.host.get_affinity(t.tid).is_ok_and(|a| a == one) {
                continue;
            }
            cx.host.set_affinity(t.tid, &one)?;
        }
        Ok(())
    }

    fn verify(&self, at: &On<'_>) -> Vec<Drift> {
        let On { cx, g } = *at;
        let one = CpuSet::single(g.cpu);
        live(cx.host, g)
            .filter(|t| cx.host.get_affinity(t.tid).is_ok_and(|a| a != one))
            .map(|t| drifted(self, format!("thread {} affinity", t.tid)))
            .collect()
    }

    /// A thread still in the grant's cpuset gets its affinity back with the
    /// cpuset step's undo, after the move (which resets it; before the move
    /// the old CPUs may lie outside the RT cpuset, and the kernel refuses
    /// them). The same for a grant re-adopted after a crash.
    fn undo(&self, at: &mut On<'_>) -> Vec<String> {
        let On { cx, g } = *at;
        let mut problems = Vec::new();
        for t in live(cx.host, g).filter(|t| !in_target(cx, g, t.tid)) {
            let r = cx.host.set_affinity(t.tid, &mask_back(cx, t));
            note(&mut problems, format!("thread {} affinity", t.tid), r);
        }
        problems
    }
}

impl GrantStep for Affinity {}

/// The affinity a thread gets back: its recorded one unless that was just
/// its cpuset's CPUs (`cgroup::mask_to_give_back`).
fn mask_back(cx: &Cx, t: &ThreadBefore) -> CpuSet {
    cgroup::mask_to_give_back(cx.host, &t.affinity, t.cpuset_cpus.as_ref())
}
