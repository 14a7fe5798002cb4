//! lbµ's balancers and results (ARTiS §3.3: per task its wall-clock time,
//! share of time per CPU and context switches, plus migrations): one type for
//! a run in the simulator and a run on the machine, so both print and compare
//! alike.

use crate::class::TaskClass;
use crate::cpuset::CpuSet;
use crate::stats::Summary;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

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

/// One task's lbµ figures.
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
    /// Migrations undone within the ping-pong window (ARTiS Fig. 2); a live
    /// run cannot see them and counts none.
    pub pingpongs: u64,
}

/// One lbµ run under one balancer, simulated or live.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LbResult {
    pub cpus: u32,
    pub rt_cpus: CpuSet,
    pub tasks: Vec<TaskReport>,
    /// Wake-up latency of RT0 tasks (all RT CPUs together).
    pub rt0_latency: Summary,
    pub migrations: u64,
    pub pingpongs: u64,
    /// Completion times of the non-RT0 tasks that finished: min, max, max/min.
    pub completion_min_ns: Option<u64>,
    pub completion_max_ns: Option<u64>,
    pub completion_spread: Option<f64>,
    /// Non-RT0 tasks that did not finish.
    pub unfinished: usize,
}

impl LbResult {
    /// The run's totals from its tasks.
    pub fn new(cpus: u32, rt_cpus: CpuSet, tasks: Vec<TaskReport>, rt0_latency: Summary) -> Self {
        let (min, max, spread) = completion(&tasks);
        LbResult {
            cpus,
            rt_cpus,
            migrations: tasks.iter().map(|t| t.migrations).sum(),
            pingpongs: tasks.iter().map(|t| t.pingpongs).sum(),
            unfinished: tasks
                .iter()
                .filter(|t| t.class != TaskClass::Rt0 && t.completion_ns.is_none())
                .count(),
            completion_min_ns: min,
            completion_max_ns: max,
            completion_spread: spread,
            tasks,
            rt0_latency,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn task(class: TaskClass, done: Option<u64>, migrations: u64) -> TaskReport {
        TaskReport {
            name: "t".into(),
            class,
            completion_ns: done,
            cpu_ns: 1,
            kernel_ns: 0,
            cpu_percent: vec![100.0],
            switches: 0,
            migrations,
            pingpongs: 0,
        }
    }

    #[test]
    fn totals_leave_rt0_out_of_completion() {
        let r = LbResult::new(
            2,
            CpuSet::single(1),
            vec![
                task(TaskClass::Linux, Some(100), 2),
                task(TaskClass::Linux, Some(150), 1),
                task(TaskClass::Linux, None, 0),
                task(TaskClass::Rt0, Some(1), 0),
            ],
            crate::stats::Hist::new().summary(0),
        );
        assert_eq!(
            (r.completion_min_ns, r.completion_max_ns),
            (Some(100), Some(150))
        );
        assert_eq!(r.completion_spread, Some(1.5));
        assert_eq!((r.migrations, r.unfinished), (3, 1));
    }
}
