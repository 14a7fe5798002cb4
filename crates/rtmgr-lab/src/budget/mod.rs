//! `rtmgr measure budget`'s report (schema `rtmgr.budget/1`, documented in
//! docs/report-schema.md): budget-based RTAI §4.1 enforcement overhead and
//! §4.2 budget rate per task and enforcement mode, and its text table (pure);
//! `plot` draws the rates and `run` measures them.

mod plot;
pub mod run;

pub use plot::budget_rates_svg;

use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

pub const BUDGET_SCHEMA: &str = "rtmgr.budget/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetReport {
    pub schema: String,
    pub command: String,
    /// Cut short by SIGINT/SIGTERM: the data are valid but cover less.
    pub interrupted: bool,
    pub runs: Vec<BudgetRun>,
}

/// One experiment in one enforcement mode, merged over its rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetRun {
    /// "overhead" (§4.1), "precision" (§4.2) or "group".
    pub experiment: String,
    /// "soft/rearm", "soft/early-spin", "soft/compensate", "hard" or "soft/group".
    pub mode: String,
    pub duration_ms: u64,
    pub tasks: Vec<BudgetTaskResult>,
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetTaskResult {
    pub name: String,
    pub kind: String,
    pub period_ns: u64,
    pub budget_ns: u64,
    pub cpu: Option<u32>,
    pub periods: usize,
    /// Periods dropped at the start (learning / start-up).
    pub warmup: usize,
    pub tolerance_pct: f64,
    pub within_tolerance_pct: f64,
    pub violations: usize,
    /// Violations above the tolerance (the task got more than its budget).
    pub over_budget: usize,
    /// Violations below it (a task that wanted its budget did not get it:
    /// preemption, hypervisor or kernel interference; not enforcement).
    pub under_budget: usize,
    pub rate_min_pct: f64,
    pub rate_mean_pct: f64,
    pub rate_max_pct: f64,
    pub exhaustions: u64,
    pub ignored_waits: u64,
    pub missed: u64,
    pub kernel_overruns: u64,
    pub expirations: u64,
    pub handler_cpu_avg_ns: f64,
    pub handler_cpu_max_ns: u64,
    pub signal_late_avg_ns: f64,
    pub signal_late_max_ns: u64,
    pub overhead_per_period_ns: f64,
    pub release_latency_avg_ns: f64,
    pub release_latency_max_ns: u64,
    /// Budget rate per period in % (after warm-up, at most 500).
    pub rates: Vec<f64>,
}

/// One line per task and mode: budget rate, violations, handler cost.
pub fn budget_table(runs: &[BudgetRun]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<10} {:<17} {:<8} {:>6} {:>6} {:>6} {:>8} {:>11} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}",
        "experiment", "mode", "task", "P(ms)", "W(ms)", "n", "within%", "over/under", "rate min", "mean", "max",
        "hdl avg", "hdl max", "sig late", "ovh/per"
    );
    for r in runs {
        for t in &r.tasks {
            let _ = writeln!(
                s,
                "{:<10} {:<17} {:<8} {:>6.2} {:>6.2} {:>6} {:>8.2} {:>11} {:>8.1} {:>8.2} {:>8.1} {:>7.1}µs {:>7.1}µs {:>7.1}µs {:>7.2}µs",
                r.experiment,
                r.mode,
                t.name,
                t.period_ns as f64 / 1e6,
                t.budget_ns as f64 / 1e6,
                t.periods,
                t.within_tolerance_pct,
                format!("{}/{}", t.over_budget, t.under_budget),
                t.rate_min_pct,
                t.rate_mean_pct,
                t.rate_max_pct,
                t.handler_cpu_avg_ns / 1e3,
                t.handler_cpu_max_ns as f64 / 1e3,
                t.signal_late_avg_ns / 1e3,
                t.overhead_per_period_ns / 1e3,
            );
        }
        for e in &r.errors {
            let _ = writeln!(s, "{:<10} {:<17} error: {e}", r.experiment, r.mode);
        }
    }
    s
}
