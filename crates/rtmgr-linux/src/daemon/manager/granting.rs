//! A grant in three parts (DROPS §4.1: the resource manager grants on
//! request and journals first): `prepare` admits, snapshots and journals it
//! on the loop; its kernel steps run on the grant worker (`off_loop.rs`) or
//! inline; `complete` takes the outcome and answers.

use super::{gone, refused, Grant, Manager, Record};
use crate::daemon::grant;
use crate::daemon::grant_worker::ApplyWork;
use crate::daemon::peer::Client;
use crate::{tasks, HostError};
use rtmgr_core::protocol::{ErrorCode, RefusalKind, Reply, Response, ValidReserve};
use rtmgr_sys::time::mono_ns;

/// A request's answer: now, or when its grant's kernel steps are done
/// (`Manager::take_answers` gives it, under the token it was started with).
#[derive(Debug)]
pub enum Answer {
    Now(Response),
    Later,
}

/// A request the client's policy allowed: the reservation, its threads,
/// the IRQ it steers, and the limits it sets (RLIMIT_RTTIME µs,
/// RLIMIT_MEMLOCK bytes).
pub(in crate::daemon) struct Allowed<'a> {
    pub v: &'a ValidReserve,
    pub tids: Vec<u32>,
    /// Each thread's start time, as `check_threads` read it.
    pub started: Vec<(u32, u64)>,
    pub irq: Option<u32>,
    pub limits: (u64, u64),
}

/// What `complete` needs of a journalled grant whose steps are running.
#[derive(Debug)]
pub(in crate::daemon) struct Completion {
    pub pid: u32,
    start_time: u64,
    pub grant: Grant,
    pub first_of_pid: bool,
}

impl Manager {
    /// Admit, journal and apply a request the client's policy allowed, then
    /// watch the client: every front end's grants take this path. Inline:
    /// the grant in flight, if any, finishes first.
    pub(in crate::daemon) fn grant_admitted(
        &mut self,
        client: &Client,
        ask: Allowed,
    ) -> Result<Response, Response> {
        self.await_in_flight();
        let (work, done) = self.prepare_grant(client, ask)?;
        let out = work.run();
        self.complete_grant(done, out)
    }

    /// `grant_admitted` with the kernel steps on the worker: the answer
    /// comes later under `token`. Inline when there is no worker, or while
    /// it works (the server holds a `reserve` back until it is idle: a
    /// grant prepared while another's steps run held the loop longer, and
    /// another client's answer with it, for no shorter grant; measured in
    /// docs/protocol.md, "How long an answer takes"), or when its steps
    /// move no thread between cgroups (`grant::quick`).
    pub(in crate::daemon) fn start_grant(
        &mut self,
        token: u64,
        client: &Client,
        ask: Allowed,
    ) -> Result<Answer, Response> {
        if self.worker.is_none() || self.worker_busy() {
            return self.grant_admitted(client, ask).map(Answer::Now);
        }
        let (work, done) = self.prepare_grant(client, ask)?;
        if work.quick() {
            // No cgroup lock to wait for: the worker's round trip (a
            // channel, a wake-up, another pass of the loop) would cost more
            // than the steps (docs/protocol.md, "How long an answer takes").
            let out = work.run();
            return self.complete_grant(done, out).map(Answer::Now);
        }
        self.run_grant(token, work, done);
        Ok(Answer::Later)
    }

    /// Admission, the threads' before-state, the snapshot and the journal
    /// record: everything before the kernel steps, on the loop.
    fn prepare_grant(
        &mut self,
        client: &Client,
        ask: Allowed,
    ) -> Result<(ApplyWork, Completion), Response> {
        let Allowed {
            v,
            tids,
            started: before,
            irq,
            limits,
        } = ask;
        let pid = client.cred.pid;
        let count = tids.len() as u32;
        let held = self
            .grants
            .values()
            .map(|g| g.resources.memlock_bytes)
            .sum();
        let mut resources = self
            .resources
            .for_request(&self.host, v, &before, limits.1, held)?;
        let io_target = self.resources.io_target(v);
        let placed = self.admission.check(&v.demand, count, v.cpu).map_err(|r| {
            Response::new(Reply::Refused {
                reason: RefusalKind::Admission,
                message: r.to_string(),
                cpus: r.cpus,
                retry_after_ms: None,
            })
        })?;
        let (threads, fresh_tids) = self.threads_before(&before, io_target, &mut resources);
        // Limits are per process: the first grant of a process sets them,
        // later ones carry the same record, the last one to go restores them.
        let carried = self
            .grants
            .values()
            .chain(self.deferred.iter().map(|d| &d.grant))
            .find(|g| g.pid == pid)
            .map(|g| g.limits.clone());
        let draft = grant::Draft {
            allowance: grant::Allowance {
                rttime_us: limits.0,
                memlock_bytes: limits.1,
                enforce: client.cred.uid != 0,
            },
            fresh_tids,
            fresh_limits: carried.is_none(),
        };
        let first_of_pid = !self.pid_busy(pid);
        let mut g = Grant {
            id: self.next_id,
            pid,
            pid_start: client.start_time,
            uid: client.cred.uid,
            name: v.name.clone(),
            cpu: placed.cpu,
            class: v.class.to_string(),
            demand: v.demand,
            threads,
            limits: carried.unwrap_or_default(),
            irq: irq.map(|n| (n, String::new())),
            cgroup: self.domains.dir(placed.cpu).cloned(),
            response_ns: placed.response_ns,
            resources,
        };
        let work = self.journal_grant(&draft, &mut g, first_of_pid)?;
        // In the books from now: a grant admitted while this one's steps
        // run counts it (taken out again if they fail).
        self.admission.insert(g.id, g.demand, count, &placed);
        let done = Completion {
            pid,
            start_time: client.start_time,
            grant: g,
            first_of_pid,
        };
        Ok((work, done))
    }

    /// Snapshot and journal a new grant; what applying it takes.
    fn journal_grant(
        &mut self,
        draft: &grant::Draft,
        g: &mut Grant,
        first_of_pid: bool,
    ) -> Result<ApplyWork, Response> {
        let layout = self.applied.layout.clone();
        let busy_pending = self.dl_leak.returning(g.cpu, mono_ns());
        let mut cx = grant::Cx::new(&self.host, &layout, first_of_pid);
        cx.busy_pending = busy_pending;
        grant::snapshot(&cx, draft, g).map_err(gone)?;
        // A hard grant's thread that spent its last server's budget is held
        // from SCHED_DEADLINE until that server's 0-lag time; journalled.
        let now = mono_ns();
        for t in &mut g.threads {
            t.hold_until_ns = g
                .demand
                .is_hard()
                .then(|| self.zero_lag.until(t.tid, now))
                .flatten();
            if g.demand.is_hard() {
                tracing::debug!(
                    "reservation {}: thread {} granted at {now}, held until {:?}",
                    g.id,
                    t.tid,
                    t.hold_until_ns
                );
            }
        }
        self.next_id += 1;
        self.journal
            .record(&Record::Grant(Box::new(g.clone())))
            .map_err(|e| Response::error(ErrorCode::Os, format!("grants journal: {e}")))?;
        Ok(ApplyWork {
            host: self.host.clone(),
            layout,
            grant: g.clone(),
            first_of_pid,
            busy_pending,
            held: g
                .threads
                .iter()
                .filter(|t| t.hold_until_ns.is_some())
                .map(|t| t.tid)
                .collect(),
            fresh: draft.fresh_tids.clone(),
        })
    }

    /// The kernel steps are done (`out`): on error the grant is released in
    /// the journal (its steps undone already); else admitted, watched and
    /// answered — unless the client exited meanwhile.
    pub(super) fn complete_grant(
        &mut self,
        done: Completion,
        out: Result<(), HostError>,
    ) -> Result<Response, Response> {
        let Completion {
            pid,
            start_time,
            grant: g,
            first_of_pid,
        } = done;
        if let Err(e) = out {
            self.admission.remove(g.id);
            let _ = self.journal.record(&Record::Release { id: g.id });
            if e.errno() == Some(libc::EBUSY) {
                return Err(refused(
                    RefusalKind::Admission,
                    format!(
                        "CPU {}: the kernel's SCHED_DEADLINE admission refused it (EBUSY): another deadline task or the kernel's fair server holds bandwidth there",
                        g.cpu
                    ),
                ));
            }
            return Err(gone(e));
        }
        // The client may have exited between the checks and the grant.
        if !tasks::same_task(&self.host, pid, start_time) {
            let _ = self.journal.record(&Record::Release { id: g.id });
            self.revoke(g.id, &g, first_of_pid);
            return Err(Response::error(
                ErrorCode::Gone,
                format!("process {pid} exited during the grant"),
            ));
        }
        self.watch(pid, start_time);
        Ok(self.granted(g))
    }
}
