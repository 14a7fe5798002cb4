//! Budget accounting for periodic tasks (budget-based RTAI §3.2–§3.3): the
//! pure state machine behind `rtmgr-rt`'s `wait_period()` and its soft/hard
//! enforcement. It is driven by readings of CLOCK_MONOTONIC (`now`) and of the
//! task's thread CPU clock (`cpu`), both in ns, and never reads a clock itself,
//! so it runs unchanged under a fake clock in tests.
//!
//! Windows: period `k` is the half-open interval `[start + k·P, start + (k+1)·P)`.
//! The budget W is replenished at every release; CPU time is charged to the
//! window in which it was observed.
//!
//! Seed semantics (§3.2): while a job needs C ≤ W, `wait_period` behaves like
//! plain `make_periodic`. When the task exhausts W before calling `wait_period`,
//! it is suspended until the next release and continues its unfinished job
//! there with a fresh budget; the delayed `wait_period` (the one that belonged
//! to the earlier period) is then ignored and returns at once. Delayed waits
//! are counted in `if_wait`, which saturates at a cap (see [`BudgetAccount::new`]).
//!
//! Files: `reservation.rs` (the parameters and their windows), `account.rs`
//! (the state machine), and here the types it reports with.

mod account;
mod reservation;
#[cfg(test)]
mod tests;

pub use account::BudgetAccount;
pub use reservation::{BudgetError, Reservation};

use serde::{Deserialize, Serialize};

/// Default cap on `if_wait`, the number of pending delayed `wait_period` calls.
/// The seed uses 30 000 and then resets the counter to 2; we saturate instead.
pub const DEFAULT_IF_WAIT_CAP: u32 = 30_000;

/// How the soft (user-space) enforcer decides when the budget is used up
/// (seed §3.3.2–§3.3.3). The hard mode (SCHED_DEADLINE) does not use these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SoftVariant {
    /// Arm a CLOCK_MONOTONIC timer for the remaining budget; when it fires,
    /// read the thread CPU clock and re-arm for the rest if the task was
    /// preempted meanwhile. Overshoot = signal delivery delay.
    Rearm,
    /// As `Rearm`, but fire early by a learned margin and finish the budget
    /// exactly by spinning on the thread CPU clock inside the handler.
    #[default]
    EarlySpin,
    /// As `Rearm`, and charge the overshoot of a window to the next window
    /// (seed §3.3.3: measure the loss and compensate it).
    Compensate,
}

impl std::str::FromStr for SoftVariant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "rearm" => Ok(Self::Rearm),
            "early-spin" => Ok(Self::EarlySpin),
            "compensate" => Ok(Self::Compensate),
            _ => Err(format!(
                "unknown soft variant {s:?}: expected rearm, early-spin or compensate"
            )),
        }
    }
}

/// Who enforces the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcer {
    /// No budget: plain `make_periodic`.
    None,
    /// User space (signal handler) drives [`BudgetAccount::poll`].
    Soft(SoftVariant),
    /// The kernel throttles the task (SCHED_DEADLINE); a window that closes
    /// while the task was running with (almost) its whole budget consumed is
    /// counted as an exhaustion.
    Kernel,
    /// Someone else decides when the budget is used up (a group budget
    /// shared by several tasks) and calls [`BudgetAccount::suspend`].
    External,
}
/// What one period (window) looked like; pushed to the statistics ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PeriodRecord {
    /// Window index k.
    pub index: u64,
    /// Absolute release time of window k.
    pub release_ns: u64,
    /// Budget assigned for this window (0 without budget).
    pub budget_ns: u64,
    /// CPU time the task received in this window.
    pub received_ns: u64,
    /// Wake-up time − release time, when the task was waiting for this release.
    pub latency_ns: Option<u64>,
    /// The budget ran out in this window (the task was suspended / throttled).
    pub exhausted: bool,
    /// `wait_period` calls ignored in this window.
    pub ignored_waits: u32,
    /// Releases reported missed by `wait_period` in this window.
    pub missed: u32,
}

impl PeriodRecord {
    /// Budget rate = received / assigned, in percent; `None` without budget.
    pub fn rate_percent(&self) -> Option<f64> {
        (self.budget_ns > 0).then(|| self.received_ns as f64 * 100.0 / self.budget_ns as f64)
    }
}

/// What `wait_period` reports for one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WaitOutcome {
    /// Slept until the next release, woke in that period.
    OnTime,
    /// This many releases passed without a `wait_period`; returned at once,
    /// the next job belongs to the current period.
    Missed(u64),
    /// A delayed wait belonging to an earlier period: returned at once (§3.2).
    Ignored,
}

/// What the caller of [`BudgetAccount::wait_period`] must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitAction {
    /// Return this outcome at once.
    Return(WaitOutcome),
    /// Sleep until this absolute time, then call [`BudgetAccount::released`].
    SleepUntil(u64),
}

/// What the soft enforcer must do after a [`BudgetAccount::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforce {
    /// Nothing to enforce (no budget, or the task is asleep).
    Idle,
    /// Arm the budget timer to fire after this many ns of wall time.
    Arm(u64),
    /// Spin until the thread CPU clock reaches `cpu_ns` or CLOCK_MONOTONIC
    /// reaches `until_ns` (window end), then poll again.
    Spin { cpu_ns: u64, until_ns: u64 },
    /// Budget used up: sleep until this absolute time (next release), then
    /// call [`BudgetAccount::released`] and poll again.
    Suspend(u64),
}

/// Totals over the task's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Totals {
    pub periods: u64,
    pub exhaustions: u64,
    pub ignored_waits: u64,
    pub missed: u64,
    /// Exhaustions that found `if_wait` at its cap (not counted there).
    pub if_wait_saturated: u64,
}
