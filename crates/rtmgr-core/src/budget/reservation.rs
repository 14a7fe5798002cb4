//! A budget reservation (budget-based RTAI §3.1: period P, budget W per
//! period, optional deadline D ≤ P; docs/architecture.md "Reservation"): validation and
//! the release times of its windows.

use serde::{Deserialize, Serialize};

/// Bad reservation parameters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("period must be > 0 ns")]
    ZeroPeriod,
    #[error("budget must be > 0 ns")]
    ZeroBudget,
    #[error("budget {budget} ns exceeds period {period} ns")]
    BudgetExceedsPeriod { budget: u64, period: u64 },
    #[error(
        "deadline {deadline} ns must satisfy budget {budget} ns <= deadline <= period {period} ns"
    )]
    Deadline {
        budget: u64,
        deadline: u64,
        period: u64,
    },
    #[error("if_wait cap must be >= 1")]
    ZeroCap,
    #[error("release times overflow u64 ns")]
    Overflow,
}
/// A validated reservation. Times in ns on CLOCK_MONOTONIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// First release (absolute).
    pub start_ns: u64,
    pub period_ns: u64,
    /// Budget W per period; `None` for a plain periodic task.
    pub budget_ns: Option<u64>,
    /// Relative deadline D (hard mode); defaults to the period.
    pub deadline_ns: u64,
}

impl Reservation {
    /// Check the parameters: P > 0, 0 < W ≤ D ≤ P.
    pub fn new(
        start_ns: u64,
        period_ns: u64,
        budget_ns: Option<u64>,
        deadline_ns: Option<u64>,
    ) -> Result<Self, BudgetError> {
        if period_ns == 0 {
            return Err(BudgetError::ZeroPeriod);
        }
        let deadline = deadline_ns.unwrap_or(period_ns);
        if let Some(w) = budget_ns {
            if w == 0 {
                return Err(BudgetError::ZeroBudget);
            }
            if w > period_ns {
                return Err(BudgetError::BudgetExceedsPeriod {
                    budget: w,
                    period: period_ns,
                });
            }
            if deadline < w || deadline > period_ns {
                return Err(BudgetError::Deadline {
                    budget: w,
                    deadline,
                    period: period_ns,
                });
            }
        } else if deadline == 0 || deadline > period_ns {
            return Err(BudgetError::Deadline {
                budget: 0,
                deadline,
                period: period_ns,
            });
        }
        start_ns
            .checked_add(period_ns)
            .ok_or(BudgetError::Overflow)?;
        Ok(Self {
            start_ns,
            period_ns,
            budget_ns,
            deadline_ns: deadline,
        })
    }

    /// Absolute release time of window `k` (saturating).
    pub fn release(&self, k: u64) -> u64 {
        self.start_ns
            .saturating_add(k.saturating_mul(self.period_ns))
    }

    /// Index of the window containing `now` (0 before the first release).
    pub fn window_of(&self, now: u64) -> u64 {
        now.saturating_sub(self.start_ns) / self.period_ns
    }

    /// Utilisation W/P (1.0 without budget).
    pub fn utilisation(&self) -> f64 {
        self.budget_ns.unwrap_or(self.period_ns) as f64 / self.period_ns as f64
    }
}
