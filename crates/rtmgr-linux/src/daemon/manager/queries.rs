//! What the daemon tells about itself: a client's reservations, the status
//! of the RT CPUs and the counters, and the usage a user's policy is checked
//! against (DROPS §4.1: the resource manager answers what it has granted).

use super::{Grant, Manager};
use crate::daemon::peer::Client;
use rtmgr_core::admission::policy::Usage;
use rtmgr_core::protocol::{
    CpuStatus, PendingStatus, Reply, ReservationInfo, Response, StatusInfo,
};
use rtmgr_sys::time::mono_ns;

impl Manager {
    pub(super) fn usage(&self, uid: u32) -> Usage {
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

    /// A grant as clients see it, with its pending threads.
    pub fn info(&self, g: &Grant) -> ReservationInfo {
        let mut info = info_of(g);
        info.pending = g
            .threads
            .iter()
            .map(|t| t.tid)
            .filter(|tid| self.pending.threads.get(tid).is_some_and(|p| p.id == g.id))
            .collect();
        info
    }

    pub fn grants(&self) -> impl Iterator<Item = &Grant> {
        self.grants.values()
    }

    /// Every (tid, start time) a grant names, in effect, being applied or
    /// waiting for its placement to go back, and the grants' processes.
    pub(in crate::daemon) fn granted_tasks(&self) -> std::collections::HashSet<(u32, u64)> {
        self.grants
            .values()
            .chain(self.in_flight_grants())
            .chain(self.deferred.iter().map(|d| &d.grant))
            .flat_map(|g| {
                g.threads
                    .iter()
                    .map(|t| (t.tid, t.start_time))
                    .chain([(g.pid, g.pid_start)])
            })
            .collect()
    }

    pub(super) fn list(&self, client: &Client) -> Response {
        let reservations = self
            .grants
            .values()
            .filter(|g| client.cred.uid == 0 || g.uid == client.cred.uid)
            .map(|g| self.info(g))
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
            stranded_repaired: self.stranded.repaired,
            pending_fallbacks: self.pending.fallbacks,
            pending_refused: self.pending.refused,
            pending_held: self.pending.held,
            loop_yields: self.loop_yields(),
            pending: self
                .pending
                .threads
                .iter()
                .map(|(tid, p)| PendingStatus {
                    tid: *tid,
                    id: p.id,
                    cpu: p.cpu,
                    reason: p.reason.clone(),
                })
                .collect(),
            resources: self.resources.status.clone(),
            live: self
                .live
                .as_ref()
                .map(|l| l.snapshot(&self.host, mono_ns())),
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
        memlock_reserved: (g.resources.memlock_bytes > 0).then_some(g.resources.memlock_bytes),
        io_class: g.resources.io_label(),
        cache: g.resources.cache_note.clone(),
        asleep: Vec::new(),
        stopped: Vec::new(),
        pending: Vec::new(),
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
        // A thread still at SCHED_FIFO 1: pending again (`pending.rs`).
        self.note_pending(&g, false);
        self.grants.insert(g.id, g);
    }
}
