//! Hard grants' threads waiting for SCHED_DEADLINE (budget-based RTAI §3.3:
//! hard reservations as SCHED_DEADLINE; DROPS §4.1: the manager answers at
//! once). The kernel admits SCHED_DEADLINE only where a thread waits; one
//! that still waits on an NRT CPU's run queue when granted (asleep,
//! stopped) is placed and runs under SCHED_FIFO 1 (`grant::placeholder_attr`)
//! until it is seen on its RT CPU's run queue, when the server loop sets
//! SCHED_DEADLINE (docs/protocol.md "When the policy takes effect"). No
//! sleep: the loop looks every `EVERY_NS` while anything is pending.

use super::grant;
use super::journal::Grant;
use super::manager::Manager;
use crate::tasks;
use std::collections::BTreeMap;

/// Look at most this often (the server loop polls no longer than this
/// while anything is pending).
pub const EVERY_NS: u64 = 2_000_000;

/// One pending thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub id: u64,
    pub cpu: u32,
    /// Why it is still pending when it should not be (the kernel refused
    /// SCHED_DEADLINE on its RT CPU), else None.
    pub reason: Option<String>,
}

/// The pending threads and the counters of `status`.
#[derive(Debug, Default)]
pub struct PendingWatch {
    pub threads: BTreeMap<u32, Pending>,
    last_ns: u64,
    /// Threads given the placeholder since start.
    pub fallbacks: u64,
    /// SCHED_DEADLINE refused (EBUSY) on a pending thread's RT CPU, since start.
    pub refused: u64,
}

impl PendingWatch {
    /// The poll timeout the server loop may wait at most, ms (None: no limit).
    pub fn wait_ms(&self) -> Option<u64> {
        (!self.threads.is_empty()).then_some(EVERY_NS.div_ceil(1_000_000))
    }
}

impl Manager {
    /// The longest the server loop may poll, ms, while threads are pending.
    pub fn pending_wait_ms(&self) -> Option<u64> {
        self.pending.wait_ms()
    }

    /// A hard grant's threads at the placeholder after its apply (or found
    /// so at adoption): pending from now. Returns them.
    pub(in crate::daemon) fn note_pending(&mut self, g: &Grant, fresh: bool) -> Vec<u32> {
        if !g.demand.is_hard() {
            return Vec::new();
        }
        let mut tids = Vec::new();
        for t in &g.threads {
            if self
                .host
                .get_attr(t.tid)
                .is_ok_and(|a| grant::is_placeholder(&a))
            {
                let p = Pending {
                    id: g.id,
                    cpu: g.cpu,
                    reason: None,
                };
                self.pending.threads.insert(t.tid, p);
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
            if tasks::run_queue_cpu(&self.host, tid) != Some(p.cpu) {
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

#[cfg(test)]
#[path = "pending_tests.rs"]
mod pending_tests;
