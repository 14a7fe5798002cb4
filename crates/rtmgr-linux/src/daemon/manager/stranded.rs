//! The Manager's side of stranded threads (`daemon/stranded.rs`: how a
//! thread is watched; budget-based RTAI §3.3): a hard grant's thread
//! runnable without running for several periods gets its policy set again.

use super::Manager;
use crate::daemon::stranded::{kernel_view, limit_ns, stuck_for, EVERY_NS};
use crate::tasks;

impl Manager {
    /// Look at the hard grants' threads (the server calls it often; it looks
    /// every `EVERY_NS`) and repair the stranded ones. Returns the threads
    /// repaired now.
    pub fn repair_stranded(&mut self, now_ns: u64) -> Vec<u32> {
        if now_ns.saturating_sub(self.stranded.last_ns) < EVERY_NS {
            return Vec::new();
        }
        self.stranded.last_ns = now_ns;
        let mut watched = Vec::new();
        let mut stuck = Vec::new();
        for g in self.grants.values().filter(|g| g.demand.is_hard()) {
            // A pending thread (SCHED_FIFO 1) is `pending.rs`'s.
            for t in g.threads.iter() {
                if self.pending.threads.contains_key(&t.tid) {
                    continue;
                }
                watched.push(t.tid);
                let Some(for_ns) = stuck_for(&mut self.stranded.seen, &self.host, t.tid, now_ns)
                else {
                    continue;
                };
                if for_ns >= limit_ns(g) && tasks::same_task(&self.host, t.tid, t.start_time) {
                    stuck.push((g.id, g.cpu, t.tid, t.attr, for_ns));
                }
            }
        }
        self.stranded.seen.retain(|tid, _| watched.contains(tid));
        let mut repaired = Vec::new();
        for (id, cpu, tid, before, for_ns) in stuck {
            let Some(g) = self.grants.get(&id) else {
                continue;
            };
            let want = crate::daemon::grant::granted_attr(&g.demand);
            let kernel = kernel_view(&self.host, tid, rtmgr_sys::time::mono_ns());
            // The same attributes again change nothing in the kernel: the
            // thread's own policy for a moment, then the grant's (it is on
            // its RT CPU's run queue, where the kernel admits it).
            let r = self
                .host
                .set_attr(tid, &before)
                .and_then(|()| self.host.set_attr(tid, &want));
            match r {
                Ok(()) => {
                    tracing::warn!(
                        "reservation {id}: thread {tid} on CPU {cpu} was runnable without running for {} ms ({kernel}); its policy was set again",
                        for_ns / 1_000_000
                    );
                    self.stranded.repaired += 1;
                    self.stranded.seen.remove(&tid);
                    #[cfg(feature = "metrics")]
                    if let Some(mx) = &self.metrics {
                        mx.stranded(cpu);
                    }
                    repaired.push(tid);
                }
                Err(e) => tracing::warn!(
                    "reservation {id}: thread {tid} on CPU {cpu} is stranded (runnable, not running for {} ms) and could not be repaired: {e}",
                    for_ns / 1_000_000
                ),
            }
        }
        repaired
    }
}
