//! The policy and its memory (ARTiS §2.2–2.3): per-task histories, per-CPU
//! latency guards, seats for rotation, and what the phases of a step
//! (`phases.rs`) ask of them. Deterministic: same observations, same moves.

use super::{History, LendingControl, LendingPrior, LendingStatus, PolicyConfig, TaskId, TaskObs};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The latency guard of one RT CPU (see `trip_latency_guards`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Guard {
    pub(super) trips: u32,
    pub(super) closed_until_ns: u64,
    pub(super) last_trip_ns: u64,
    /// Smoothed p99 of the CPU while it had no guest: what its own RT tasks cost.
    pub(super) baseline_ns: Option<u64>,
    /// Steps seen without guests (the baseline needs a few before any lending).
    pub(super) clean_steps: u32,
}

/// The policy with its memory. Deterministic: same observations, same moves.
#[derive(Debug, Clone)]
pub struct Balancer {
    pub cfg: PolicyConfig,
    pub(super) history: BTreeMap<TaskId, History>,
    pub(super) guards: BTreeMap<u32, Guard>,
    pub(super) steps: u64,
    /// Since when each guest has been on its RT CPU (for rotation).
    pub(super) seated: BTreeMap<TaskId, u64>,
    /// Scratch of `track_seats` (the guests seen), kept between steps so
    /// that a step does not allocate it.
    pub(super) seen_guests: Vec<TaskId>,
    /// The closed-loop lending controller (per RT CPU, no task ids: it may
    /// outlive the task ids of one run, see `take_lending`).
    pub(super) lending: LendingControl,
}

impl Balancer {
    pub fn new(cfg: PolicyConfig) -> Self {
        Balancer {
            lending: LendingControl::new(cfg.lending.clone()),
            cfg,
            history: BTreeMap::new(),
            guards: BTreeMap::new(),
            steps: 0,
            seated: BTreeMap::new(),
            seen_guests: Vec::new(),
        }
    }

    pub fn history(&self, task: TaskId) -> Option<&History> {
        self.history.get(&task)
    }

    /// Is this RT CPU closed to guests by its latency guard at `now`?
    pub fn closed(&self, cpu: u32, now: u64) -> bool {
        self.guards
            .get(&cpu)
            .is_some_and(|g| now < g.closed_until_ns)
    }

    /// Does this RT CPU take new guests at `now`: not closed by its guard,
    /// its lending not stopped by the lending controller, and, with a
    /// latency bound, past the guard's warm-up?
    pub fn accepting(&self, cpu: u32, now: u64) -> bool {
        let warm = self.cfg.latency_bound_ns.is_none()
            || self
                .guards
                .get(&cpu)
                .is_some_and(|g| g.clean_steps >= self.cfg.guard_warmup_steps);
        warm && !self.closed(cpu, now) && self.lending.allows(cpu, now)
    }

    /// Does the lending controller let `cpu` be lent at `now`?
    pub fn lending_allows(&self, cpu: u32, now: u64) -> bool {
        self.lending.allows(cpu, now)
    }

    /// Every RT CPU's lending state at `now` (what `rtmgr balance` and
    /// evaluate print).
    pub fn lending_status(&self, now: u64) -> Vec<LendingStatus> {
        self.lending.status(now)
    }

    /// What a host test found before the start (see
    /// [`LendingControl::set_prior`]); returns whether it was used.
    pub fn set_lending_prior(&mut self, prior: LendingPrior, now_unix_s: u64) -> bool {
        self.lending.set_prior(prior, now_unix_s)
    }

    /// Take the lending controller out (to keep it across runs whose task
    /// ids differ, e.g. evaluate's segments); this balancer gets a fresh one.
    pub fn take_lending(&mut self) -> LendingControl {
        let fresh = LendingControl::new(self.cfg.lending.clone());
        std::mem::replace(&mut self.lending, fresh)
    }

    /// Put back a controller kept from an earlier run (its memory stays,
    /// this balancer's lending config applies).
    pub fn restore_lending(&mut self, mut lending: LendingControl) {
        lending.set_config(self.cfg.lending.clone());
        self.lending = lending;
    }

    /// Is `t` predicted to stay in user mode on an RT CPU (ARTiS §2.1: a
    /// guest may run there only while preemptible)? Judged on its last window.
    /// `resolution_ns`: how coarse the kernel time is (one step forgiven).
    pub(super) fn predicted_user_mode(
        &self,
        t: &TaskObs,
        window_ns: u64,
        resolution_ns: u64,
    ) -> bool {
        let c = &self.cfg;
        if !c.predict_user_mode {
            return true;
        }
        let w = window_ns.max(1) as f64;
        let busy = t.user_ns + t.kernel_ns;
        let kernel_ok = (busy as f64) < c.min_busy_share * w
            || (t.kernel_ns.saturating_sub(resolution_ns) as f64)
                <= c.lend_kernel_share_max * busy as f64;
        let switches_ok = t.voluntary as f64 * 1e9 / w <= c.lend_switch_rate_max;
        let entries_ok = t
            .kernel_entries
            .is_none_or(|n| n as f64 * 1e9 / w <= c.lend_entries_per_s_max);
        kernel_ok && switches_ok && entries_ok && !t.np_entered
    }

    pub(super) fn is_heavy(&self, t: &TaskObs, window_ns: u64) -> bool {
        if t.np_entered {
            return true;
        }
        let busy = t.user_ns + t.kernel_ns;
        let w = window_ns.max(1) as f64;
        let kernel_heavy = busy as f64 >= self.cfg.min_busy_share * w
            && t.kernel_ns as f64 >= self.cfg.kernel_share_max * busy as f64;
        let switch_heavy = t.voluntary as f64 * 1e9 / w >= self.cfg.switch_rate_max;
        kernel_heavy || switch_heavy
    }
}
