//! The task sets of `rtmgr measure budget` (budget-based RTAI §4.1–4.2, §5):
//! the seed's own sets, and a user's set from a TOML file, checked before
//! anything runs.

use serde::{Deserialize, Serialize};

/// One task of a task set.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    pub name: String,
    pub period_ms: f64,
    pub budget_ms: f64,
    /// "compute" (runs without ever calling wait_period unless `job_ms`) or
    /// "io" (reads a file in 512-byte chunks; jobs of 0.6–1.4 W).
    #[serde(default = "compute")]
    pub kind: String,
    /// compute: CPU time per job; absent = never waits (a runaway).
    #[serde(default)]
    pub job_ms: Option<f64>,
    /// Soft mode: pin to this CPU (hard mode runs unpinned).
    #[serde(default)]
    pub cpu: Option<u32>,
    /// Soft mode SCHED_FIFO priority (default: rate-monotonic from 60 down).
    #[serde(default)]
    pub priority: Option<u8>,
}

fn compute() -> String {
    "compute".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskSetFile {
    task: Vec<TaskSpec>,
}

/// A task set file: `[[task]]` tables.
pub fn parse(text: &str) -> Result<Vec<TaskSpec>, String> {
    toml::from_str::<TaskSetFile>(text)
        .map(|f| f.task)
        .map_err(|e| e.to_string())
}

pub(super) fn spec(name: &str, p: f64, w: f64, kind: &str, cpu: Option<u32>) -> TaskSpec {
    TaskSpec {
        name: name.into(),
        period_ms: p,
        budget_ms: w,
        kind: kind.into(),
        job_ms: None,
        cpu,
        priority: None,
    }
}

/// Seed §4.1 task set, on the last CPU (CPU 0 takes most interrupts).
pub fn overhead_set(online_cpus: u32) -> Vec<TaskSpec> {
    let last = online_cpus - 1;
    vec![
        spec("tau1", 2.0, 1.0, "compute", Some(last)),
        spec("tau2", 5.0, 1.0, "compute", Some(last)),
    ]
}

/// Group experiment: two runaway members sharing (P=4 ms, W=1 ms), unpinned
/// (Linux spreads them over the CPUs their cpuset allows).
pub fn group_set() -> Vec<TaskSpec> {
    vec![
        spec("m1", 4.0, 1.0, "compute", None),
        spec("m2", 4.0, 1.0, "compute", None),
    ]
}

/// Seed §4.2 task set: three compute tasks on the last CPU, the I/O task on CPU 0.
pub fn precision_set(online_cpus: u32) -> Vec<TaskSpec> {
    let last = online_cpus - 1;
    vec![
        spec("tau1", 4.0, 1.0, "compute", Some(last)),
        spec("tau2", 2.0, 0.5, "compute", Some(last)),
        spec("tau3", 1.0, 0.25, "compute", Some(last)),
        spec("tau4-io", 20.0, 5.0, "io", Some(0)),
    ]
}

/// Check a task set against a machine of `online_cpus` CPUs.
pub fn validate(set: &[TaskSpec], online_cpus: u32) -> Result<(), String> {
    if set.is_empty() {
        return Err("task set is empty".into());
    }
    for t in set {
        let ok = t.period_ms.is_finite()
            && t.budget_ms.is_finite()
            && t.period_ms > 0.0
            && t.budget_ms > 0.0
            && t.budget_ms <= t.period_ms
            && t.period_ms <= 10_000.0;
        if !ok {
            return Err(format!(
                "task {}: need 0 < budget_ms <= period_ms <= 10000 (got P={} W={})",
                t.name, t.period_ms, t.budget_ms
            ));
        }
        if t.kind != "compute" && t.kind != "io" {
            return Err(format!("task {}: kind must be compute or io", t.name));
        }
        if let Some(j) = t.job_ms {
            if !(j.is_finite() && j > 0.0) {
                return Err(format!("task {}: job_ms must be > 0", t.name));
            }
        }
        if t.cpu.is_some_and(|c| c >= online_cpus) {
            return Err(format!("task {}: CPU {:?} does not exist", t.name, t.cpu));
        }
        if t.priority.is_some_and(|p| !(1..=98).contains(&p)) {
            return Err(format!("task {}: priority must be 1..98", t.name));
        }
    }
    Ok(())
}

/// Milliseconds (as written in task sets) to ns.
pub fn ns(ms: f64) -> u64 {
    (ms * 1e6).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sets_are_valid_and_file_parses() {
        validate(&overhead_set(2), 2).unwrap();
        validate(&precision_set(2), 2).unwrap();
        let f = parse(
            "[[task]]\nname = \"a\"\nperiod_ms = 4.0\nbudget_ms = 1.0\n\n[[task]]\nname = \"b\"\nperiod_ms = 20\nbudget_ms = 5\nkind = \"io\"\n",
        )
        .unwrap();
        validate(&f, 2).unwrap();
        let mut bad = f.clone();
        bad[0].budget_ms = 5.0;
        assert!(validate(&bad, 2).is_err());
        bad[0].budget_ms = 1.0;
        bad[0].kind = "gpu".into();
        assert!(validate(&bad, 2).is_err());
        bad[0].kind = "compute".into();
        bad[0].cpu = Some(2);
        assert!(validate(&bad, 2).is_err());
        assert!(parse("[[task]]\nname=\"x\"\nperiod_ms=1\nbudget_ms=1\nbogus=1\n").is_err());
    }
}
