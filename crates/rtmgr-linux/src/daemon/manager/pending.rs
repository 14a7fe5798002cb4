//! The Manager's side of pending threads (`daemon/pending.rs`: what is
//! watched; budget-based RTAI §3.3: hard reservations as SCHED_DEADLINE):
//! noted after a grant, SCHED_DEADLINE set once seen on the RT CPU.

use super::Manager;
use crate::daemon::grant;
use crate::daemon::grants_journal::Grant;
use crate::daemon::pending::{Pending, EVERY_NS};
use crate::daemon::stranded::server_and_cpu;
use crate::daemon::zero_lag::{as_it_leaves, spent_in_between};
use crate::tasks;
use rtmgr_sys::time::mono_ns;

/// A thread's deadline server as read just before its policy went back,
/// and its CPU time as of the same read (`hold_spent_servers`).
pub(in crate::daemon) struct ServerRead {
    tid: u32,
    server: crate::daemon::stranded::Server,
    cpu_ns: u64,
}

impl Manager {
    /// The longest the server loop may poll, ms: `pending::EVERY_NS` while
    /// threads are pending; `stranded::EVERY_NS` (20 ms) while hard grants
    /// are watched for stranded threads; 100 ms while revocations wait out
    /// a period or a root domain waits for its rebuild; by the end of the
    /// window while the loop has yielded its SCHED_FIFO (`loop_share.rs`);
    /// None (until the next reconciliation) when the daemon holds nothing,
    /// so that an idle daemon wakes once a `reconcile_ms`.
    pub fn wake_within_ms(&self) -> Option<u64> {
        let bound = self.loop_bound.as_ref();
        let resume = bound.and_then(|b| b.share.wake_within_ms(mono_ns()));
        let watch = self.watch_within_ms();
        [resume, watch].into_iter().flatten().min()
    }

    /// How soon the watched threads need the loop.
    fn watch_within_ms(&self) -> Option<u64> {
        if let Some(ms) = self.pending.wait_ms() {
            return Some(ms);
        }
        // A hard grant's threads are looked at for a stranded one every
        // `stranded::EVERY_NS`.
        if self.grants.values().any(|g| g.demand.is_hard()) {
            return Some(crate::daemon::stranded::EVERY_NS / 1_000_000);
        }
        let watching = !self.deferred.is_empty() || self.dl_leak.any_marked();
        watching.then_some(100)
    }

    /// A hard grant's threads at the placeholder after its apply (or found
    /// so at adoption): pending from now. Returns them.
    pub(in crate::daemon) fn note_pending(&mut self, g: &Grant, fresh: bool) -> Vec<u32> {
        if !g.demand.is_hard() {
            return Vec::new();
        }
        let mut tids = Vec::new();
        let now = mono_ns();
        for t in &g.threads {
            // At the placeholder, or held at its own policy until its last
            // server's 0-lag time (from the record, so also after a restart
            // during the hold).
            if self
                .host
                .get_attr(t.tid)
                .is_ok_and(|a| grant::is_placeholder(&a) || grant::is_held(t, &a, now))
            {
                let not_before_ns = t.hold_until_ns.filter(|&z| z > now);
                if fresh && not_before_ns.is_some() {
                    self.pending.held += 1;
                }
                self.hold_pending(t.tid, g.id, g.cpu, not_before_ns, now);
                tids.push(t.tid);
            }
        }
        if fresh && !tids.is_empty() {
            self.pending.fallbacks += tids.len() as u64;
            #[cfg(feature = "metrics")]
            if let Some(mx) = &self.metrics {
                mx.pending_fallback(g.cpu, tids.len() as u64);
            }
        }
        tids
    }

    /// Note a thread pending: at the placeholder until it is on its RT CPU's
    /// run queue and, if held, until `not_before_ns` (`zero_lag.rs`; the
    /// grant record's `hold_until_ns`, which `finish_pending` goes by).
    pub(in crate::daemon) fn hold_pending(
        &mut self,
        tid: u32,
        id: u64,
        cpu: u32,
        not_before_ns: Option<u64>,
        now: u64,
    ) {
        let reason = not_before_ns.map(|z| {
            format!(
                "held at its own policy for {:.1} ms more, until its last SCHED_DEADLINE server's 0-lag time: it spent its budget, and set sooner the kernel would leave it throttled (docs/serve.md \"Stranded threads\")",
                z.saturating_sub(now) as f64 / 1e6
            )
        });
        let p = Pending { id, cpu, reason };
        self.pending.threads.insert(tid, p);
    }

    /// A hard grant's threads leave SCHED_DEADLINE: each that spent its
    /// budget is held from it until its 0-lag time (`zero_lag.rs`). Its
    /// server is read now, before its policy goes back (the kernel hides it
    /// after), with its CPU time as of that read; the hold is decided after
    /// the switch (`hold_spent_after_switch`), from what it ran in between.
    /// A thread whose read shows no CPU time is decided now, with
    /// `zero_lag::as_it_leaves`'s margin. One /proc/<tid>/sched read per
    /// thread of a hard grant.
    pub(in crate::daemon) fn hold_spent_servers(&mut self, g: &Grant) -> Vec<ServerRead> {
        if !g.demand.is_hard() {
            return Vec::new();
        }
        let now = mono_ns();
        self.zero_lag.expire(now);
        let mut reads = Vec::new();
        for t in &g.threads {
            match server_and_cpu(&self.host, t.tid) {
                Some((server, Some(cpu_ns))) => reads.push(ServerRead {
                    tid: t.tid,
                    server,
                    cpu_ns,
                }),
                Some((server, None)) => self.hold_as_it_leaves(g, t.tid, server, now),
                None => {}
            }
        }
        reads
    }

    /// The policy went back: the server each thread left with is the one
    /// read less what it ran since (`zero_lag::spent_in_between`; its
    /// schedstat is exact now: the switch charged it); hold it if that is
    /// spent. A thread whose CPU time cannot be read now is decided with
    /// the margin.
    pub(in crate::daemon) fn hold_spent_after_switch(&mut self, g: &Grant, reads: &[ServerRead]) {
        let now = mono_ns();
        let (budget, period) = (g.demand.budget_ns, g.demand.period_ns);
        for r in reads {
            match tasks::exec_ns(&self.host, r.tid) {
                Some(cpu_after) => {
                    let s = spent_in_between(r.server, r.cpu_ns, cpu_after);
                    self.zero_lag
                        .leaving(&self.host, r.tid, s, budget, period, now);
                }
                None => self.hold_as_it_leaves(g, r.tid, r.server, now),
            }
        }
    }

    /// Hold a thread from the server read before its switch alone: a
    /// runnable one with less than `zero_lag::RUNNING_MARGIN_NS` left is
    /// counted as having spent it.
    fn hold_as_it_leaves(
        &mut self,
        g: &Grant,
        tid: u32,
        server: crate::daemon::stranded::Server,
        now: u64,
    ) {
        let runnable = || tasks::runnable(&self.host, tid);
        let s = as_it_leaves(server, runnable);
        let (budget, period) = (g.demand.budget_ns, g.demand.period_ns);
        self.zero_lag
            .leaving(&self.host, tid, s, budget, period, now);
    }

    /// A grant's threads are no longer pending (revoked).
    pub(in crate::daemon) fn forget_pending(&mut self, g: &Grant) {
        for t in &g.threads {
            if self
                .pending
                .threads
                .get(&t.tid)
                .is_some_and(|p| p.id == g.id)
            {
                self.pending.threads.remove(&t.tid);
            }
        }
    }

    /// Give SCHED_DEADLINE to the pending threads now on their RT CPU's run
    /// queue (the server calls it often; it looks every `EVERY_NS`, and
    /// does nothing when nothing is pending). Returns the threads switched.
    pub fn finish_pending(&mut self, now_ns: u64) -> Vec<u32> {
        if self.pending.threads.is_empty() || now_ns.saturating_sub(self.pending.last_ns) < EVERY_NS
        {
            return Vec::new();
        }
        self.pending.last_ns = now_ns;
        let mut done = Vec::new();
        let tids: Vec<u32> = self.pending.threads.keys().copied().collect();
        for tid in tids {
            let Some(p) = self.pending.threads.get(&tid).cloned() else {
                continue;
            };
            let Some(g) = self.grants.get(&p.id) else {
                self.pending.threads.remove(&tid);
                continue;
            };
            let Some(t) = g.threads.iter().find(|t| t.tid == tid) else {
                self.pending.threads.remove(&tid);
                continue;
            };
            if !tasks::same_task(&self.host, tid, t.start_time) {
                self.pending.threads.remove(&tid);
                continue;
            }
            // Held: not before the hold in the grant's record is over.
            let held = t.hold_until_ns.is_some_and(|z| now_ns < z);
            if held || tasks::run_queue_cpu(&self.host, tid) != Some(p.cpu) {
                continue;
            }
            let want = grant::granted_attr(&g.demand);
            match self.host.set_attr(tid, &want) {
                Ok(()) => {
                    tracing::info!(
                        "reservation {}: thread {tid} on CPU {}: SCHED_DEADLINE in place",
                        p.id,
                        p.cpu
                    );
                    self.pending.threads.remove(&tid);
                    done.push(tid);
                }
                Err(e) if e.is_gone() => {
                    self.pending.threads.remove(&tid);
                }
                // Bandwidth of threads that left SCHED_DEADLINE there comes
                // back within a period (or at the root domain's rebuild):
                // the next looks try again, nothing to report.
                Err(e)
                    if e.errno() == Some(libc::EBUSY)
                        && self
                            .dl_leak
                            .returning(p.cpu, now_ns.max(rtmgr_sys::time::mono_ns())) => {}
                Err(e) => {
                    let busy = e.errno() == Some(libc::EBUSY);
                    let reason = if busy {
                        format!(
                            "the kernel refused SCHED_DEADLINE on CPU {} (EBUSY: another deadline task or the fair server holds its bandwidth); SCHED_FIFO {} until it admits it",
                            p.cpu,
                            grant::PLACEHOLDER_PRIORITY
                        )
                    } else {
                        format!("SCHED_DEADLINE on CPU {}: {e}", p.cpu)
                    };
                    if p.reason.as_deref() != Some(reason.as_str()) {
                        tracing::warn!("reservation {}: thread {tid}: {reason}", p.id);
                        if busy {
                            self.pending.refused += 1;
                        }
                        if let Some(p) = self.pending.threads.get_mut(&tid) {
                            p.reason = Some(reason);
                        }
                    }
                }
            }
        }
        done
    }
}
