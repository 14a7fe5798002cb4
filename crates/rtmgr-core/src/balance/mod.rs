//! The asymmetric load-balancing policy of ARTiS §2.2–2.3, written once over an
//! observed state so that it runs unchanged live (`rtmgr balance`, observing
//! /proc) and in the simulator (`rtmgr-sim`). It decides which RT1+ and Linux
//! tasks may be guests on RT CPUs: RT-load weighting of the run-queue length,
//! eviction of guests about to be non-preemptible for long (the user-space
//! analogue of ARTiS's migration trigger), next-migration-attempt estimation
//! against ping-pong (Figs. 2–3), task/processor association, and pushes only.
//! `scenario` is the lbµ scenario format of ARTiS §3.3 (Fig. 4); `lending`
//! stops lending an RT CPU whose lends harm its RT tasks (docs/lending.md).

mod cpu_map;
mod history;
pub mod lbu;
pub mod lending;
mod phases;
mod policy;
pub mod scenario;

pub use history::History;
pub use lending::{
    LendingConfig, LendingConfigError, LendingControl, LendingPrior, LendingStatus, OffPeriod,
};
pub use policy::Balancer;

use crate::class::TaskClass;
use serde::{Deserialize, Serialize};
// tests.rs (`use super::*`) has its BTreeMap from here.
#[cfg(test)]
use std::collections::BTreeMap;

/// The latency guard's limit on an RT CPU with guests (ARTiS §2.1: RT0's
/// latency first): the bound, or a quarter over what the CPU shows without
/// guests (its own RT tasks delay the probe too, and guests are not to blame
/// for that), whichever is higher. The policy's phase 4 and the live guard's
/// immediate eviction both use it.
pub fn guard_limit_ns(bound_ns: u64, baseline_ns: Option<u64>) -> u64 {
    baseline_ns.map_or(bound_ns, |b| bound_ns.max(b + b / 4))
}

/// Nearest-rank p99 of a window of samples, sorted in place (no allocation);
/// None when the window is empty.
pub fn p99_in_place(samples: &mut [u64]) -> Option<u64> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_unstable();
    let rank = crate::stats::nearest_rank(samples.len() as u64, 990_000);
    Some(samples[rank as usize - 1])
}

/// A task (thread) as the observer names it: a tid live, an index in the simulator.
pub type TaskId = u64;

/// Where a task may run, as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Place {
    /// Anywhere in the NRT set (the kernel balances inside it).
    Nrt,
    /// A guest pinned to this RT CPU.
    Rt(u32),
    /// Not the policy's business (RT0, per-CPU kernel threads, user-pinned tasks).
    Fixed,
}

/// One CPU in one observation window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuObs {
    pub cpu: u32,
    /// Is this an RT CPU of the partition?
    pub rt: bool,
    /// Share of the window (0..1) taken by what the policy does not move: RT0
    /// tasks on an RT CPU, pinned tasks, kernel threads and interrupts elsewhere.
    pub rt_load: f64,
    /// Recent p99 wake-up latency of the latency probe on this CPU, if probed.
    pub latency_p99_ns: Option<u64>,
    /// The lending controller's evidence (`lending`), 0 when not observed:
    /// latency-probe samples in the window, those over the latency bound,
    /// and those late ones with evidence of a host stall (steal advancing,
    /// or a vCPU that did not run).
    #[serde(default)]
    pub samples: u64,
    #[serde(default)]
    pub late_samples: u64,
    #[serde(default)]
    pub host_stalled_samples: u64,
    /// The CPU's steal time in the window.
    #[serde(default)]
    pub steal_ns: u64,
    /// Time in the window the CPU had at least one guest.
    #[serde(default)]
    pub lent_ns: u64,
    /// Late samples with which the live latency guard sent this CPU's
    /// guests away at once since the last window (ARTiS §2.2); the policy
    /// closes the CPU to guests as for its own trip. The simulator has no
    /// immediate guard: 0 there.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub guard_trips: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One task in one observation window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskObs {
    pub id: TaskId,
    pub class: TaskClass,
    pub place: Place,
    /// Runnable (running or waiting for a CPU) at sampling time.
    pub runnable: bool,
    /// CPU time in user and kernel mode during the window.
    pub user_ns: u64,
    pub kernel_ns: u64,
    /// Context switches during the window.
    pub voluntary: u64,
    pub involuntary: u64,
    /// CPU time since the task started (fairness between candidates).
    pub total_ns: u64,
    /// The observer saw the task enter a non-preemptible section during the
    /// window (the simulator always knows; live, the kernel-entry watch of
    /// the RT CPUs sees a guest's system calls and page faults there).
    pub np_entered: bool,
    /// Kernel entries (system calls, page faults) in the window, when the
    /// observer can count them (live: `/proc/…/io`'s read and write calls).
    #[serde(default)]
    pub kernel_entries: Option<u64>,
}

/// What the observer saw at `now_ns` over the last `window_ns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub now_ns: u64,
    pub window_ns: u64,
    pub cpus: Vec<CpuObs>,
    /// The tasks seen; an observer may leave out tasks that neither ran nor
    /// were runnable in the window, unless they are guests.
    pub tasks: Vec<TaskObs>,
    /// How coarse the tasks' user/kernel times are (live: one clock tick of
    /// /proc's utime/stime, 10 ms; the simulator: 0, exact). The user-mode
    /// prediction forgives one such step of kernel time.
    #[serde(default)]
    pub time_resolution_ns: u64,
}

/// Tunables; the defaults are the ones `rtmgr balance` and the simulator use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PolicyConfig {
    /// A task whose kernel-time share of its CPU time in the window reaches this is kernel-heavy.
    pub kernel_share_max: f64,
    /// ... and only if it ran at least this share of the window (noise floor).
    pub min_busy_share: f64,
    /// A task blocking (voluntary switches) this often per second is system-call/IRQ-heavy.
    pub switch_rate_max: f64,
    /// A guest should stay at least this long on its RT CPU for a move to pay off:
    /// a task whose next kernel-heavy phase is expected sooner is not brought back.
    pub min_stay_ns: u64,
    /// Forbidden-migration time after an eviction when no period is known yet;
    /// doubles with each further eviction, up to `max_backoff_ns`.
    pub initial_backoff_ns: u64,
    pub max_backoff_ns: u64,
    /// Relative gain in CPU share a move must bring (against oscillation).
    pub hysteresis: f64,
    /// Linux tasks are considered for NRT→RT moves every this many steps
    /// (RT1+ tasks at every step: ARTiS "checks more frequently for RT1+ tasks").
    pub linux_every: u32,
    /// At most this many moves per step.
    pub max_moves: usize,
    /// Latency bound of the RT CPUs; None disables the latency guard.
    pub latency_bound_ns: Option<u64>,
    /// How long an RT CPU stays closed to guests after its guard tripped (doubles on repeats).
    pub guard_backoff_ns: u64,
    /// With a latency bound, an RT CPU takes guests only after this many
    /// steps without any, so that the guard knows what its own RT tasks
    /// cost (an RT0 task in 9 ms bursts puts the p99 at ~9 ms by itself).
    pub guard_warmup_steps: u32,
    /// Rotate Linux tasks through the RT CPUs' spare capacity so that every
    /// one gets its turn (what ARTiS's balancer does by moving tasks): a
    /// lone guest is kept while the NRT side is saturated even when it gets
    /// less than an NRT share, and guests are swapped with NRT tasks as soon
    /// as their CPU time so far differs by `rotation_quantum_ns`.
    pub rotate: bool,
    pub rotation_quantum_ns: u64,
    /// A guest keeps its seat at least this long before a rotation swap
    /// (bounds the migrations when seats differ much from NRT shares).
    pub rotation_min_stay_ns: u64,
    /// An RT CPU with less spare capacity than this is not lent for rotation.
    pub min_lend_capacity: f64,
    /// Lend an RT CPU only to tasks predicted to stay in user mode there
    /// (ARTiS §2.1: guests run on RT CPUs only while preemptible): over the
    /// last window their kernel share, blocking rate and kernel entries
    /// stay under these.
    pub predict_user_mode: bool,
    pub lend_kernel_share_max: f64,
    pub lend_switch_rate_max: f64,
    pub lend_entries_per_s_max: f64,
    /// The closed-loop lending controller (docs/lending.md).
    pub lending: LendingConfig,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            kernel_share_max: 0.30,
            min_busy_share: 0.02,
            switch_rate_max: 2000.0,
            min_stay_ns: 500_000_000,
            initial_backoff_ns: 1_000_000_000,
            max_backoff_ns: 32_000_000_000,
            hysteresis: 0.05,
            linux_every: 2,
            max_moves: 16,
            latency_bound_ns: None,
            guard_backoff_ns: 2_000_000_000,
            guard_warmup_steps: 10,
            rotate: true,
            rotation_quantum_ns: 50_000_000,
            rotation_min_stay_ns: 500_000_000,
            min_lend_capacity: 0.05,
            predict_user_mode: true,
            lend_kernel_share_max: 0.05,
            lend_switch_rate_max: 100.0,
            lend_entries_per_s_max: 100.0,
            lending: LendingConfig::default(),
        }
    }
}

/// A malformed policy configuration: one error, the first found.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyConfigError {
    #[error("balancer config: {0}")]
    Parse(String),
    #[error("balancer config: {0}")]
    Invalid(String),
    #[error("balancer config: {0}")]
    Lending(#[from] LendingConfigError),
}

impl PolicyConfig {
    /// Check the tunables that would make the policy meaningless.
    pub fn validate(&self) -> Result<(), PolicyConfigError> {
        let shares = [
            ("kernel_share_max", self.kernel_share_max),
            ("min_busy_share", self.min_busy_share),
            ("min_lend_capacity", self.min_lend_capacity),
            ("lend_kernel_share_max", self.lend_kernel_share_max),
        ];
        if let Some((name, v)) = shares
            .iter()
            .find(|(_, v)| !v.is_finite() || !(0.0..=1.0).contains(v))
        {
            return Err(PolicyConfigError::Invalid(format!(
                "{name} must be a share in 0..=1 (got {v})"
            )));
        }
        if !self.hysteresis.is_finite() || self.hysteresis < 0.0 {
            return Err(PolicyConfigError::Invalid(format!(
                "hysteresis must be ≥ 0 (got {})",
                self.hysteresis
            )));
        }
        if self.max_backoff_ns < self.initial_backoff_ns {
            return Err(PolicyConfigError::Invalid(format!(
                "max_backoff_ns ({}) < initial_backoff_ns ({})",
                self.max_backoff_ns, self.initial_backoff_ns
            )));
        }
        Ok(self.lending.validate()?)
    }

    /// A configuration from TOML (missing keys take their defaults; an
    /// unknown key in `[lending]` or a bad value is an error), validated.
    pub fn from_toml(text: &str) -> Result<PolicyConfig, PolicyConfigError> {
        let cfg: PolicyConfig = toml::from_str(text).map_err(|e| {
            // One line, whatever the parser's message looks like.
            PolicyConfigError::Parse(e.message().trim().replace('\n', "; "))
        })?;
        cfg.validate()?;
        Ok(cfg)
    }
}

/// Why a task was moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Kernel-heavy guest pushed off an RT CPU (the ARTiS migration trigger).
    KernelHeavy,
    /// The latency guard of its RT CPU tripped: every guest leaves at once.
    LatencyGuard,
    /// Its RT CPU is no longer an open RT CPU (partition or guard rules).
    NotAllowed,
    /// RT→NRT: the guest gets less CPU than it would on the NRT CPUs.
    Rebalance,
    /// NRT→RT: the RT CPU has spare capacity for one more guest.
    Fill,
    /// A swap of a guest and an NRT task whose CPU time so far differ by
    /// more than the rotation quantum (each side of the swap is one move).
    Rotate,
    /// The lending controller stopped lending its RT CPU (`lending`).
    LendingOff,
}

/// A push decided by the policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub task: TaskId,
    pub from: Place,
    pub to: Place,
    pub reason: Reason,
}

#[cfg(test)]
mod tests;
