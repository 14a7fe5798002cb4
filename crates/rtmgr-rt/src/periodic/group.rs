//! Group budgets (budget-based RTAI §5, future work there): several periodic
//! tasks of one process share one budget W per period P, soft mode only.
//! The group's consumption is read from the process CPU clock
//! (CLOCK_PROCESS_CPUTIME_ID), so **every thread of the process counts**, also
//! threads that are not members. Each member enforces the group budget on
//! itself from its own signal handler: when the group has used W in the
//! current period, the member is suspended until the next release (its
//! delayed wait is then ignored, seed §3.2); otherwise it re-arms its timer
//! for the remaining group budget divided by the number of members (they may
//! run in parallel on several CPUs).

use super::TaskError;
use rtmgr_core::budget::Reservation;
use rtmgr_sys::time::{mono_ns, process_cpu_ns};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;

/// A budget shared by several tasks of this process.
pub struct Group {
    res: Reservation,
    budget_ns: u64,
    /// Guards `win`/`base` (try-lock only: it is taken in signal handlers).
    lock: AtomicBool,
    win: AtomicU64,
    /// Process CPU clock when window `win` was first observed.
    base: AtomicU64,
    members: AtomicU64,
    exhaustions: AtomicU64,
    /// Process CPU time received in the last closed window.
    last_received: AtomicU64,
    /// A member found the budget used up in window `win`.
    exhausted_in_win: AtomicBool,
    /// Learned CPU charged after the decision to suspend (the spin stops
    /// this much early), as `SoftVariant::EarlySpin` learns it for one task.
    bias: AtomicU64,
}

/// The group's state as seen by a member at one instant.
pub(super) struct Seen {
    pub consumed: u64,
    pub window: u64,
}

impl Group {
    /// A group budget of `budget_ns` per `period_ns`, first release at
    /// `start_ns` (CLOCK_MONOTONIC, absolute; 0 = now).
    pub fn new(start_ns: u64, period_ns: u64, budget_ns: u64) -> Result<Arc<Group>, TaskError> {
        let start = if start_ns == 0 { mono_ns() } else { start_ns };
        let res = Reservation::new(start, period_ns, Some(budget_ns), None)?;
        Ok(Arc::new(Group {
            res,
            budget_ns,
            lock: AtomicBool::new(false),
            win: AtomicU64::new(0),
            base: AtomicU64::new(process_cpu_ns()),
            members: AtomicU64::new(0),
            exhaustions: AtomicU64::new(0),
            last_received: AtomicU64::new(0),
            exhausted_in_win: AtomicBool::new(false),
            bias: AtomicU64::new(0),
        }))
    }

    pub fn reservation(&self) -> &Reservation {
        &self.res
    }
    pub fn budget_ns(&self) -> u64 {
        self.budget_ns
    }
    /// Member-observed exhaustions of the group budget (one per member and period).
    pub fn exhaustions(&self) -> u64 {
        self.exhaustions.load(Relaxed)
    }
    /// Process CPU time received by the group in the last closed period.
    pub fn last_received_ns(&self) -> u64 {
        self.last_received.load(Relaxed)
    }
    pub fn members(&self) -> u64 {
        self.members.load(Relaxed)
    }

    pub(super) fn join(&self) {
        self.members.fetch_add(1, Relaxed);
    }
    pub(super) fn leave(&self) {
        self.members.fetch_sub(1, Relaxed);
    }
    pub(super) fn count_exhaustion(&self) {
        self.exhaustions.fetch_add(1, Relaxed);
        self.exhausted_in_win.store(true, Relaxed);
    }
    /// Budget minus the learned tail: where the members' spin stops.
    pub(super) fn spin_end(&self) -> u64 {
        self.budget_ns.saturating_sub(self.bias.load(Relaxed))
    }

    /// Group consumption in the current window at (`now`, process CPU
    /// `pcpu`); `None` if another thread holds the state right now.
    /// Async-signal-safe (atomics only, never blocks).
    pub(super) fn seen(&self, now: u64, pcpu: u64) -> Option<Seen> {
        if self.lock.swap(true, Acquire) {
            return None;
        }
        let w = self.res.window_of(now);
        let mut win = self.win.load(Relaxed);
        if w > win {
            let base = self.base.load(Relaxed);
            if w == win + 1 {
                let received = pcpu.saturating_sub(base);
                self.last_received.store(received, Relaxed);
                if self.exhausted_in_win.swap(false, Relaxed) {
                    // Move a quarter of the error, keep within 0..W/10.
                    let err = received as i64 - self.budget_ns as i64;
                    let b = self.bias.load(Relaxed) as i64 + err / 4;
                    self.bias
                        .store(b.clamp(0, (self.budget_ns / 10) as i64) as u64, Relaxed);
                }
            } else {
                self.exhausted_in_win.store(false, Relaxed);
            }
            self.base.store(pcpu, Relaxed);
            self.win.store(w, Relaxed);
            win = w;
        }
        let consumed = pcpu.saturating_sub(self.base.load(Relaxed));
        self.lock.store(false, Release);
        Some(Seen {
            consumed,
            window: win,
        })
    }
}
