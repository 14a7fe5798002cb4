//! The Manager's side of the grant worker (DROPS §4.1: the resource manager
//! answers requests while the kernel works): the jobs sent and not yet
//! finished, in order — grants whose answer waits under a token, and
//! revocations whose placement goes back — their outcomes taken when the
//! worker's fd wakes the loop, or waited for (an inline grant, the stop).

use super::granting::Completion;
use super::{Grant, Manager};
use crate::daemon::grant;
use crate::daemon::grant_worker::{GrantWorker, Job, Outcome, UndoWork};
use crate::HostError;
use rtmgr_core::protocol::{Reply, Response};
use rtmgr_core::CpuSet;
use std::collections::VecDeque;
use std::os::fd::BorrowedFd;

/// A job on the worker, and what finishing it takes.
#[derive(Debug)]
pub(in crate::daemon) enum Pending {
    /// A journalled grant; its client waits for the answer under `token`.
    Grant { token: u64, done: Completion },
    /// A revoked grant (journalled `Revoking`, its policy back, with what
    /// of that failed) whose placement goes back; a client's release waits
    /// for it under `token`.
    Undo {
        grant: Grant,
        last_of_pid: bool,
        policy: Vec<String>,
        token: Option<u64>,
    },
}

impl Manager {
    /// Start the grant worker (`serve`); without one, everything is inline.
    pub fn start_grant_worker(&mut self, priority: u32, nrt: &CpuSet) {
        match GrantWorker::spawn(&self.host, priority, nrt) {
            Ok(w) => self.worker = Some(w),
            Err(e) => {
                tracing::warn!("no grant worker ({e}): grants are applied on the request loop")
            }
        }
    }

    /// Finish every job sent and stop the worker: inline from now on.
    pub fn stop_grant_worker(&mut self) {
        self.await_in_flight();
        self.worker = None;
    }

    /// Readable when a job is done.
    pub fn worker_fd(&self) -> Option<BorrowedFd<'_>> {
        self.worker.as_ref().map(|w| w.fd())
    }

    /// Is the worker on a job (the next grant waits for it)?
    pub fn worker_busy(&self) -> bool {
        !self.in_flight.is_empty()
    }

    /// The grants being applied: their threads and processes hold them already.
    pub(in crate::daemon) fn in_flight_grants(&self) -> impl Iterator<Item = &Grant> {
        applying(&self.in_flight)
    }

    /// Does a job on the worker answer under `token`?
    pub(in crate::daemon) fn answers_later(&self, token: u64) -> bool {
        self.in_flight.iter().any(|p| match p {
            Pending::Grant { token: t, .. } => *t == token,
            Pending::Undo { token: t, .. } => *t == Some(token),
        })
    }

    /// Send a job; given back (with its pending part) when there is no worker.
    pub(super) fn send_job(&mut self, job: Job, then: Pending) -> Result<(), Box<(Job, Pending)>> {
        let Some(w) = &self.worker else {
            return Err(Box::new((job, then)));
        };
        match w.send(Box::new(job)) {
            Ok(()) => {
                self.in_flight.push_back(then);
                Ok(())
            }
            Err(job) => Err(Box::new((*job, then))),
        }
    }

    /// Give a revoked grant's placement back: on the worker when there is
    /// one (what failed is then logged and kept when it is done), else now.
    /// `policy`: what of its policy could not be given back; `token`: a
    /// release answered when it is done. What could not be given back so far.
    pub(in crate::daemon) fn undo_placement(
        &mut self,
        g: Grant,
        last_of_pid: bool,
        policy: Vec<String>,
        token: Option<u64>,
    ) -> Vec<String> {
        let work = UndoWork {
            host: self.host.clone(),
            layout: self.applied.layout.clone(),
            grant: g.clone(),
            last_of_pid,
        };
        let pending = Pending::Undo {
            grant: g,
            last_of_pid,
            policy,
            token,
        };
        let Err(unsent) = self.send_job(Job::Undo(work), pending) else {
            return Vec::new();
        };
        match *unsent {
            (Job::Undo(work), Pending::Undo { grant, policy, .. }) => {
                let undone = work.run();
                self.placement_undone(grant, last_of_pid, policy, undone)
            }
            _ => Vec::new(),
        }
    }

    /// The end of a revocation whose placement went back: what could not
    /// be given back (its policy's and its placement's).
    fn placement_undone(
        &mut self,
        g: Grant,
        last_of_pid: bool,
        mut problems: Vec<String>,
        undone: Vec<String>,
    ) -> Vec<String> {
        if last_of_pid {
            self.watched.remove(&g.pid);
        }
        problems.extend(undone);
        self.revoked(g, &problems);
        problems
    }

    /// Answers of grants finished since the last call, by token.
    pub fn take_answers(&mut self) -> Vec<(u64, Response)> {
        while !self.in_flight.is_empty() {
            match self.worker.as_ref().and_then(|w| w.try_take()) {
                Some(out) => self.finish_oldest(Some(out)),
                None => break,
            }
        }
        std::mem::take(&mut self.answers)
    }

    /// Wait for every job sent (before an inline grant, and at stop).
    pub(in crate::daemon) fn await_in_flight(&mut self) {
        while !self.in_flight.is_empty() {
            let out = self.worker.as_ref().and_then(|w| w.take());
            self.finish_oldest(out);
        }
    }

    /// Finish the oldest job with its outcome; None: the worker died on
    /// the way, and what it did is undone here from the grant's record.
    fn finish_oldest(&mut self, out: Option<Outcome>) {
        let Some(pending) = self.in_flight.pop_front() else {
            return;
        };
        match (pending, out) {
            (Pending::Grant { token, done }, out) => {
                let out = match out {
                    Some(Outcome::Applied(r)) => r,
                    _ => {
                        let g = &done.grant;
                        self.revoke(g.id, g, done.first_of_pid);
                        Err(worker_gone())
                    }
                };
                let resp = self.complete_grant(done, out).unwrap_or_else(|r| r);
                self.count(&resp);
                self.answers.push((token, resp));
            }
            (
                Pending::Undo {
                    grant,
                    last_of_pid,
                    policy,
                    token,
                },
                out,
            ) => {
                let undone = match out {
                    Some(Outcome::Undone(u)) => u,
                    _ => {
                        let cx = grant::Cx::new(&self.host, &self.applied.layout, last_of_pid);
                        grant::revoke_placement(&cx, &grant)
                    }
                };
                let id = grant.id;
                for p in self.placement_undone(grant, last_of_pid, policy, undone) {
                    tracing::warn!("reservation {id}: could not undo {p}");
                }
                // A release's answer: the grant is gone, whatever could not
                // be given back (kept for `partition reset`, and logged).
                if let Some(token) = token {
                    let resp = Response::new(Reply::Released { id });
                    self.count(&resp);
                    self.answers.push((token, resp));
                }
            }
        }
        self.compact();
    }
}

/// The grants of `jobs` being applied.
pub(super) fn applying(jobs: &VecDeque<Pending>) -> impl Iterator<Item = &Grant> {
    jobs.iter().filter_map(|p| match p {
        Pending::Grant { done, .. } => Some(&done.grant),
        Pending::Undo { .. } => None,
    })
}

/// The grants of `jobs` whose placement goes back (being revoked).
pub(super) fn undoing(jobs: &VecDeque<Pending>) -> impl Iterator<Item = &Grant> {
    jobs.iter().filter_map(|p| match p {
        Pending::Undo { grant, .. } => Some(grant),
        Pending::Grant { .. } => None,
    })
}

fn worker_gone() -> HostError {
    HostError::Io {
        op: "apply",
        path: "the grant worker".into(),
        source: std::io::Error::other("the grant worker thread is gone"),
    }
}
