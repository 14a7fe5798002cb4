//! rtmgr-sim: a seeded, deterministic discrete-event model of an N-CPU
//! machine, to ask "what would this balancer do on 64 CPUs?" without one.
//!
//! **What it is.** Fixed-priority FIFO classes above fair-shared
//! (round-robin) Linux tasks, timer and device interrupts, non-preemptible
//! sections and migration cost; it runs lbµ scenarios (ARTiS §3.3) under four
//! balancers: Linux-like symmetric, static shield, ARTiS in the kernel (§2.2–
//! 2.3: immediate migration on entry to a non-preemptible section) and the
//! rtmgr core policy sampled every T ms, exactly as `rtmgr balance` runs it.
//!
//! **Central types.** [`SimConfig`], [`TaskDef`], [`Sim`], [`SimReport`]
//! (an lbµ [`LbResult`] plus seed, events and trace hash).
//!
//! **Key decision.** Each balancer fills one interface in its own file
//! (`balancers/`), like the kernel's `sched_class`, and the engine never asks
//! which one it runs; the event loop is compiled once per balancer. Same
//! seed, same events, same trace hash.

mod balancers;
mod engine;

pub use rtmgr_core::balance::lbu::{completion, BalancerKind, LbResult, TaskReport, ALL_BALANCERS};
use rtmgr_core::balance::scenario::{Scenario, Sched};
use rtmgr_core::balance::{LendingPrior, LendingStatus, PolicyConfig};
use rtmgr_core::class::TaskClass;
use rtmgr_core::CpuSet;
use serde::{Deserialize, Serialize};

pub use engine::Sim;

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
    /// The host under the vCPUs (None: bare metal, or a host that never
    /// preempts a vCPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostModel>,
    /// What a host test told the rtmgr policy before the start (taken as fresh).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending_prior: Option<LendingPrior>,
}

/// A host that preempts busy vCPUs (docs/lending.md: what this VM's host
/// does when both of its vCPUs are busy).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HostModel {
    /// Host preemptions per second of a busy vCPU, while enough vCPUs are busy.
    pub rate_per_s: f64,
    /// How long a preempted vCPU does not run (the host's time slice).
    pub slice_ns: u64,
    /// Busy vCPUs needed for the host to preempt one (0: all of them; more
    /// than the machine has: never).
    #[serde(default)]
    pub busy_vcpus: u32,
    /// The host's capacity for this VM, in CPUs (`rtmgr lb --host-capacity
    /// F`; None: as many as the vCPUs). With all N vCPUs busy and F < N, the
    /// host time-slices them onto F CPUs: each busy vCPU not already in such
    /// a slice is stalled for `slice_ns` at a rate that leaves it running
    /// F/N of the time (a Poisson stream of slices at rate r, those arriving
    /// during a slice dropped, stalls a share rS/(1 + rS)), so N busy vCPUs
    /// do F CPUs' worth of work. Fewer busy vCPUs run at full speed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<f64>,
}

impl HostModel {
    /// `RATE,SLICE_MS[,BUSY_VCPUS]`, e.g. `2,10` (`rtmgr lb --host-preempt`).
    pub fn parse(s: &str) -> Result<HostModel, SimError> {
        let bad = || SimError::HostModel(s.to_string());
        let parts: Vec<&str> = s.split(',').map(str::trim).collect();
        if !(2..=3).contains(&parts.len()) {
            return Err(bad());
        }
        let rate: f64 = parts[0].parse().map_err(|_| bad())?;
        let slice_ms: f64 = parts[1].parse().map_err(|_| bad())?;
        let busy_vcpus: u32 = match parts.get(2) {
            Some(b) => b.parse().map_err(|_| bad())?,
            None => 0,
        };
        let h = HostModel {
            rate_per_s: rate,
            slice_ns: (slice_ms * 1e6) as u64,
            busy_vcpus,
            capacity: None,
        };
        h.check()?;
        Ok(h)
    }

    /// Only the capacity factor `f` (`--host-capacity` without
    /// `--host-preempt`): no random preemption, 10 ms host slices.
    pub fn capacity_only(f: f64) -> Result<HostModel, SimError> {
        HostModel {
            rate_per_s: 0.0,
            slice_ns: 10_000_000,
            busy_vcpus: 0,
            capacity: None,
        }
        .with_capacity(f)
    }

    /// This model with the host's capacity `f` CPUs (`f` > 0, finite).
    pub fn with_capacity(self, f: f64) -> Result<HostModel, SimError> {
        if !(f.is_finite() && f > 0.0 && f <= 1e6) {
            return Err(SimError::HostCapacity(f.to_string()));
        }
        Ok(HostModel {
            capacity: Some(f),
            ..self
        })
    }

    /// The extra stall attempts per second and vCPU that give `cpus` busy
    /// vCPUs the capacity of `capacity` CPUs (0 without a capacity below
    /// `cpus`): the stalled share p = 1 − F/N needs r = p / ((1 − p) S).
    pub fn sharing_rate(&self, cpus: u32) -> f64 {
        let n = f64::from(cpus.max(1));
        match self.capacity {
            Some(f) if f < n => {
                let p = 1.0 - f / n;
                p / ((1.0 - p) * (self.slice_ns as f64 / 1e9))
            }
            _ => 0.0,
        }
    }

    /// What the host test (`rtmgr status --host-test`, its capacity part)
    /// would find on `cpus` vCPUs of this host, as the lending prior: N
    /// busy vCPUs do min(F, N) CPUs' work, N − 1 do min(F, N − 1). None
    /// without a capacity factor.
    pub fn capacity_prior(&self, cpus: u32) -> Option<LendingPrior> {
        let f = self.capacity?;
        let n = f64::from(cpus.max(1));
        let all = f.min(n);
        Some(LendingPrior {
            marginal_capacity: Some(all - f.min(n - 1.0)),
            effective_cpus: Some(all),
            ..Default::default()
        })
    }

    fn check(&self) -> Result<(), SimError> {
        let ok = self.rate_per_s.is_finite()
            && (self.rate_per_s > 0.0 || (self.rate_per_s == 0.0 && self.capacity.is_some()))
            && self.rate_per_s <= 1e6
            && self.slice_ns > 0
            && self.slice_ns <= 10_000_000_000
            && self
                .capacity
                .is_none_or(|f| f.is_finite() && f > 0.0 && f <= 1e6);
        if ok {
            Ok(())
        } else {
            Err(SimError::HostModel(format!(
                "rate {} /s, slice {} ns",
                self.rate_per_s, self.slice_ns
            )))
        }
    }
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
            host: None,
            lending_prior: None,
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
    /// Sleeps to absolute releases every `burst_ns + sleep_ns` (a latency
    /// probe): its wake-up latency counts from the release, and a release
    /// passed while it was late comes at once.
    #[serde(default)]
    pub periodic: bool,
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
            periodic: t.periodic,
        })
        .collect()
}

/// The machine `rtmgr lb SCENARIO --sim` simulates with its defaults (seed
/// 1, T = 50 ms, an hour at most): the scenario's `cpus`, else what its masks
/// use, and its RT CPUs.
pub fn scenario_config(sc: &Scenario, balancer: BalancerKind) -> SimConfig {
    let cpus = sc.cpus.unwrap_or_else(|| sc.cpus_needed());
    SimConfig::new(cpus, sc.rt_set(), balancer)
}

/// A simulated lbµ run: what a live run reports too (`LbResult`, flattened
/// into the same JSON object), plus what only a simulation knows.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SimReport {
    pub balancer: BalancerKind,
    pub seed: u64,
    pub sim_ns: u64,
    /// Events processed (see the engine's module doc: each segment end,
    /// wake-up, tick, device interrupt, balancing pass and sample).
    pub events: u64,
    /// FNV-style hash of every processed event: same seed, same hash.
    pub trace_hash: u64,
    #[serde(flatten)]
    pub result: LbResult,
    /// Percent of the run each CPU was busy (tasks and interrupts).
    pub cpu_busy_percent: Vec<f64>,
    /// What the host model did, and the lending controller's state (only
    /// with a host model: reports without one are unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<HostReport>,
}

/// The host model's effect on a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostReport {
    pub model: HostModel,
    /// vCPU stalls the host caused.
    pub stalls: u64,
    /// Steal per CPU, ns.
    pub steal_ns: Vec<u64>,
    /// The rtmgr balancer's lending controller at the end (empty for the others).
    pub lending: Vec<LendingStatus>,
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
    #[error(
        "host model {0:?}: want RATE,SLICE_MS[,BUSY_VCPUS] with 0 < RATE ≤ 1e6 per s and 0 < SLICE ≤ 10 s"
    )]
    HostModel(String),
    #[error(
        "host capacity {0:?}: want F CPUs with 0 < F (e.g. 1.0: two busy vCPUs do one CPU's work)"
    )]
    HostCapacity(String),
}

#[cfg(test)]
mod host_tests;
#[cfg(test)]
mod tests;
