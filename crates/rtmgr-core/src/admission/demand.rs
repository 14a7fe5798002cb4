//! What a reservation asks for (budget-based RTAI §3: W every P; ARTiS §4:
//! periodicity and capacity per RT task): a validated demand — budget,
//! period, deadline — and how it is enforced (hard or soft).

use super::fmt_duration;
use serde::{Deserialize, Serialize};

/// How a reservation is enforced: hard = SCHED_DEADLINE (EDF), soft =
/// SCHED_FIFO at a priority plus the rtmgr-rt soft budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Kind {
    Hard,
    Soft { priority: u8 },
}

/// What one thread of a reservation needs: budget W every period P, done
/// within D ≤ P of each release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Demand {
    pub period_ns: u64,
    pub budget_ns: u64,
    pub deadline_ns: u64,
    pub kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DemandError {
    #[error("period must be > 0")]
    ZeroPeriod,
    #[error("budget must be > 0")]
    ZeroBudget,
    #[error("budget {budget} exceeds the deadline {deadline}")]
    BudgetOverDeadline { budget: String, deadline: String },
    #[error("deadline {deadline} exceeds the period {period} (D ≤ P)")]
    DeadlineOverPeriod { deadline: String, period: String },
    #[error("period {0} is longer than the 10 s rtmgr accepts")]
    PeriodTooLong(String),
    #[error("budget {0} is shorter than the 10 µs rtmgr accepts (the kernel's SCHED_DEADLINE resolution is about 1 µs; bookkeeping costs more)")]
    BudgetTooShort(String),
    #[error("priority {0} out of range 1..98 (99 belongs to RT0 probes)")]
    Priority(u8),
}

/// Longest period accepted (keeps every sum and hyperperiod in range).
pub const MAX_PERIOD_NS: u64 = 10_000_000_000;
/// Shortest budget accepted.
pub const MIN_BUDGET_NS: u64 = 10_000;

impl Demand {
    /// Check 0 < W ≤ D ≤ P ≤ 10 s (D defaults to P).
    pub fn new(
        period_ns: u64,
        budget_ns: u64,
        deadline_ns: Option<u64>,
        kind: Kind,
    ) -> Result<Self, DemandError> {
        let deadline_ns = deadline_ns.unwrap_or(period_ns);
        if period_ns == 0 {
            return Err(DemandError::ZeroPeriod);
        }
        if budget_ns == 0 {
            return Err(DemandError::ZeroBudget);
        }
        if period_ns > MAX_PERIOD_NS {
            return Err(DemandError::PeriodTooLong(fmt_duration(period_ns)));
        }
        if budget_ns < MIN_BUDGET_NS {
            return Err(DemandError::BudgetTooShort(fmt_duration(budget_ns)));
        }
        if deadline_ns > period_ns {
            return Err(DemandError::DeadlineOverPeriod {
                deadline: fmt_duration(deadline_ns),
                period: fmt_duration(period_ns),
            });
        }
        if budget_ns > deadline_ns {
            return Err(DemandError::BudgetOverDeadline {
                budget: fmt_duration(budget_ns),
                deadline: fmt_duration(deadline_ns),
            });
        }
        if let Kind::Soft { priority } = kind {
            if !(1..=crate::class::RT1_MAX_PRIORITY).contains(&priority) {
                return Err(DemandError::Priority(priority));
            }
        }
        Ok(Demand {
            period_ns,
            budget_ns,
            deadline_ns,
            kind,
        })
    }

    /// W / P.
    pub fn utilisation(&self) -> f64 {
        self.budget_ns as f64 / self.period_ns as f64
    }

    pub fn is_hard(&self) -> bool {
        self.kind == Kind::Hard
    }

    /// SCHED_FIFO priority of a soft reservation.
    pub fn priority(&self) -> Option<u8> {
        match self.kind {
            Kind::Hard => None,
            Kind::Soft { priority } => Some(priority),
        }
    }
}
