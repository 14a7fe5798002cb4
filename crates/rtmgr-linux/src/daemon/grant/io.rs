//! A grant's I/O class and cache group (DROPS "Taming Linux" §4: the
//! resource manager grants I/O and cache too; §4.3's separate RT I/O queue
//! as ioprio, §4.4's cache partition as the resctrl group).
//!
//! Both are decided with the grant's memory admission, by
//! `resources::Resources::for_request`, which reads the threads' old I/O
//! priority into the record: their snapshots (the default) read nothing.

use super::{drifted, live, note, Cx, GrantStep, GrantSteps, On};
use crate::daemon::grants_journal::Grant;
use crate::drift::Drift;
use crate::host::HostError;
use crate::step::Step;
use crate::tasks;

/// Each thread's I/O priority (`resources.ioprio`: old and new per thread).
pub struct Ioprio;

impl Step<GrantSteps> for Ioprio {
    fn name(&self) -> &'static str {
        "I/O priority"
    }

    fn apply(&self, at: &mut On<'_>) -> Result<(), HostError> {
        let On { cx, g } = *at;
        g.resources
            .ioprio
            .iter()
            .try_for_each(|c| cx.host.set_ioprio(c.tid, c.new))
    }

    fn verify(&self, at: &On<'_>) -> Vec<Drift> {
        let On { cx, g } = *at;
        g.resources
            .ioprio
            .iter()
            .filter(|c| tasks::same_task(cx.host, c.tid, c.start_time))
            .filter(|c| cx.host.get_ioprio(c.tid).is_ok_and(|now| now != c.new))
            .map(|c| drifted(self, format!("thread {} ioprio", c.tid)))
            .collect()
    }

    fn undo(&self, at: &mut On<'_>) -> Vec<String> {
        let On { cx, g } = *at;
        let mut problems = Vec::new();
        for c in g.resources.ioprio.iter().rev() {
            if tasks::same_task(cx.host, c.tid, c.start_time) {
                let r = cx.host.set_ioprio(c.tid, c.old);
                note(&mut problems, format!("thread {} ioprio", c.tid), r);
            }
        }
        problems
    }
}

impl GrantStep for Ioprio {}

/// The grant's resctrl group, if it still exists.
fn existing_group<'g>(cx: &Cx, g: &'g Grant) -> Option<&'g std::path::PathBuf> {
    g.resources
        .cache_group
        .as_ref()
        .filter(|d| cx.host.exists(d))
}

/// The threads in the RT resctrl group (`resources.cache_group`). A group
/// that is gone (the daemon removed it at stop) already gave its tasks back.
pub struct CacheGroup;

impl Step<GrantSteps> for CacheGroup {
    fn name(&self) -> &'static str {
        "cache group"
    }

    fn apply(&self, at: &mut On<'_>) -> Result<(), HostError> {
        let On { cx, g } = *at;
        let Some(group) = &g.resources.cache_group else {
            return Ok(());
        };
        g.threads
            .iter()
            .try_for_each(|t| cx.host.write(group.join("tasks"), &t.tid.to_string()))
    }

    fn verify(&self, at: &On<'_>) -> Vec<Drift> {
        let On { cx, g } = *at;
        let Some(group) = existing_group(cx, g) else {
            return Vec::new();
        };
        let members = cx.host.read_opt(group.join("tasks")).unwrap_or_default();
        let member = |tid: u32| members.split_whitespace().any(|w| w == tid.to_string());
        live(cx.host, g)
            .filter(|t| !member(t.tid))
            .map(|t| drifted(self, format!("thread {} cache group", t.tid)))
            .collect()
    }

    /// Back to the default group (the resctrl root).
    fn undo(&self, at: &mut On<'_>) -> Vec<String> {
        let On { cx, g } = *at;
        let mut problems = Vec::new();
        let Some(group) = existing_group(cx, g) else {
            return problems;
        };
        let Some(root) = group.parent().map(|p| p.join("tasks")) else {
            return problems;
        };
        for t in live(cx.host, g) {
            let r = cx.host.write(&root, &t.tid.to_string());
            note(&mut problems, format!("thread {} cache group", t.tid), r);
        }
        problems
    }
}

impl GrantStep for CacheGroup {}
