//! The Manager's side of the request loop's bounded share of its CPU
//! (`daemon/loop_share.rs`; ARTiS §2: the NRT CPUs run ordinary work).

use super::Manager;
use crate::daemon::loop_share::Bound;

impl Manager {
    /// Bound the calling thread's (the request loop's) share of its CPU
    /// from now, if it is at SCHED_FIFO `priority`.
    pub(in crate::daemon) fn bound_loop_share(&mut self, priority: u32) {
        let fifo = crate::daemon::loop_priority::is_fifo(&self.host);
        self.loop_bound = Bound::new(priority).filter(|_| fifo);
    }

    /// Each pass of the loop: yield or resume SCHED_FIFO when it is time
    /// (a yield counted in the metrics too).
    pub fn share_the_cpu(&mut self) {
        let Some(b) = self.loop_bound.as_mut() else {
            return;
        };
        let yielded = b.look(&self.host) == crate::daemon::loop_share::Change::Yield;
        #[cfg(feature = "metrics")]
        if let Some(mx) = self.metrics.as_ref().filter(|_| yielded) {
            mx.loop_yield();
        }
        #[cfg(not(feature = "metrics"))]
        let _ = yielded;
    }

    /// Windows in which the loop yielded its SCHED_FIFO, since start.
    pub(in crate::daemon) fn loop_yields(&self) -> u64 {
        self.loop_bound.as_ref().map_or(0, |b| b.share.yields)
    }
}
