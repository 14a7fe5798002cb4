//! Giving grants back: a client's release, a revocation (journal first, then
//! undo, then forget), the clients that exited, and every grant at SIGTERM
//! (DROPS §4.1: what the resource manager granted it takes back).

use super::{off_loop, refused, Answer, Deferred, Grant, Manager, Record, Watched};
use crate::daemon::dl_leak;
use crate::daemon::grant;
use crate::daemon::peer::Client;
use crate::daemon::release::MARGIN_NS;
use crate::{tasks, HostError};
use rtmgr_core::protocol::{ErrorCode, RefusalKind, Reply, Response};
use rtmgr_sys::pidfd::Pidfd;
use rtmgr_sys::time::mono_ns;
use std::collections::{BTreeMap, VecDeque};
use std::os::fd::{AsFd, BorrowedFd};

impl Manager {
    pub(in crate::daemon) fn watch(&mut self, pid: u32, start_time: u64) {
        if self.watched.contains_key(&pid) {
            return;
        }
        // Opened after the grant, checked against the start time: the pidfd
        // names the client, not a process that reused its id.
        let pidfd = Pidfd::open(pid)
            .ok()
            .filter(|_| tasks::same_task(&self.host, pid, start_time));
        let serial = self.next_watch_serial;
        self.next_watch_serial += 1;
        self.watched.insert(
            pid,
            Watched {
                start_time,
                pidfd,
                serial,
            },
        );
    }

    /// Stop watching the processes that hold no grant (at each reconcile:
    /// between two, a client that gave its last grant back and asks again
    /// keeps its watch, and the loop's registration of its pidfd).
    pub(in crate::daemon) fn forget_idle_watches(&mut self) {
        let grants = &self.grants;
        self.watched
            .retain(|pid, _| grants.values().any(|g| g.pid == *pid));
    }

    /// A client's release. With a `token`, the answer of a grant whose
    /// placement goes back on the worker comes when it is back (`Later`).
    pub(super) fn release(&mut self, client: &Client, id: u64, token: Option<u64>) -> Answer {
        if let Err(resp) = self.rate(client) {
            return Answer::Now(resp);
        }
        let Some(g) = self.grants.get(&id) else {
            return Answer::Now(Response::error(
                ErrorCode::NotFound,
                format!("no reservation {id}"),
            ));
        };
        if client.cred.uid != 0 && client.cred.uid != g.uid {
            return Answer::Now(refused(
                RefusalKind::Permission,
                format!(
                    "reservation {id} belongs to uid {}, not to {}",
                    g.uid,
                    client.peer.label()
                ),
            ));
        }
        self.revoke_answering(id, token);
        if token.is_some_and(|t| self.answers_later(t)) {
            return Answer::Later;
        }
        Answer::Now(Response::new(Reply::Released { id }))
    }

    /// Revoke one grant: journal first, then undo, then forget. A live
    /// thread that was SCHED_DEADLINE (in this grant or one it took over)
    /// gets its policy back now and its placement a period later (`release.rs`).
    pub fn revoke_id(&mut self, id: u64) -> Vec<String> {
        self.revoke_answering(id, None)
    }

    /// `revoke_id`; a placement that goes back on the worker answers
    /// `released` under `token` when it is back.
    fn revoke_answering(&mut self, id: u64, token: Option<u64>) -> Vec<String> {
        let Some(g) = self.grants.remove(&id) else {
            return Vec::new();
        };
        self.admission.remove(id);
        self.forget_pending(&g);
        // Read before the policy goes back: the kernel hides it after.
        let reads = self.hold_spent_servers(&g);
        // Asleep just before or just after its policy goes back.
        let mut asleep = dl_leak::asleep(&self.host, &g);
        let (hard, cpu, period_ns) = (g.demand.is_hard(), g.cpu, g.demand.period_ns);
        let problems = if let Some(due_ns) = self.placement_due(&g) {
            let _ = self.journal.record(&Record::Revoking { id });
            let cx = grant::Cx::new(&self.host, &self.applied.layout, false);
            let problems = grant::revoke_policy(&cx, &g);
            self.hold_spent_after_switch(&g, &reads);
            // One /proc read per thread: not again once one is seen asleep.
            asleep = asleep || dl_leak::asleep(&self.host, &g);
            self.defer(g, due_ns);
            problems
        } else {
            // Revoking, undo, Release: killed in between, the next daemon
            // (or `partition reset`) finds it being revoked and finishes it.
            // The policy now (a release's answer says the thread is back),
            // the placement on the grant worker when there is one
            // (`off_loop.rs`): a cpuset move can take milliseconds.
            let _ = self.journal.record(&Record::Revoking { id });
            let last_of_pid = !self.pid_busy(g.pid);
            let cx = grant::Cx::new(&self.host, &self.applied.layout, false);
            let policy = grant::revoke_policy(&cx, &g);
            self.hold_spent_after_switch(&g, &reads);
            self.undo_placement(g, last_of_pid, policy, token)
        };
        if hard {
            self.dl_leak
                .departed(cpu, mono_ns() + period_ns + MARGIN_NS);
            if asleep {
                self.dl_leak.mark(cpu);
            }
        }
        for p in &problems {
            tracing::warn!("reservation {id}: could not undo {p}");
        }
        self.compact();
        problems
    }

    /// The end of a revocation (its `Revoking` record written before the
    /// undo): `Release` when everything was given back; otherwise the grant
    /// stays in the journal as being revoked, so that what the error names
    /// as the remedy, `rtmgr partition reset` (or the next daemon's start),
    /// finishes it from the record.
    pub(in crate::daemon) fn revoked(&mut self, g: Grant, problems: &[String]) {
        if problems.is_empty() {
            let _ = self.journal.record(&Record::Release { id: g.id });
        } else {
            self.unfinished.push(g);
        }
    }

    pub(in crate::daemon) fn compact(&mut self) {
        let (live, releasing) = on_record(
            &self.grants,
            &self.in_flight,
            &self.deferred,
            &self.unfinished,
        );
        if let Err(e) = self.journal.maybe_compact(&self.header, &live, &releasing) {
            tracing::warn!("grants journal compaction: {e}");
        }
    }

    pub(super) fn revoke(&mut self, id: u64, g: &Grant, restore_limits: bool) -> Vec<String> {
        let cx = grant::Cx::new(&self.host, &self.applied.layout, restore_limits);
        let problems = grant::revoke(&cx, g);
        self.admission.remove(id);
        for p in &problems {
            tracing::warn!("reservation {id}: could not undo {p}");
        }
        problems
    }

    /// Every grant of a process that exited.
    pub fn client_exited(&mut self, pid: u32) {
        let ids: Vec<u64> = self
            .grants
            .values()
            .filter(|g| g.pid == pid)
            .map(|g| g.id)
            .collect();
        for id in ids {
            self.revoke_id(id);
        }
        self.watched.remove(&pid);
    }

    /// Processes whose pidfd is readable or whose start time changed.
    pub fn exited_clients(&self) -> Vec<u32> {
        self.watched
            .iter()
            .filter(|(pid, w)| match &w.pidfd {
                Some(fd) => fd.exited(),
                None => !tasks::same_task(&self.host, **pid, w.start_time),
            })
            .map(|(pid, _)| *pid)
            .collect()
    }

    /// The pidfds a front end polls (readable = that client exited): pid,
    /// the watch's serial (a new watch of the same pid has another) and fd.
    pub fn pidfds(&self) -> impl Iterator<Item = (u32, u64, BorrowedFd<'_>)> {
        self.watched
            .iter()
            .filter_map(|(pid, w)| w.pidfd.as_ref().map(|f| (*pid, w.serial, f.as_fd())))
    }

    /// From now on every `reserve` is answered `shutting_down`.
    pub(in crate::daemon) fn stop_granting(&mut self) {
        self.stopping = true;
    }

    /// Stop granting; revoke every grant (SIGTERM), waiting out the
    /// deadline threads' last period. Returns what could not be undone.
    pub fn revoke_all(&mut self) -> Vec<String> {
        self.stopping = true;
        let ids: Vec<u64> = self.grants.keys().rev().copied().collect();
        let mut problems: Vec<String> = ids.into_iter().flat_map(|id| self.revoke_id(id)).collect();
        problems.extend(self.finish_all_deferred());
        problems
    }

    /// Rewrite the journal: header and the live grants only.
    pub(in crate::daemon) fn rewrite_journal(&mut self) -> Result<(), HostError> {
        let (live, releasing) = on_record(
            &self.grants,
            &self.in_flight,
            &self.deferred,
            &self.unfinished,
        );
        self.journal.rewrite(&self.header, &live, &releasing)
    }
}

/// What the grants journal holds: the live grants (those being applied on
/// the worker too), and those being revoked (half-revoked deadline grants,
/// those whose placement the worker gives back, and undos that failed).
fn on_record<'a>(
    grants: &'a BTreeMap<u64, Grant>,
    jobs: &'a VecDeque<off_loop::Pending>,
    deferred: &'a [Deferred],
    unfinished: &'a [Grant],
) -> (Vec<&'a Grant>, Vec<&'a Grant>) {
    let live = grants.values().chain(off_loop::applying(jobs)).collect();
    let releasing = (deferred.iter().map(|d| &d.grant))
        .chain(off_loop::undoing(jobs))
        .chain(unfinished)
        .collect();
    (live, releasing)
}
