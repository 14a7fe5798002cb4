//! Taking ownership at start (DROPS §4.1: the manager owns the RT CPUs):
//! a fresh start applies the configured partition; a restart after `kill -9`
//! adopts the partition its predecessor applied and re-adopts the grants of
//! clients still alive (same pid and start time), revoking the rest; a
//! partition applied by anyone else is refused, never taken over.

use super::config::ServeConfig;
use super::grant;
use super::grants_journal::{self as journal, Grant, JournalState, Record, GRANTS_VERSION};
use super::ServeError;
use crate::cgroup::Layout;
use crate::partition::{self, Applied, ApplyOptions};
use crate::{tasks, Host};
use rtmgr_core::partition::PartitionPlan;
use std::collections::BTreeSet;
use std::path::Path;

/// How the daemon comes up.
pub enum Start {
    /// Nothing to adopt: apply the partition.
    Fresh,
    /// A predecessor's partition and grants.
    Adopt(Box<Applied>, JournalState),
}

/// Decide, revoking what can no longer be adopted.
pub fn decide(host: &Host, cfg: &ServeConfig, plan: &PartitionPlan) -> Result<Start, ServeError> {
    let pj = cfg.partition_journal();
    let gj = cfg.grants_journal();
    let part = partition::current(host, &pj)?;
    let grants = journal::read(host, &gj)?;
    match (part, grants) {
        (None, None) => Ok(Start::Fresh),
        (None, Some(st)) => {
            // The partition is gone (reset by hand): its grants mean nothing.
            revoke_journalled(host, None, &st.all());
            journal::remove(host, &gj)?;
            Ok(Start::Fresh)
        }
        (Some(_), None) => Err(ServeError::NotOwner(format!(
            "a partition applied by someone else (not rtmgr serve) is in place (journal {}); rtmgr serve does not take over a partition it does not own: run `rtmgr partition reset` first",
            pj.display()
        ))),
        (Some(a), Some(st)) => {
            let ours = st.partition_journal.as_deref() == Some(pj.as_path())
                && st
                    .owned_inode
                    .is_none_or(|i| Some(i) == journal::inode(host, &pj));
            if !ours {
                return Err(ServeError::NotOwner(format!(
                    "the partition in {} was not applied by this daemon's predecessor (its grants journal names another); run `rtmgr partition reset` first",
                    pj.display()
                )));
            }
            if !a.complete || a.plan != *plan {
                tracing::warn!("the partition left by the previous daemon is incomplete or differs from the config: resetting it");
                revoke_journalled(host, Some(&a.layout), &st.all());
                partition::reset(host, &pj)?;
                journal::remove(host, &gj)?;
                return Ok(Start::Fresh);
            }
            // Half-revoked grants: finish them (their period has long passed).
            for g in &st.releasing {
                let restore = !st.live.iter().any(|l| l.pid == g.pid);
                grant::revoke(&grant::Cx::new(host, &a.layout, restore), g);
            }
            Ok(Start::Adopt(Box::new(a), st))
        }
    }
}

/// Journal ownership, then apply the partition, then record which journal it is.
pub fn apply_fresh(
    host: &Host,
    cfg: &ServeConfig,
    plan: &PartitionPlan,
) -> Result<(Applied, Vec<Record>), ServeError> {
    let pj = cfg.partition_journal();
    let gj = cfg.grants_journal();
    journal::remove(host, &gj)?;
    let serve = Record::Serve {
        version: GRANTS_VERSION,
        partition_journal: pj.clone(),
        started_unix_s: rtmgr_sys::time::unix_now_s(),
    };
    journal::GrantJournal::open(host, &gj)?.record(&serve)?;
    let opts = ApplyOptions {
        journal: pj.clone(),
        replace: false,
    };
    let (applied, _report) = partition::apply(host, plan, &opts)?;
    let owned = Record::Owned {
        inode: journal::inode(host, &pj).unwrap_or(0),
    };
    journal::GrantJournal::open(host, &gj)?.record(&owned)?;
    Ok((applied, vec![serve, owned]))
}

/// The header a restarted daemon writes (it owns the same partition journal).
pub fn adopted_header(host: &Host, cfg: &ServeConfig) -> Vec<Record> {
    let pj = cfg.partition_journal();
    vec![
        Record::Serve {
            version: GRANTS_VERSION,
            partition_journal: pj.clone(),
            started_unix_s: rtmgr_sys::time::unix_now_s(),
        },
        Record::Owned {
            inode: journal::inode(host, &pj).unwrap_or(0),
        },
    ]
}

/// Split a predecessor's grants: the ones whose client lives on (their dead
/// threads dropped, drift repaired) and the rest, which are revoked.
pub fn split_live(host: &Host, layout: &Layout, grants: Vec<Grant>) -> (Vec<Grant>, Vec<u64>) {
    let mut keep = Vec::new();
    let mut dropped = Vec::new();
    let mut dead = Vec::new();
    for mut g in grants {
        let alive = tasks::same_task(host, g.pid, g.pid_start);
        g.threads
            .retain(|t| alive && tasks::same_task(host, t.tid, t.start_time));
        if alive && !g.threads.is_empty() {
            // Limits included: the process's limits are the grant's while it lives.
            let cx = grant::Cx::new(host, layout, true);
            grant::repair(&cx, &g, &grant::drift(&cx, &g));
            keep.push(g);
        } else {
            dead.push(g);
        }
    }
    for g in &dead {
        // Limits go back only with the last grant of a process that lives.
        let restore = !keep.iter().any(|k| k.pid == g.pid);
        grant::revoke(&grant::Cx::new(host, layout, restore), g);
        dropped.push(g.id);
    }
    (keep, dropped)
}

/// Revoke every grant of a journal (newest first; each process's limits
/// once). `layout` None: the partition is gone, so only policies, limits
/// and IRQ masks are restored.
pub fn revoke_journalled(host: &Host, layout: Option<&Layout>, grants: &[Grant]) -> Vec<String> {
    let fallback = Layout::V2(Path::new("/").to_path_buf());
    let layout = layout.unwrap_or(&fallback);
    let mut done_pids = BTreeSet::new();
    let mut problems = Vec::new();
    for (i, g) in grants.iter().enumerate().rev() {
        let older_of_pid = grants[..i].iter().any(|o| o.pid == g.pid);
        let restore = !older_of_pid && done_pids.insert(g.pid);
        problems.extend(grant::revoke(&grant::Cx::new(host, layout, restore), g));
    }
    problems
}

/// `rtmgr partition reset` with a daemon's grants in place (after `kill -9`
/// of the daemon): revoke them from the grants journal, then reset.
pub fn reset_machine(
    host: &Host,
    partition_journal: &Path,
) -> Result<(usize, partition::ResetReport), ServeError> {
    let gj = super::config::grants_journal_beside(partition_journal);
    let mut revoked = 0;
    if let Some(st) = journal::read(host, &gj)? {
        let layout = partition::current(host, partition_journal)?.map(|a| a.layout);
        let all = st.all();
        let problems = revoke_journalled(host, layout.as_ref(), &all);
        if !problems.is_empty() {
            return Err(ServeError::Incomplete(problems.join("; ")));
        }
        revoked = all.len();
        journal::remove(host, &gj)?;
    }
    let left = crate::resources::restore_beside(host, partition_journal)?;
    if !left.is_empty() {
        return Err(ServeError::Incomplete(left.join("; ")));
    }
    let r = partition::reset(host, partition_journal)?;
    // A killed daemon's socket: removed when nobody listens on it.
    let sock = host.path(partition_journal.with_file_name("rtmgr.sock"));
    if std::os::unix::net::UnixStream::connect(&sock).is_err() {
        let _ = std::fs::remove_file(&sock);
    }
    if let Some(dir) = host.path(partition_journal).parent() {
        let _ = std::fs::remove_dir(dir);
    }
    Ok((revoked, r))
}
