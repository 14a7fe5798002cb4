//! The measurement report: one versioned JSON document per `rtmgr measure …` or
//! `rtmgr evaluate` run (schema documented in docs/report-schema.md), and the
//! human tables printed from it (ARTiS Table 1 style; McKenney §3 percentiles).
//! Pure data and formatting: no clock, no files.
//! One module per concern: the shared types here, text tables in `text`,
//! evaluate's table and verdicts in `evaluate`, the budget experiment's own
//! schema in `budget`.

mod balancer;
pub(crate) mod compact;
mod evaluate;
mod intervals;
mod text;

pub use balancer::BalancerSummary;
pub use evaluate::*;
pub use intervals::*;
pub use text::*;

use crate::load::{ComponentMetrics, LoadEngine};
use crate::procstat::CpuEvents;
use rtmgr_core::cpuset::CpuSet;
use rtmgr_core::stats::{HistData, Summary};
use serde::{Deserialize, Serialize};

/// Bumped on any incompatible change; readers must check it.
/// `/3` (issue 28): evaluate's per-round figures and intervals.
pub const SCHEMA: &str = "rtmgr.report/3";

/// The schemas this rtmgr reads: today's, and `/2` (no per-round figures: its
/// evaluate verdicts are the point ratios it was written with).
pub const SCHEMAS_READ: [&str; 2] = [SCHEMA, "rtmgr.report/2"];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    #[serde(flatten)]
    pub header: Header,
    #[serde(flatten)]
    pub body: Body,
}

/// The header of every report, flattened into it: `Report` (`rtmgr.report/2`)
/// and the reports with their own schema (`rtmgr.cost/1`, `rtmgr.ablation/1`,
/// `rtmgr.parallel/1`) carry the same keys.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub schema: String,
    pub rtmgr_version: String,
    /// The command line that produced the report.
    pub command: Vec<String>,
    /// Start of the run, seconds since the Unix epoch.
    pub started_unix_s: u64,
    pub host: HostInfo,
    /// True when the run was cut short (Ctrl-C, error): the data are valid but cover less.
    pub partial: bool,
    pub partial_reason: Option<String>,
}

impl Header {
    /// A header for a run of this rtmgr, with the process's command line.
    pub fn new(
        schema: &str,
        started_unix_s: u64,
        host: HostInfo,
        partial: Option<String>,
    ) -> Header {
        Header {
            schema: schema.into(),
            rtmgr_version: env!("CARGO_PKG_VERSION").into(),
            command: std::env::args().collect(),
            started_unix_s,
            host,
            partial: partial.is_some(),
            partial_reason: partial,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostInfo {
    pub hostname: String,
    pub kernel: String,
    pub cpus_online: CpuSet,
    /// e.g. "kvm" when /sys/hypervisor or cpuinfo says so; None when unknown/bare metal.
    pub hypervisor: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Body {
    Latency(LatencyRun),
    Exec(ExecRun),
    Periodicity(PeriodicityRun),
    Compare(CompareRun),
    Evaluate(EvaluateRun),
    /// `"trace_cost"` (the other kinds are one word).
    #[serde(rename = "trace_cost")]
    TraceCost(TraceCostRun),
}

/// How the probe waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeMode {
    /// clock_nanosleep(TIMER_ABSTIME) to t0 + k·interval; latency = wake − release.
    Absolute,
    /// McKenney Fig. 1: nanosleep(interval); jitter = elapsed − interval (signed).
    Relative,
}

/// Scheduling of the measuring threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "lowercase")]
pub enum PolicySpec {
    Fifo { priority: u8 },
    Rr { priority: u8 },
    Deadline { runtime_ns: u64, period_ns: u64 },
}

/// What a latency probe runs: where, how often, for how long, at what policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeSpec {
    pub mode: ProbeMode,
    pub cpus: CpuSet,
    pub interval_ns: u64,
    /// Stop after this long (from the common start), or after `loops` samples.
    pub duration_ns: Option<u64>,
    pub loops: Option<u64>,
    pub policy: PolicySpec,
    /// Measuring threads per CPU (McKenney Fig. 8).
    pub parallel: u32,
}

/// The probe of a latency report and the conditions it ran under.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeSettings {
    #[serde(flatten)]
    pub probe: ProbeSpec,
    pub mlocked: bool,
    /// /dev/cpu_dma_latency held at 0 during the run.
    pub dma_latency_held: bool,
}

/// One measuring thread's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadResult {
    pub cpu: u32,
    pub index: u32,
    pub summary: Summary,
    pub hist: HistData,
    pub voluntary_ctxt_switches: u64,
    pub involuntary_ctxt_switches: u64,
    /// CPU time the thread consumed (CLOCK_THREAD_CPUTIME_ID).
    pub cpu_time_ns: u64,
}

/// One CPU's samples: all of them (`summary`, `hist`), and the tail without
/// the host's stalls (issue 21, docs/evaluate.md "Two tails").
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuResult {
    pub cpu: u32,
    pub summary: Summary,
    pub hist: HistData,
    /// The samples the host did not stall, on evidence (`rtmgr_core::host_stall`):
    /// every sample but those of late wake-ups labelled host. None: not labelled
    /// (older reports, and results that are not the latency probe's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_summary: Option<Summary>,
    /// Samples of the wake-ups labelled host (each wake-up with the releases it missed).
    #[serde(default)]
    pub host_stalled_samples: u64,
    /// Σ (wake − release) of the wake-ups labelled host.
    #[serde(default)]
    pub host_stalled_ns: u64,
}

/// What disturbed the run on the measured CPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Disturbance {
    /// Steal time per measured CPU during the run (hypervisor).
    pub steal: Vec<CpuSteal>,
    pub interrupts: Vec<CpuEvents>,
    pub softirqs: Vec<CpuEvents>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuSteal {
    pub cpu: u32,
    pub steal_ns: u64,
}

/// The load that ran, and the throughput ordinary work achieved under it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadResult {
    pub kind: String,
    /// The program that ran the load.
    pub engine: LoadEngine,
    /// CPUs the ordinary load ran on.
    pub cpus: CpuSet,
    /// CPUs where load ran as SCHED_IDLE guests (evaluate's "rtmgr" configuration).
    pub guest_cpus: CpuSet,
    pub metrics: Vec<ComponentMetrics>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyRun {
    pub settings: ProbeSettings,
    pub load: Option<LoadResult>,
    pub elapsed_ns: u64,
    pub threads: Vec<ThreadResult>,
    pub per_cpu: Vec<CpuResult>,
    pub overall: CpuResult,
    pub disturbance: Disturbance,
    /// What explains the tail (`--trace`), per sample above the threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tail_causes: Option<crate::trace::TailCauses>,
}

/// ARTiS §3.2: execution time of a routine of `divisions` integer divisions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecRun {
    pub cpu: u32,
    pub divisions: u64,
    pub runs: u64,
    pub priority: u8,
    /// Shortest run of the unloaded pass.
    pub t_min_ns: Option<i64>,
    pub unloaded: CpuResult,
    pub loaded: Option<CpuResult>,
    pub load: Option<LoadResult>,
    /// max − T_min under load (or unloaded when no load), ns and % of T_min.
    pub max_over_t_min_ns: Option<i64>,
    pub max_over_t_min_pct: Option<f64>,
}

/// DROPS §5.3: two tasks alternately woken by a periodic timer task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeriodicityRun {
    pub cpu: u32,
    pub period_ns: u64,
    pub load: Option<LoadResult>,
    /// Timer periods elapsed = activations expected.
    pub expected: u64,
    pub activations: u64,
    /// Expected activations that never happened (coalesced wake-ups, timer overruns).
    pub lost: u64,
    /// Time between consecutive activations (merged log of both tasks).
    pub inter_activation: CpuResult,
    /// Inter-activation time − period (signed).
    pub deviation: CpuResult,
    /// The first activations' inter-activation times, for the DROPS Figs. 6–8 plot.
    pub series_ns: Vec<i64>,
}

/// `--compare-cyclictest`: rtmgr's probe and cyclictest alternated under one load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareRun {
    pub cpu: u32,
    pub interval_ns: u64,
    pub rounds: u32,
    pub segment_ns: u64,
    pub load: Option<LoadResult>,
    pub rtmgr: ToolResult,
    pub cyclictest: ToolResult,
    pub cyclictest_command: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub result: CpuResult,
    /// CPU time consumed by the measuring process/threads per sample, ns.
    pub cpu_ns_per_sample: Option<f64>,
    /// Samples above the tool's histogram range (cyclictest -h), counted in max only.
    pub overflows: u64,
    /// Histogram resolution of the tool, ns (cyclictest: 1000).
    pub resolution_ns: u64,
}

/// `rtmgr measure latency --trace-cost`: the same probe with and without the
/// tail tracer, alternated in rounds under the same load: what tracing costs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceCostRun {
    pub cpus: CpuSet,
    pub interval_ns: u64,
    pub rounds: u32,
    pub segment_ns: u64,
    pub load: Option<LoadResult>,
    pub untraced: CpuResult,
    pub traced: CpuResult,
    /// Events the tracer read, per second of traced measuring, and lost.
    pub events: u64,
    pub events_per_s: f64,
    pub events_lost: u64,
}

/// The worst run of a `rtmgr measure exec --json` report (the loaded pass
/// when there is one), used as a measured WCET.
pub fn wcet_from_report(json: &str) -> Result<u64, String> {
    let r: Report = serde_json::from_str(json).map_err(|e| format!("not an rtmgr report: {e}"))?;
    let Body::Exec(x) = r.body else {
        return Err("not a `measure exec` report".into());
    };
    let res = x.loaded.as_ref().unwrap_or(&x.unloaded);
    res.summary
        .max_ns
        .filter(|&v| v > 0)
        .map(|v| v as u64)
        .ok_or_else(|| "the report has no runs".into())
}

#[cfg(test)]
mod tests;
