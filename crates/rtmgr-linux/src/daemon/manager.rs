//! The request handling of the daemon, behind one API that every front end
//! calls (the Unix socket now; a D-Bus front end and metrics later): DROPS
//! §4.1's resource manager that gives resources on request. `Manager` owns
//! the admission state, the client policy, the grants and their journal; a
//! front end identifies the client (`peer::Client`) and calls `handle`.

use super::domains::Domains;
use super::grant;
use super::journal::{Grant, GrantJournal, Record};
use super::peer::{thread_of, Client};
use crate::partition::Applied;
use crate::{tasks, Host, HostError};
use rtmgr_core::admission::policy::{Ask, ClientPolicy, Usage};
use rtmgr_core::admission::rate::Burst;
use rtmgr_core::admission::{Admission, AdmissionConfig};
use rtmgr_core::protocol::{
    CpuStatus, ErrorCode, Invalid, IrqRef, Op, RefusalKind, Reply, Request, ReservationInfo,
    ReserveRequest, Response, StatusInfo, ValidReserve,
};
use rtmgr_sys::pidfd::Pidfd;
use rtmgr_sys::time::mono_ns;
use std::collections::BTreeMap;
use std::os::fd::{AsFd, BorrowedFd};

/// Counters for `status`.
#[derive(Debug, Default, Clone)]
pub struct Stats {
    pub requests: u64,
    pub granted: u64,
    pub refused: u64,
    pub errors: u64,
    pub drift: BTreeMap<String, u64>,
}

/// A process holding grants, watched until it exits.
#[derive(Debug)]
pub(super) struct Watched {
    pub start_time: u64,
    pub pidfd: Option<Pidfd>,
}

pub struct Manager {
    pub(super) host: Host,
    pub(super) applied: Applied,
    pub(super) domains: Domains,
    policy: ClientPolicy,
    pub(super) admission: Admission,
    pub(super) grants: BTreeMap<u64, Grant>,
    pub(super) watched: BTreeMap<u32, Watched>,
    /// Half-revoked deadline grants waiting out their last period.
    pub(super) deferred: Vec<super::release::Deferred>,
    /// Threads that left SCHED_DEADLINE: when they may leave their RT CPU.
    pub(super) leaving: BTreeMap<u32, u64>,
    pub(super) journal: GrantJournal,
    header: Vec<Record>,
    next_id: u64,
    bursts: BTreeMap<u32, Burst>,
    pub stats: Stats,
    started_ns: u64,
    stopping: bool,
    /// "running", "off", or why it stopped.
    pub balancer: String,
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
            deferred: Vec::new(),
            leaving: BTreeMap::new(),
            journal,
            header,
            next_id: next_id.max(1),
            bursts: BTreeMap::new(),
            stats: Stats::default(),
            started_ns: mono_ns(),
            stopping: false,
            balancer: "off".into(),
        }
    }

    /// Answer one request of `client`.
    pub fn handle(&mut self, client: &Client, req: Request) -> Response {
        self.stats.requests += 1;
        let resp = match req.op {
            Op::Reserve(r) => self.reserve(client, &r),
            Op::Release { id } => self.release(client, id),
            Op::List => self.list(client),
            Op::Status => Response::new(Reply::Status {
                status: Box::new(self.status()),
            }),
        };
        self.count(&resp);
        resp
    }

    /// Count a response made outside `handle` (a malformed line).
    pub fn count(&mut self, resp: &Response) {
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

    fn reserve(&mut self, client: &Client, r: &ReserveRequest) -> Response {
        if self.stopping {
            return Response::error(ErrorCode::ShuttingDown, "the daemon is stopping");
        }
        if let Err(resp) = self.rate(client) {
            return resp;
        }
        let v = match r.validate() {
            Ok(v) => v,
            Err(Invalid::Error(e)) => return Response::error(e.code, e.message),
            Err(Invalid::Refused(kind, m)) => return refused(kind, m),
        };
        match self.try_reserve(client, &v) {
            Ok(resp) | Err(resp) => resp,
        }
    }

    fn try_reserve(&mut self, client: &Client, v: &ValidReserve) -> Result<Response, Response> {
        let pid = client.cred.pid;
        let tids = if v.threads.is_empty() {
            vec![pid]
        } else {
            v.threads.clone()
        };
        for &tid in &tids {
            if thread_of(&self.host, pid, tid).is_none() {
                return Err(refused(
                    RefusalKind::Permission,
                    format!("thread {tid} is not a thread of the calling process {pid}"),
                ));
            }
            if let Some(g) = self
                .grants
                .values()
                .find(|g| g.threads.iter().any(|t| t.tid == tid))
            {
                return Err(refused(
                    RefusalKind::Permission,
                    format!("thread {tid} already holds reservation {}", g.id),
                ));
            }
        }
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
        let placed = self.admission.check(&v.demand, count, v.cpu).map_err(|r| {
            Response::new(Reply::Refused {
                reason: RefusalKind::Admission,
                message: r.to_string(),
                cpus: r.cpus,
                retry_after_ms: None,
            })
        })?;
        let layout = self.applied.layout.clone();
        let gone = |e: HostError| {
            if e.is_gone() {
                Response::error(
                    ErrorCode::Gone,
                    format!("the client or a thread exited during the grant: {e}"),
                )
            } else {
                Response::error(ErrorCode::Os, e.to_string())
            }
        };
        let mut threads = Vec::new();
        for &tid in &tids {
            // A thread still leaving an earlier grant keeps that grant's before-state.
            let t = match self.take_deferred_thread(tid) {
                Some(t) => t,
                None => grant::snapshot_thread(&self.host, &layout, pid, tid).map_err(gone)?,
            };
            threads.push(t);
        }
        // Limits are per process: the first grant of a process sets them,
        // later ones carry the same record, the last one to go restores them.
        let limits = match self
            .grants
            .values()
            .chain(self.deferred.iter().map(|d| &d.grant))
            .find(|g| g.pid == pid)
        {
            Some(g) => g.limits.clone(),
            None => grant::limit_changes(
                &self.host,
                pid,
                &v.demand,
                allow.rttime_us,
                allow.memlock_bytes,
                client.cred.uid != 0,
            )
            .map_err(gone)?,
        };
        let first_of_pid = !self.pid_busy(pid);
        let irq = match irq {
            Some(n) => Some((n, crate::irq::raw_mask(&self.host, n).map_err(gone)?)),
            None => None,
        };
        let g = Grant {
            id: self.next_id,
            pid,
            pid_start: client.start_time,
            uid: client.cred.uid,
            name: v.name.clone(),
            cpu: placed.cpu,
            class: v.class.to_string(),
            demand: v.demand,
            threads,
            limits,
            irq,
            cgroup: self.domains.dir(placed.cpu).cloned(),
            response_ns: placed.response_ns,
        };
        self.next_id += 1;
        self.journal
            .record(&Record::Grant(Box::new(g.clone())))
            .map_err(|e| Response::error(ErrorCode::Os, format!("grants journal: {e}")))?;
        if let Err(e) = grant::apply(&self.host, &layout, &g, first_of_pid) {
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
        if !tasks::same_task(&self.host, pid, client.start_time) {
            let _ = self.journal.record(&Record::Release { id: g.id });
            self.revoke(g.id, &g, first_of_pid);
            return Err(Response::error(
                ErrorCode::Gone,
                format!("process {pid} exited during the grant"),
            ));
        }
        self.admission.insert(g.id, g.demand, count, &placed);
        self.watch(pid, client.start_time);
        let info = info_of(&g);
        self.grants.insert(g.id, g);
        Ok(Response::new(Reply::Granted {
            reservation: Box::new(info),
        }))
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

    fn usage(&self, uid: u32) -> Usage {
        let mut u = Usage::default();
        for g in self.grants.values() {
            let x = g.demand.utilisation() * g.threads.len() as f64;
            u.total_utilisation += x;
            if g.uid == uid {
                u.user_utilisation += x;
                u.user_reservations += 1;
            }
        }
        u
    }

    pub(super) fn watch(&mut self, pid: u32, start_time: u64) {
        if self.watched.contains_key(&pid) {
            return;
        }
        // Opened after the grant, checked against the start time: the pidfd
        // names the client, not a process that reused its id.
        let pidfd = Pidfd::open(pid)
            .ok()
            .filter(|_| tasks::same_task(&self.host, pid, start_time));
        self.watched.insert(pid, Watched { start_time, pidfd });
    }

    fn release(&mut self, client: &Client, id: u64) -> Response {
        if let Err(resp) = self.rate(client) {
            return resp;
        }
        let Some(g) = self.grants.get(&id) else {
            return Response::error(ErrorCode::NotFound, format!("no reservation {id}"));
        };
        if client.cred.uid != 0 && client.cred.uid != g.uid {
            return refused(
                RefusalKind::Permission,
                format!(
                    "reservation {id} belongs to uid {}, not to {}",
                    g.uid,
                    client.peer.label()
                ),
            );
        }
        self.revoke_id(id);
        Response::new(Reply::Released { id })
    }

    /// Revoke one grant: journal first, then undo, then forget. A live
    /// thread that was SCHED_DEADLINE (in this grant or one it took over)
    /// gets its policy back now and its placement a period later (`release.rs`).
    pub fn revoke_id(&mut self, id: u64) -> Vec<String> {
        let Some(g) = self.grants.remove(&id) else {
            return Vec::new();
        };
        self.admission.remove(id);
        let problems = if let Some(due_ns) = self.placement_due(&g) {
            let _ = self.journal.record(&Record::Revoking { id });
            let problems = grant::revoke_policy(&self.host, &g);
            self.defer(g, due_ns);
            problems
        } else {
            let _ = self.journal.record(&Record::Release { id });
            let last_of_pid = !self.pid_busy(g.pid);
            let problems = grant::revoke(&self.host, &self.applied.layout, &g, last_of_pid);
            if last_of_pid {
                self.watched.remove(&g.pid);
            }
            problems
        };
        for p in &problems {
            tracing::warn!("reservation {id}: could not undo {p}");
        }
        self.compact();
        problems
    }

    pub(super) fn compact(&mut self) {
        let live: Vec<&Grant> = self.grants.values().collect();
        let releasing: Vec<&Grant> = self.deferred.iter().map(|d| &d.grant).collect();
        if let Err(e) = self.journal.maybe_compact(&self.header, &live, &releasing) {
            tracing::warn!("grants journal compaction: {e}");
        }
    }

    fn revoke(&mut self, id: u64, g: &Grant, restore_limits: bool) -> Vec<String> {
        let problems = grant::revoke(&self.host, &self.applied.layout, g, restore_limits);
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

    /// The pidfds a front end polls (readable = that client exited).
    pub fn pidfds(&self) -> Vec<(u32, BorrowedFd<'_>)> {
        self.watched
            .iter()
            .filter_map(|(pid, w)| w.pidfd.as_ref().map(|f| (*pid, f.as_fd())))
            .collect()
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

    pub fn grants(&self) -> impl Iterator<Item = &Grant> {
        self.grants.values()
    }

    /// Rewrite the journal: header and the live grants only.
    pub(super) fn rewrite_journal(&mut self) -> Result<(), HostError> {
        let live: Vec<&Grant> = self.grants.values().collect();
        let releasing: Vec<&Grant> = self.deferred.iter().map(|d| &d.grant).collect();
        self.journal.rewrite(&self.header, &live, &releasing)
    }

    fn list(&self, client: &Client) -> Response {
        let reservations = self
            .grants
            .values()
            .filter(|g| client.cred.uid == 0 || g.uid == client.cred.uid)
            .map(info_of)
            .collect();
        Response::new(Reply::List { reservations })
    }

    pub fn status(&self) -> StatusInfo {
        let a = &self.applied;
        StatusInfo {
            daemon_pid: std::process::id(),
            uptime_s: (mono_ns() - self.started_ns) as f64 / 1e9,
            rt_cpus: a.plan.rt.to_list(),
            nrt_cpus: a.plan.nrt.to_list(),
            layout: a.layout.name().into(),
            root_domains: self.domains.note.clone(),
            cap: self.admission.cfg.cap,
            deadline_share: self.admission.cfg.dl_share,
            placement: format!("{:?}", self.admission.cfg.placement),
            cpus: self
                .admission
                .cpus()
                .iter()
                .map(|c| CpuStatus {
                    cpu: c.cpu,
                    online: c.online,
                    utilisation: c.utilisation(),
                    deadline_utilisation: c.hard_utilisation(),
                    reservations: c.reservations(),
                })
                .collect(),
            reservations: self.grants.len(),
            requests: self.stats.requests,
            granted: self.stats.granted,
            refused: self.stats.refused,
            errors: self.stats.errors,
            balancer: self.balancer.clone(),
            drift: self.stats.drift.clone(),
        }
    }
}

/// A grant as clients see it.
pub fn info_of(g: &Grant) -> ReservationInfo {
    let limit = |k| {
        g.limits
            .iter()
            .find(|c| c.kind == k)
            .and_then(|c| c.new.soft)
            .unwrap_or(0)
    };
    ReservationInfo {
        id: g.id,
        pid: g.pid,
        uid: g.uid,
        name: g.name.clone(),
        cpu: g.cpu,
        class: g.class.clone(),
        policy: if g.demand.is_hard() {
            "SCHED_DEADLINE"
        } else {
            "SCHED_FIFO"
        }
        .into(),
        period_ns: g.demand.period_ns,
        budget_ns: g.demand.budget_ns,
        deadline_ns: g.demand.deadline_ns,
        threads: g.threads.iter().map(|t| t.tid).collect(),
        irq: g.irq.as_ref().map(|(n, _)| *n),
        response_ns: (!g.demand.is_hard()).then_some(g.response_ns),
        rttime_us: limit(crate::host::LimitKind::RtTime),
        memlock_bytes: limit(crate::host::LimitKind::MemLock),
    }
}

impl Manager {
    /// Take over a grant of a previous daemon whose client lives on (its
    /// admission was decided then; it is recorded as it is).
    pub fn adopt(&mut self, g: Grant) {
        self.admission
            .force(g.id, g.demand, g.threads.len() as u32, g.cpu);
        self.watch(g.pid, g.pid_start);
        self.next_id = self.next_id.max(g.id + 1);
        self.grants.insert(g.id, g);
    }
}
