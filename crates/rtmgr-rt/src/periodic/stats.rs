//! Statistics of a periodic task (budget-based RTAI §4: budget rate,
//! exhaustions, ignored waits, handler overhead): counters readable from any
//! thread without locks, mirrored from the task's budget account.

use super::ring::StatsRing;
use rtmgr_core::budget::BudgetAccount;
use std::sync::atomic::{AtomicU64, Ordering::*};

/// Counters readable from any thread (all ns unless named otherwise).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskStats {
    /// Periods (windows) closed.
    pub periods: u64,
    /// Windows in which the budget ran out.
    pub exhaustions: u64,
    /// `wait_period` calls ignored (delayed waits, seed §3.2).
    pub ignored_waits: u64,
    /// Releases reported missed.
    pub missed: u64,
    /// Pending delayed waits now (the seed's `if_wait`).
    pub if_wait: u64,
    /// Exhaustions that found `if_wait` at its cap.
    pub if_wait_saturated: u64,
    /// SIGXCPU received (hard mode, SCHED_FLAG_DL_OVERRUN).
    pub kernel_overruns: u64,
    /// Budget-timer signals handled.
    pub expirations: u64,
    /// Thread CPU time spent in the signal handler, excluding the deliberate
    /// spin to the exact budget end: sum and maximum per expiration.
    pub handler_cpu_sum: u64,
    pub handler_cpu_max: u64,
    /// CPU time spent spinning to the exact budget end (part of the budget).
    pub spin_cpu_sum: u64,
    /// Timer expiry → handler entry (CLOCK_MONOTONIC): sum and maximum.
    pub signal_late_sum: u64,
    pub signal_late_max: u64,
    /// EarlySpin's learned margin now.
    pub margin: u64,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) periods: AtomicU64,
    pub(super) exhaustions: AtomicU64,
    pub(super) ignored_waits: AtomicU64,
    pub(super) missed: AtomicU64,
    pub(super) if_wait: AtomicU64,
    pub(super) if_wait_saturated: AtomicU64,
    pub(super) kernel_overruns: AtomicU64,
    pub(super) expirations: AtomicU64,
    pub(super) handler_cpu_sum: AtomicU64,
    pub(super) handler_cpu_max: AtomicU64,
    pub(super) spin_cpu_sum: AtomicU64,
    pub(super) signal_late_sum: AtomicU64,
    pub(super) signal_late_max: AtomicU64,
    pub(super) margin: AtomicU64,
}

/// The part of a task other threads may read: statistics ring and counters.
pub struct TaskShared {
    pub(super) name: String,
    pub(super) ring: StatsRing,
    pub(super) c: Counters,
}

impl TaskShared {
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Per-period records, lock-free (see [`StatsRing::read_from`]).
    pub fn ring(&self) -> &StatsRing {
        &self.ring
    }
    pub fn stats(&self) -> TaskStats {
        let c = &self.c;
        TaskStats {
            periods: c.periods.load(Relaxed),
            exhaustions: c.exhaustions.load(Relaxed),
            ignored_waits: c.ignored_waits.load(Relaxed),
            missed: c.missed.load(Relaxed),
            if_wait: c.if_wait.load(Relaxed),
            if_wait_saturated: c.if_wait_saturated.load(Relaxed),
            kernel_overruns: c.kernel_overruns.load(Relaxed),
            expirations: c.expirations.load(Relaxed),
            handler_cpu_sum: c.handler_cpu_sum.load(Relaxed),
            handler_cpu_max: c.handler_cpu_max.load(Relaxed),
            spin_cpu_sum: c.spin_cpu_sum.load(Relaxed),
            signal_late_sum: c.signal_late_sum.load(Relaxed),
            signal_late_max: c.signal_late_max.load(Relaxed),
            margin: c.margin.load(Relaxed),
        }
    }
    pub(super) fn mirror(&self, a: &BudgetAccount) {
        let t = a.totals();
        let c = &self.c;
        c.periods.store(t.periods, Relaxed);
        c.exhaustions.store(t.exhaustions, Relaxed);
        c.ignored_waits.store(t.ignored_waits, Relaxed);
        c.missed.store(t.missed, Relaxed);
        c.if_wait.store(a.if_wait() as u64, Relaxed);
        c.if_wait_saturated.store(t.if_wait_saturated, Relaxed);
        c.margin.store(a.margin_ns(), Relaxed);
    }
}
