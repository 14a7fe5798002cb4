//! rtmgr-sim: a seeded, deterministic discrete-event model of an N-CPU machine
//! (DESIGN.md "one policy, two worlds"). Fixed-priority FIFO classes above
//! fair-shared (round-robin) Linux tasks, timer and device interrupts,
//! non-preemptible sections, migration cost; four balancers: Linux-like
//! symmetric, static shield, ARTiS in the kernel (ARTiS §2.2–2.3: immediate
//! migration on entry to a non-preemptible section) and the rtmgr core policy
//! sampled every T ms. Reproduces lbµ (ARTiS §3.3) runs without a machine.

mod balancers;
mod engine;

use rtmgr_core::balance::scenario::{Scenario, Sched};
use rtmgr_core::balance::PolicyConfig;
use rtmgr_core::class::TaskClass;
use rtmgr_core::stats::Summary;
use rtmgr_core::CpuSet;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

pub use engine::Sim;

/// Which balancer runs the machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BalancerKind {
    /// Symmetric, counts runnable tasks (RT tasks count as one): Linux 2.6.
    Linux,
    /// Static shield (cset/tuned): ordinary tasks only on NRT CPUs.
    Shield,
    /// ARTiS in the kernel: RT-load weighting, push, association, and
    /// immediate migration when a guest enters a non-preemptible section.
    Artis,
    /// The rtmgr core policy, sampled every `sample_ns` like `rtmgr balance`.
    Rtmgr,
}

pub const ALL_BALANCERS: [BalancerKind; 4] = [
    BalancerKind::Linux,
    BalancerKind::Shield,
    BalancerKind::Artis,
    BalancerKind::Rtmgr,
];

impl BalancerKind {
    pub fn name(self) -> &'static str {
        match self {
            BalancerKind::Linux => "linux",
            BalancerKind::Shield => "shield",
            BalancerKind::Artis => "artis",
            BalancerKind::Rtmgr => "rtmgr",
        }
    }
}

impl fmt::Display for BalancerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BalancerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        ALL_BALANCERS
            .into_iter()
            .find(|b| b.name() == s)
            .ok_or_else(|| format!("unknown balancer {s:?}: linux, shield, artis or rtmgr"))
    }
}

/// The model machine and its costs. Times in ns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimConfig {
    pub cpus: u32,
    pub rt: CpuSet,
    pub balancer: BalancerKind,
    pub seed: u64,
    /// Timer interrupt period on a busy CPU (idle CPUs are tickless).
    pub tick_ns: u64,
    pub tick_cost_ns: u64,
    /// Round-robin slice of fair-shared tasks (checked at ticks, like CFS).
    pub slice_ns: u64,
    /// Cost of switching to a woken RT task (added to its latency).
    pub switch_ns: u64,
    /// Extra work a task does after changing CPU (cache refill).
    pub migration_cost_ns: u64,
    /// Device interrupts per second on the whole machine (Poisson).
    pub irq_per_s: f64,
    pub irq_cost_ns: u64,
    /// Period of the in-kernel balancers (Linux, shield, ARTiS, and the
    /// kernel's balancing inside the NRT set under rtmgr).
    pub balance_ns: u64,
    /// Sampling period T of the rtmgr policy.
    pub sample_ns: u64,
    /// A migration reversing the task's previous cross-role migration within
    /// this window is a ping-pong (ARTiS Fig. 2).
    pub pingpong_ns: u64,
    /// Stop after this much simulated time even if tasks remain.
    pub max_ns: u64,
    pub policy: PolicyConfig,
    /// Keep the full event trace (tests; costs memory).
    pub keep_trace: bool,
}

impl SimConfig {
    pub fn new(cpus: u32, rt: CpuSet, balancer: BalancerKind) -> Self {
        SimConfig {
            cpus,
            rt,
            balancer,
            seed: 1,
            tick_ns: 1_000_000,
            tick_cost_ns: 2_000,
            slice_ns: 3_000_000,
            switch_ns: 2_000,
            migration_cost_ns: 50_000,
            irq_per_s: 1000.0,
            irq_cost_ns: 10_000,
            balance_ns: 4_000_000,
            sample_ns: 50_000_000,
            pingpong_ns: 500_000_000,
            max_ns: 3_600_000_000_000,
            policy: PolicyConfig {
                latency_bound_ns: Some(300_000),
                ..Default::default()
            },
            keep_trace: false,
        }
    }
}

/// A fake task (an lbµ task instance). Times in ns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskDef {
    pub name: String,
    pub class: TaskClass,
    /// CPUs the task may use (the scenario's cpu_mask).
    pub mask: CpuSet,
    /// Total user-mode work.
    pub work_ns: u64,
    /// Work between two sleeps (0 = never sleeps) and the sleep length.
    pub burst_ns: u64,
    pub sleep_ns: u64,
    /// Work between two non-preemptible (kernel) sections, and their length.
    pub np_every_ns: u64,
    pub np_len_ns: u64,
}

impl TaskDef {
    /// SCHED_FIFO priority, 0 for a fair-shared task.
    pub fn prio(&self) -> u8 {
        self.class.fifo_priority().unwrap_or(0)
    }
}

/// The task instances of a scenario, on a machine of `cpus` CPUs.
pub fn tasks_from_scenario(sc: &Scenario, cpus: u32) -> Vec<TaskDef> {
    let all: CpuSet = (0..cpus).collect();
    sc.instances()
        .into_iter()
        .map(|(name, t)| TaskDef {
            name,
            class: match t.sched {
                Sched::Other => TaskClass::Linux,
                _ => t.class(),
            },
            mask: t
                .cpu_mask
                .as_ref()
                .map(|m| m.intersection(&all))
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| all.clone()),
            work_ns: t.loops.saturating_mul(sc.iter_ns),
            burst_ns: t.sloop.saturating_mul(sc.iter_ns),
            sleep_ns: t.sleep_us.saturating_mul(1000),
            np_every_ns: t.kernel_every.saturating_mul(sc.iter_ns),
            np_len_ns: t.kernel_us.saturating_mul(1000),
        })
        .collect()
}

/// Per task results: the three lbµ figures (wall-clock time, share of time per
/// CPU, context switches) plus migrations.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskReport {
    pub name: String,
    pub class: TaskClass,
    /// Completion time from the common start, if it finished.
    pub completion_ns: Option<u64>,
    pub cpu_ns: u64,
    pub kernel_ns: u64,
    /// Percent of the task's CPU time spent on each CPU.
    pub cpu_percent: Vec<f64>,
    pub switches: u64,
    pub migrations: u64,
    pub pingpongs: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    pub balancer: BalancerKind,
    pub seed: u64,
    pub cpus: u32,
    pub rt_cpus: CpuSet,
    pub sim_ns: u64,
    /// Events processed (see the engine's module doc: each segment end,
    /// wake-up, tick, device interrupt, balancing pass and sample).
    pub events: u64,
    /// FNV-style hash of every processed event: same seed, same hash.
    pub trace_hash: u64,
    pub tasks: Vec<TaskReport>,
    /// Wake-up latency of RT0 tasks (all RT CPUs together).
    pub rt0_latency: Summary,
    /// Percent of the run each CPU was busy (tasks and interrupts).
    pub cpu_busy_percent: Vec<f64>,
    pub migrations: u64,
    pub pingpongs: u64,
    /// Completion times of the non-RT0 tasks that finished: min, max, max/min.
    pub completion_min_ns: Option<u64>,
    pub completion_max_ns: Option<u64>,
    pub completion_spread: Option<f64>,
    /// Tasks still running at `max_ns`.
    pub unfinished: usize,
}

/// Completion times of the non-RT0 tasks that finished: (min, max, max/min).
pub fn completion(tasks: &[TaskReport]) -> (Option<u64>, Option<u64>, Option<f64>) {
    let done = tasks
        .iter()
        .filter(|t| t.class != TaskClass::Rt0)
        .filter_map(|t| t.completion_ns);
    let (min, max) = (done.clone().min(), done.max());
    let spread = match (min, max) {
        (Some(a), Some(b)) if a > 0 => Some(b as f64 / a as f64),
        _ => None,
    };
    (min, max, spread)
}

/// Simulate one run.
pub fn run(cfg: &SimConfig, tasks: &[TaskDef]) -> Result<SimReport, SimError> {
    let mut sim = Sim::new(cfg.clone(), tasks.to_vec())?;
    sim.run();
    Ok(sim.report())
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error("the machine needs at least one CPU and at most 4096 (got {0})")]
    Cpus(u32),
    #[error("RT CPUs {0} are outside the machine's {1} CPUs")]
    RtOutside(CpuSet, u32),
    #[error("{0}: every CPU would be RT; at least one NRT CPU must remain")]
    NoNrt(String),
    #[error("task {0}: RT0 tasks must be bound to exactly one RT CPU")]
    Rt0Placement(String),
    #[error("no tasks")]
    NoTasks,
}

#[cfg(test)]
mod tests;
