//! The Manager's side of the grant worker (DROPS §4.1: the resource manager
//! answers requests while the kernel works): the jobs sent and not yet
//! finished, in order — grants whose answer waits under a token, and
//! revocations whose placement goes back — their outcomes taken when the
//! worker's fd wakes the loop, or waited for (an inline grant, the stop).

use super::granting::Completion;
use super::{Grant, Manager};
use crate::daemon::grant;
use crate::daemon::grant_worker::{ApplyWork, GrantWorker, Job, Outcome, UndoWork};
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
    /// The root domain of an RT CPU rebuilt (`dl_leak.rs`), its cpuset.
    Rebuild { cpu: u32, dir: std::path::PathBuf },
}

impl Manager {
    /// Start the grant worker (`serve`); without one, everything is inline.
    pub fn start_grant_worker(&mut self, priority: u32, nrt: &CpuSet) {
        self.start_grant_worker_waking_after(priority, nrt, std::time::Duration::ZERO);
    }

    /// `start_grant_worker`, the worker waking the loop `wake_delay` after
    /// each outcome (`GrantWorker::spawn_waking_after`; tests).
    pub(in crate::daemon) fn start_grant_worker_waking_after(
        &mut self,
        priority: u32,
        nrt: &CpuSet,
        wake_delay: std::time::Duration,
    ) {
        match GrantWorker::spawn_waking_after(&self.host, priority, nrt, wake_delay) {
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

    /// A journalled grant's kernel steps to the worker; its answer comes
    /// under `token`.
    pub(super) fn run_grant(&mut self, token: u64, work: ApplyWork, done: Completion) {
        self.run_job(Job::Apply(work), Pending::Grant { token, done });
    }

    /// Send a job to the worker, `then` finished when it is done. A worker
    /// that died runs nothing any more: the job runs here, at once.
    fn run_job(&mut self, job: Job, then: Pending) {
        let unsent = match &self.worker {
            Some(w) => match w.send(Box::new(job)) {
                Ok(()) => {
                    self.in_flight.push_back(then);
                    return;
                }
                Err(job) => job,
            },
            None => Box::new(job),
        };
        let out = unsent.run();
        self.finish(then, Some(out));
    }

    /// Give a revoked grant's placement back: on the worker when there is
    /// one and a thread moves between cgroups (what failed is then logged,
    /// and kept for `partition reset`, when it is done), else now
    /// (`grant::quick_to_undo`). `policy`: what of its policy could not be
    /// given back; `token`: a release answered when it is done. What could
    /// not be given back so far.
    pub(in crate::daemon) fn undo_placement(
        &mut self,
        g: Grant,
        last_of_pid: bool,
        policy: Vec<String>,
        token: Option<u64>,
    ) -> Vec<String> {
        if self.worker.is_none() || grant::quick_to_undo(&self.applied.layout, &g) {
            // Inline (tests, the stop, or nothing to move between cgroups:
            // a deadline grant whose threads later grants took over): what
            // failed goes to the caller.
            let cx = grant::Cx::new(&self.host, &self.applied.layout, last_of_pid);
            let undone = grant::revoke_placement(&cx, &g);
            return self.placement_undone(g, policy, undone);
        }
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
        self.run_job(Job::Undo(work), pending);
        Vec::new()
    }

    /// The end of a revocation whose placement went back: what could not
    /// be given back (its policy's and its placement's).
    ///
    /// The process stays watched until the next reconcile
    /// (`forget_idle_watches`): a client that reserves again meanwhile keeps
    /// its pidfd and its registration with the loop.
    fn placement_undone(
        &mut self,
        g: Grant,
        mut problems: Vec<String>,
        undone: Vec<String>,
    ) -> Vec<String> {
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

    /// The loop's poll found the worker's wake-up socket readable: empty
    /// it, even with nothing in flight (a wake-up may come after its
    /// outcome was taken; `GrantWorker::drain_wake`).
    pub fn worker_woke(&self) {
        if let Some(w) = &self.worker {
            w.drain_wake();
        }
    }

    /// Wait for every job sent (before an inline grant, and at stop).
    pub(in crate::daemon) fn await_in_flight(&mut self) {
        while !self.in_flight.is_empty() {
            let out = self.worker.as_ref().and_then(|w| w.take());
            self.finish_oldest(out);
        }
    }

    /// Finish the oldest job with its outcome.
    fn finish_oldest(&mut self, out: Option<Outcome>) {
        if let Some(pending) = self.in_flight.pop_front() {
            self.finish(pending, out);
        }
    }

    /// Finish a job with its outcome; None: the worker died on the way, and
    /// what the job was to do is done (a grant: undone) here.
    fn finish(&mut self, pending: Pending, out: Option<Outcome>) {
        match pending {
            Pending::Grant { token, done } => {
                let out = match out {
                    Some(Outcome::Applied(r)) => r,
                    _ => {
                        let g = &done.grant;
                        self.revoke(g.id, g, done.first_of_pid);
                        Err(worker_gone())
                    }
                };
                let resp = self.complete_grant(done, out).unwrap_or_else(|r| r);
                self.answer(token, resp);
            }
            Pending::Undo {
                grant,
                last_of_pid,
                policy,
                token,
            } => {
                let undone = match out {
                    Some(Outcome::Undone(u)) => u,
                    _ => {
                        let cx = grant::Cx::new(&self.host, &self.applied.layout, last_of_pid);
                        grant::revoke_placement(&cx, &grant)
                    }
                };
                let id = grant.id;
                for p in self.placement_undone(grant, policy, undone) {
                    tracing::warn!("reservation {id}: could not undo {p}");
                }
                // A release's answer: the grant is gone, whatever could not
                // be given back (kept for `partition reset`, and logged).
                if let Some(token) = token {
                    self.answer(token, Response::new(Reply::Released { id }));
                }
            }
            Pending::Rebuild { cpu, dir } => {
                let (done, took) = match out {
                    Some(Outcome::Rebuilt(done, took)) => (done, took),
                    _ => Job::rebuild(&self.host, &dir),
                };
                self.dl_leak.rebuilt(cpu, done, took);
            }
        }
        self.compact();
    }

    fn answer(&mut self, token: u64, resp: Response) {
        self.count(&resp);
        self.answers.push((token, resp));
    }

    /// Rebuild the root domain of every marked RT CPU that is quiet: on the
    /// worker when there is one (a rebuild is two cpuset writes and the
    /// kernel's recount, milliseconds), else now.
    pub(in crate::daemon) fn rebuild_due(&mut self) {
        for cpu in self.dl_leak.due(rtmgr_sys::time::mono_ns()) {
            if self.worker.is_none() {
                self.dl_leak.rebuild(&self.host, &self.domains, cpu);
                continue;
            }
            if self.dl_leak.is_rebuilding(cpu) {
                continue; // marked again while the rebuild runs: after it
            }
            let Some(dir) = self.dl_leak.start_rebuild(&self.domains, cpu) else {
                continue;
            };
            let job = Job::Rebuild {
                host: self.host.clone(),
                dir: dir.clone(),
            };
            self.run_job(job, Pending::Rebuild { cpu, dir });
        }
    }

    /// Is an answer for `token` on its way (a job on the worker) or ready?
    pub(in crate::daemon) fn answers_later(&self, token: u64) -> bool {
        self.answers.iter().any(|(t, _)| *t == token)
            || self.in_flight.iter().any(|p| match p {
                Pending::Grant { token: t, .. } => *t == token,
                Pending::Undo { token: t, .. } => *t == Some(token),
                Pending::Rebuild { .. } => false,
            })
    }
}

/// The grants of `jobs` being applied.
pub(super) fn applying(jobs: &VecDeque<Pending>) -> impl Iterator<Item = &Grant> {
    jobs.iter().filter_map(|p| match p {
        Pending::Grant { done, .. } => Some(&done.grant),
        Pending::Undo { .. } | Pending::Rebuild { .. } => None,
    })
}

/// The grants of `jobs` whose placement goes back (being revoked).
pub(super) fn undoing(jobs: &VecDeque<Pending>) -> impl Iterator<Item = &Grant> {
    jobs.iter().filter_map(|p| match p {
        Pending::Undo { grant, .. } => Some(grant),
        Pending::Grant { .. } | Pending::Rebuild { .. } => None,
    })
}

fn worker_gone() -> HostError {
    HostError::Io {
        op: "apply",
        path: "the grant worker".into(),
        source: std::io::Error::other("the grant worker thread is gone"),
    }
}
