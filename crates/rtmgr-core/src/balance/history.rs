//! What the policy remembers of one task (ARTiS §2.3, Fig. 3): its
//! kernel-heavy phases and their period, its evictions, and the earliest
//! time it may come back to an RT CPU (the next-migration-attempt estimate).

use super::PolicyConfig;
use serde::{Deserialize, Serialize};

/// What the policy remembers of one task (ARTiS §2.3, Fig. 3: "the period is
/// deducted from the study of the previous behavior of the given task").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// Kernel-heavy in the last window.
    pub heavy: bool,
    /// Kernel-heavy phases seen so far.
    pub phases: u32,
    pub last_phase_start_ns: Option<u64>,
    /// Smoothed time between the starts of two kernel-heavy phases.
    pub mean_period_ns: Option<u64>,
    /// Evictions so far (drives the back-off when no period is known).
    pub evictions: u32,
    /// Hard lower bound for the next NRT→RT move, fixed at eviction time.
    pub not_before_ns: u64,
    /// When the task was last observed (its history is forgotten after
    /// `max_backoff_ns` unseen: by then no back-off it earned still holds).
    #[serde(default)]
    pub seen_ns: u64,
}

impl History {
    /// A kernel-heavy phase starts at `now` (its first window, or an ARTiS trigger).
    pub fn phase_started(&mut self, now: u64) {
        if let Some(last) = self.last_phase_start_ns {
            let p = now.saturating_sub(last).max(1);
            self.mean_period_ns = Some(match self.mean_period_ns {
                Some(m) => (m + p) / 2,
                None => p,
            });
        }
        self.last_phase_start_ns = Some(now);
        self.phases += 1;
    }

    /// When the next kernel-heavy phase is expected, if the task has a period.
    pub fn next_phase_ns(&self, now: u64) -> Option<u64> {
        let (last, p) = (self.last_phase_start_ns?, self.mean_period_ns?);
        let k = now.saturating_sub(last) / p + 1;
        Some(last + k * p)
    }

    /// The estimate of Fig. 3: is the next kernel-heavy phase far enough away
    /// for a stay on an RT CPU to pay off? Also honours the hard bound.
    pub fn may_return(&self, now: u64, cfg: &PolicyConfig) -> bool {
        if self.heavy || now < self.not_before_ns {
            return false;
        }
        match self.next_phase_ns(now) {
            Some(next) => next - now >= cfg.min_stay_ns,
            None => true,
        }
    }

    /// Record an eviction at `now` (after `phase_started` if it was one) and
    /// fix the earliest time the task may come back.
    pub fn evicted(&mut self, now: u64, window_ns: u64, cfg: &PolicyConfig) {
        self.evictions += 1;
        let periodic = self
            .mean_period_ns
            .is_some_and(|p| p >= cfg.min_stay_ns + window_ns);
        let wait = if periodic {
            // Rare, periodic phases: back once this phase is over.
            2 * window_ns
        } else {
            let shift = self.evictions.saturating_sub(1).min(16);
            cfg.initial_backoff_ns
                .saturating_mul(1u64 << shift)
                .min(cfg.max_backoff_ns)
        };
        self.not_before_ns = now + wait;
    }
}
