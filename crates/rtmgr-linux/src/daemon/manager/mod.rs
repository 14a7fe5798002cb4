//! The request handling of the daemon, behind one API that every front end
//! calls (the Unix socket now; a D-Bus front end and metrics later): DROPS
//! §4.1's resource manager that gives resources on request. `Manager` owns
//! the admission state, the client policy, the grants and their journal; a
//! front end identifies the client (`peer::Client`) and calls `handle`.

use super::dl_leak::LeakWatch;
use super::domains::Domains;
use super::grant;
use super::grants_journal::{Grant, GrantJournal, Record, ThreadBefore};
use super::peer::{thread_info, Client};
use crate::partition::Applied;
use crate::resources::grant::IoprioChange;
use crate::{tasks, Host, HostError};
use rtmgr_core::admission::policy::{Ask, ClientPolicy};
use rtmgr_core::admission::rate::Burst;
use rtmgr_core::admission::{Admission, AdmissionConfig};
use rtmgr_core::protocol::{
    AnswerOp, ErrorCode, Invalid, IrqRef, Op, RefusalKind, Reply, Request, ReserveRequest,
    Response, ValidReserve,
};
use rtmgr_sys::pidfd::Pidfd;
use rtmgr_sys::time::mono_ns;
use std::collections::BTreeMap;

/// Counters for `status`.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub requests: u64,
    pub granted: u64,
    pub refused: u64,
    pub errors: u64,
    pub drift: BTreeMap<String, u64>,
}

/// A half-revoked grant: its policies are back, its placement goes back at
/// `due_ns` (`release.rs` finishes it).
#[derive(Debug)]
pub struct Deferred {
    pub due_ns: u64,
    pub grant: Grant,
}

/// A process holding grants, watched until it exits.
#[derive(Debug)]
pub(super) struct Watched {
    pub start_time: u64,
    pub pidfd: Option<Pidfd>,
    /// Names this watch (and its pidfd) among all the daemon ever had: a
    /// front end that registers the pidfd once tells a new watch of the same
    /// pid from the old one by it.
    pub serial: u64,
}

pub struct Manager {
    pub(super) host: Host,
    pub(super) applied: Applied,
    pub(super) domains: Domains,
    policy: ClientPolicy,
    pub(super) admission: Admission,
    pub(super) grants: BTreeMap<u64, Grant>,
    pub(super) watched: BTreeMap<u32, Watched>,
    /// The serial of the next `Watched`.
    pub(super) next_watch_serial: u64,
    /// Half-revoked deadline grants waiting out their last period.
    pub(super) deferred: Vec<Deferred>,
    /// Threads that left SCHED_DEADLINE: when they may leave their RT CPU.
    pub(super) leaving: BTreeMap<u32, u64>,
    /// Revocations whose undo failed, kept in the journal as being revoked
    /// for `rtmgr partition reset` or the next daemon to finish (`revoke.rs`).
    pub(super) unfinished: Vec<Grant>,
    /// RT CPUs whose root domain may hold leaked deadline bandwidth (`dl_leak.rs`).
    pub(super) dl_leak: LeakWatch,
    /// Hard grants' threads runnable without running (`stranded.rs`).
    pub(super) stranded: super::stranded::StrandWatch,
    /// The request loop's bounded share of its CPU at SCHED_FIFO
    /// (`loop_share.rs`); None at SCHED_OTHER.
    pub(super) loop_bound: Option<super::loop_share::Bound>,
    /// Hard grants' threads at SCHED_FIFO 1 until they run on their RT CPU (`pending.rs`).
    pub(super) pending: super::pending::PendingWatch,
    /// Threads that left a hard grant with their budget spent, held from
    /// SCHED_DEADLINE until their 0-lag time (`zero_lag.rs`).
    pub(super) zero_lag: super::zero_lag::ZeroLag,
    pub(super) journal: GrantJournal,
    header: Vec<Record>,
    next_id: u64,
    bursts: BTreeMap<u32, Burst>,
    pub stats: Stats,
    started_ns: u64,
    stopping: bool,
    /// "running", "off", or why it stopped.
    pub balancer: String,
    /// `serve --metrics`: where answers and repairs are counted.
    #[cfg(feature = "metrics")]
    pub metrics: Option<std::sync::Arc<super::metrics::Metrics>>,
    /// The live figures of `status` (`rtmgr top`), fed by the guards.
    pub live: Option<std::sync::Arc<super::live::LiveFigures>>,
    /// Memory, I/O and cache beside the CPUs (issue 13).
    pub(super) resources: crate::resources::Resources,
    /// Per `[[client]]` rule: may reserve for an existing process (`--pid`).
    pub(super) existing_processes: Vec<bool>,
    /// Where a grant's kernel steps run off the loop (`grant_worker.rs`).
    worker: Option<crate::daemon::grant_worker::GrantWorker>,
    /// The jobs sent to the worker and not yet finished, oldest first.
    in_flight: std::collections::VecDeque<off_loop::Pending>,
    /// Answers of finished grants for the front end, by token.
    answers: Vec<(u64, Response)>,
    /// Which knobs the next reconcile verifies (`reconcile.rs`).
    pub(super) knob_sweep: rtmgr_core::partition::sweep::KnobSweep,
}

fn refused(reason: RefusalKind, msg: impl Into<String>) -> Response {
    Response::refused(reason, msg)
}

impl Manager {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        host: Host,
        applied: Applied,
        domains: Domains,
        policy: ClientPolicy,
        admission: AdmissionConfig,
        journal: GrantJournal,
        header: Vec<Record>,
        next_id: u64,
    ) -> Self {
        let adm = Admission::new(admission, &applied.plan.rt);
        Manager {
            host,
            applied,
            domains,
            policy,
            admission: adm,
            grants: BTreeMap::new(),
            watched: BTreeMap::new(),
            next_watch_serial: 1,
            deferred: Vec::new(),
            leaving: BTreeMap::new(),
            unfinished: Vec::new(),
            dl_leak: LeakWatch::default(),
            stranded: Default::default(),
            loop_bound: None,
            pending: Default::default(),
            zero_lag: Default::default(),
            journal,
            header,
            next_id: next_id.max(1),
            bursts: BTreeMap::new(),
            stats: Stats::default(),
            started_ns: mono_ns(),
            stopping: false,
            balancer: "off".into(),
            #[cfg(feature = "metrics")]
            metrics: None,
            live: None,
            resources: Default::default(),
            existing_processes: Vec::new(),
            worker: None,
            in_flight: Default::default(),
            answers: Vec::new(),
            knob_sweep: Default::default(),
        }
    }

    /// Answer one request of `client`, its grant applied inline.
    pub fn handle(&mut self, client: &Client, req: Request) -> Response {
        match self.handle_or_start(client, req, None) {
            Answer::Now(resp) => resp,
            Answer::Later => Response::error(ErrorCode::Os, "a grant went to the worker"),
        }
    }

    /// Answer one request of `client`; with a `token`, a grant's kernel
    /// steps go to the grant worker and its answer comes later
    /// (`take_answers`).
    pub fn handle_or_start(&mut self, client: &Client, req: Request, token: Option<u64>) -> Answer {
        self.stats.requests += 1;
        let resp = match req.op {
            Op::Reserve(r) => match self.reserve(client, &r, token) {
                Answer::Now(resp) => resp,
                Answer::Later => return Answer::Later,
            },
            Op::Release { id } => match self.release(client, id, token) {
                Answer::Now(resp) => resp,
                Answer::Later => return Answer::Later,
            },
            Op::List => self.list(client),
            Op::Status => Response::new(Reply::Status {
                status: Box::new(self.status()),
            }),
        };
        self.count(&resp);
        Answer::Now(resp)
    }

    /// An answer written `took_ns` after its request was read.
    pub fn observe_answer(&self, op: AnswerOp, took_ns: u64) {
        #[cfg(feature = "metrics")]
        if let Some(mx) = &self.metrics {
            mx.answer_time(op, took_ns);
        }
        #[cfg(not(feature = "metrics"))]
        let _ = (op, took_ns);
    }

    /// Count a response made outside `handle` (a malformed line).
    pub fn count(&mut self, resp: &Response) {
        #[cfg(feature = "metrics")]
        if let Some(mx) = &self.metrics {
            mx.response(resp);
        }
        match resp.reply {
            Reply::Granted { .. } => self.stats.granted += 1,
            Reply::Refused { .. } => self.stats.refused += 1,
            Reply::Error { .. } => self.stats.errors += 1,
            _ => {}
        }
    }

    /// The rtkit-style burst limit of the client's rule.
    fn rate(&mut self, client: &Client) -> Result<(), Response> {
        let Some((per_burst, burst_s)) = self.policy.rate_for(&client.peer) else {
            return Err(refused(
                RefusalKind::Policy,
                format!(
                    "{} may not reserve: no [[client]] rule of the daemon's config names the user or one of its groups",
                    client.peer.label()
                ),
            ));
        };
        let now = mono_ns();
        let burst_ns = u64::from(burst_s) * 1_000_000_000;
        self.bursts.retain(|_, b| !b.expired(now, burst_ns));
        let b = self.bursts.entry(client.cred.uid).or_default();
        b.take(now, per_burst, burst_ns).map_err(|r| {
            Response::new(Reply::Refused {
                reason: RefusalKind::Rate,
                message: format!(
                    "{}: more than {} requests in {} s; ask again in {} ms",
                    client.peer.label(),
                    r.limit,
                    burst_s,
                    r.retry_after_ns.div_ceil(1_000_000)
                ),
                cpus: Vec::new(),
                retry_after_ms: Some(r.retry_after_ns.div_ceil(1_000_000)),
            })
        })
    }

    fn reserve(&mut self, client: &Client, r: &ReserveRequest, token: Option<u64>) -> Answer {
        if self.stopping {
            return Answer::Now(Response::error(
                ErrorCode::ShuttingDown,
                "the daemon is stopping",
            ));
        }
        if let Err(resp) = self.rate(client) {
            return Answer::Now(resp);
        }
        let v = match r.validate() {
            Ok(v) => v,
            Err(Invalid::Error(e)) => return Answer::Now(Response::error(e.code, e.message)),
            Err(Invalid::Refused(kind, m)) => return Answer::Now(refused(kind, m)),
        };
        self.try_reserve(client, &v, token)
            .unwrap_or_else(Answer::Now)
    }

    fn try_reserve(
        &mut self,
        client: &Client,
        v: &ValidReserve,
        token: Option<u64>,
    ) -> Result<Answer, Response> {
        // For an existing process, the grant is the target's: its threads,
        // watched until it exits; the requester's policy and credentials.
        let target_client;
        let client = match v.target {
            Some(t) => {
                target_client = self.target_client(client, t)?;
                &target_client
            }
            None => client,
        };
        let pid = client.cred.pid;
        let tids = match v.target {
            Some(t) if t.all_threads => target::all_threads(&self.host, pid)?,
            _ if v.threads.is_empty() => vec![pid],
            // Named as the client sees them (its PID namespace, peer.rs).
            None => crate::daemon::peer::translate_tids(&self.host, pid, &v.threads),
            _ => v.threads.clone(),
        };
        let started = self.check_threads(pid, &tids)?;
        let irq = self.resolve_irq(v.irq.as_ref())?;
        let count = tids.len() as u32;
        let ask = Ask {
            utilisation: v.demand.utilisation() * f64::from(count),
            hard: v.demand.is_hard(),
            priority: v.demand.priority(),
            irq: irq.is_some(),
        };
        let allow = self
            .policy
            .decide(&client.peer, &ask, &self.usage(client.cred.uid))
            .map_err(|e| refused(RefusalKind::Policy, e.to_string()))?;
        let ask = Allowed {
            v,
            tids,
            started,
            irq,
            limits: (allow.rttime_us, allow.memlock_bytes),
        };
        match token {
            Some(token) => self.start_grant(token, client, ask),
            None => self.grant_admitted(client, ask).map(Answer::Now),
        }
    }

    /// Each thread belongs to the process (the caller, or the one it named)
    /// and holds no grant yet. Each thread's start time, as read.
    pub(in crate::daemon) fn check_threads(
        &self,
        pid: u32,
        tids: &[u32],
    ) -> Result<Vec<(u32, u64)>, Response> {
        let mut started = Vec::with_capacity(tids.len());
        for &tid in tids {
            // Taken before the read, held once the thread passes: for the
            // grant's life it answers `tasks::same_task` (host/task_handles.rs).
            // One held and alive already (a thread that asks again) is
            // the thread that has the tid now: the read below is its.
            let handle = (!self.host.holding_task(tid))
                .then(|| self.host.task_handle(tid))
                .flatten();
            let Some(info) = thread_info(&self.host, pid, tid) else {
                return Err(refused(
                    RefusalKind::Permission,
                    format!("thread {tid} is not a thread of process {pid}"),
                ));
            };
            // A zombie (or dead) thread will never run: nothing to grant.
            if let st @ ('Z' | 'X') = info.state {
                return Err(Response::error(
                    ErrorCode::Gone,
                    format!(
                        "thread {tid} has exited (state {st}): it will never run again, so it cannot be granted"
                    ),
                ));
            }
            if let Some(g) = self
                .grants
                .values()
                .chain(self.in_flight_grants())
                .find(|g| g.threads.iter().any(|t| t.tid == tid))
            {
                return Err(refused(
                    RefusalKind::Permission,
                    format!("thread {tid} already holds reservation {}", g.id),
                ));
            }
            if let Some(h) = handle {
                self.host.hold_task(tid, info.start_time, h);
            }
            started.push((tid, info.start_time));
        }
        Ok(started)
    }

    /// Each thread's before-state: read afresh (`fresh`), or taken over
    /// from a grant still being revoked, with its I/O priority change.
    /// `started`: each thread and its start time, as `check_threads` read
    /// them for this request.
    fn threads_before(
        &mut self,
        started: &[(u32, u64)],
        io_target: Option<u16>,
        resources: &mut crate::resources::grant::GrantResources,
    ) -> (Vec<ThreadBefore>, Vec<u32>) {
        let mut threads = Vec::new();
        let mut fresh_tids = Vec::new();
        for &(tid, start_time) in started {
            // A thread still leaving an earlier grant keeps that grant's before-state.
            let t = match self.take_deferred_thread(tid, io_target.is_some()) {
                Some((t, io)) => {
                    if let (Some(io), Some(new)) = (io, io_target) {
                        carry_ioprio(&mut resources.ioprio, io, new);
                    }
                    t
                }
                None => {
                    fresh_tids.push(tid);
                    grant::new_thread(tid, start_time)
                }
            };
            threads.push(t);
        }
        (threads, fresh_tids)
    }

    /// The answer for a grant in effect, which the Manager now holds: what
    /// each thread was doing (a sleeping or stopped one runs under its
    /// policy when it next wakes, docs/protocol.md) and which are pending.
    fn granted(&mut self, g: Grant) -> Response {
        let pending = self.note_pending(&g, true);
        let mut info = info_of(&g);
        info.pending = pending;
        for t in &g.threads {
            match tasks::state(&self.host, t.tid) {
                Some('S' | 'D' | 'I') => info.asleep.push(t.tid),
                Some('T' | 't') => info.stopped.push(t.tid),
                _ => {}
            }
        }
        self.grants.insert(g.id, g);
        Response::new(Reply::Granted {
            reservation: Box::new(info),
        })
    }

    /// An IRQ the request may steer: known, not left alone by the partition,
    /// not steered for another reservation.
    fn resolve_irq(&self, irq: Option<&IrqRef>) -> Result<Option<u32>, Response> {
        let Some(irq) = irq else { return Ok(None) };
        let no = |m: String| refused(RefusalKind::Irq, m);
        let n = match irq {
            IrqRef::Number(n) => *n,
            IrqRef::Name(name) => {
                let table = crate::irq::interrupts_table(&self.host).unwrap_or_default();
                table
                    .iter()
                    .find(|(k, (_, desc))| {
                        k.parse::<u32>().is_ok()
                            && desc.split_whitespace().last() == Some(name.as_str())
                    })
                    .and_then(|(k, _)| k.parse().ok())
                    .ok_or_else(|| no(format!("no IRQ named {name:?} in /proc/interrupts")))?
            }
        };
        if !self.host.exists(format!("/proc/irq/{n}/smp_affinity")) {
            return Err(no(format!("IRQ {n} does not exist")));
        }
        if self.applied.plan.irq_leave.contains(&n) {
            return Err(no(format!(
                "IRQ {n} is left alone by the partition config (irq.leave)"
            )));
        }
        if let Some(g) = self
            .grants
            .values()
            .find(|g| g.irq.as_ref().is_some_and(|(i, _)| *i == n))
        {
            return Err(no(format!(
                "IRQ {n} is steered to CPU {} for reservation {}",
                g.cpu, g.id
            )));
        }
        Ok(Some(n))
    }
}

/// An error of the kernel during a grant: the client or a thread gone, or the errno.
fn gone(e: HostError) -> Response {
    if e.is_gone() {
        Response::error(
            ErrorCode::Gone,
            format!("the client or a thread exited during the grant: {e}"),
        )
    } else {
        Response::error(ErrorCode::Os, e.to_string())
    }
}

/// A thread taken over from a grant still being revoked: its I/O priority
/// now is the earlier grant's, so the new grant's change starts from the
/// earlier grant's `old` (the thread's priority before rtmgr), and none is
/// recorded when that already is `new`.
fn carry_ioprio(changes: &mut Vec<IoprioChange>, earlier: IoprioChange, new: u16) {
    changes.retain(|c| c.tid != earlier.tid);
    if earlier.old != new {
        changes.push(IoprioChange { new, ..earlier });
    }
}

mod granting;
mod off_loop;
mod pending;
mod queries;
mod revoke;
mod share;
mod stranded;
mod target;

pub(in crate::daemon) use granting::Allowed;
pub use granting::Answer;
pub use queries::info_of;
