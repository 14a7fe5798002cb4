//! The measurement report: one versioned JSON document per `rtmgr measure …` or
//! `rtmgr evaluate` run (schema documented in docs/report-schema.md), and the
//! human tables printed from it (ARTiS Table 1 style; McKenney §3 percentiles).
//! Pure data and formatting: no clock, no files.

use crate::cpuset::CpuSet;
use crate::load::StressorMetrics;
use crate::procstat::CpuEvents;
use crate::stats::{label, HistData, Summary};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;

/// Bumped on any incompatible change; readers must check it.
pub const SCHEMA: &str = "rtmgr.report/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
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
    #[serde(flatten)]
    pub body: Body,
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeSettings {
    pub mode: ProbeMode,
    pub cpus: CpuSet,
    pub interval_ns: u64,
    pub duration_ns: Option<u64>,
    pub loops: Option<u64>,
    pub policy: PolicySpec,
    /// Measuring threads per CPU (McKenney Fig. 8).
    pub parallel: u32,
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

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuResult {
    pub cpu: u32,
    pub summary: Summary,
    pub hist: HistData,
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
    /// CPUs the ordinary load ran on.
    pub cpus: CpuSet,
    /// CPUs where load ran as SCHED_IDLE guests (evaluate's "rtmgr" configuration).
    pub guest_cpus: CpuSet,
    pub metrics: Vec<StressorMetrics>,
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

/// `rtmgr evaluate`: the RT CPU's latency in each configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluateRun {
    pub rt_cpus: CpuSet,
    pub nrt_cpus: CpuSet,
    pub load: String,
    pub interval_ns: u64,
    pub rounds_planned: u32,
    pub rounds_done: u32,
    pub segment_ns: u64,
    pub latency_bound_us: u64,
    pub configs: Vec<ConfigResult>,
    pub verdicts: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigResult {
    /// "idle", "stock", "shield" or "rtmgr".
    pub name: String,
    pub description: String,
    pub result: CpuResult,
    /// Summed over rounds per stressor (bogo-ops/s averaged over segments).
    pub throughput: Vec<StressorMetrics>,
    pub segments: u32,
    pub disturbance: Disturbance,
}

/// Format nanoseconds as µs with one decimal.
pub fn us(ns: Option<i64>) -> String {
    match ns {
        Some(v) => format!("{:.1}", v as f64 / 1000.0),
        None => "-".into(),
    }
}

fn ratio_cell(r: Option<f64>) -> String {
    match r {
        Some(r) => format!("{r:.2}x"),
        None => "-".into(),
    }
}

/// Columns of a summary table: n, min, the percentiles any row supports, max, missed.
pub fn summary_table(rows: &[(String, &Summary)]) -> String {
    let mut ppms: Vec<u32> = rows
        .iter()
        .flat_map(|(_, s)| s.percentiles.iter().map(|p| p.ppm))
        .collect();
    ppms.sort_unstable();
    ppms.dedup();
    let mut header = vec!["".to_string(), "n".into(), "min".into()];
    header.extend(ppms.iter().map(|&p| label(p)));
    header.extend(["max".into(), "missed".into()]);
    let mut table = vec![header];
    for (name, s) in rows {
        let mut r = vec![name.clone(), s.n.to_string(), us(s.min_ns)];
        r.extend(ppms.iter().map(|&p| us(s.get(p))));
        r.extend([us(s.max_ns), s.missed.to_string()]);
        table.push(r);
    }
    let mut out = render(&table);
    out.push_str(
        "(latencies in µs; a percentile is shown only when n has ≥10 samples beyond it)\n",
    );
    out
}

/// Left-align the first column, right-align the others.
pub fn render(table: &[Vec<String>]) -> String {
    let cols = table.iter().map(|r| r.len()).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            table
                .iter()
                .filter_map(|r| r.get(c))
                .map(|s| s.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in table {
        for (c, cell) in r.iter().enumerate() {
            let pad = widths[c].saturating_sub(cell.chars().count());
            if c == 0 {
                out.push_str(cell);
                out.push_str(&" ".repeat(pad));
            } else {
                out.push_str("  ");
                out.push_str(&" ".repeat(pad));
                out.push_str(cell);
            }
        }
        out.push('\n');
    }
    out
}

/// The disturbance lines: steal, then IRQ/softirq totals with their top sources.
pub fn disturbance_text(d: &Disturbance) -> String {
    let mut out = String::new();
    for s in &d.steal {
        let _ = writeln!(out, "cpu{}: steal {:.1} ms", s.cpu, s.steal_ns as f64 / 1e6);
    }
    for (what, evs) in [("irqs", &d.interrupts), ("softirqs", &d.softirqs)] {
        for e in evs {
            let tops: Vec<String> = e
                .top
                .iter()
                .map(|s| format!("{} {}", s.source, s.count))
                .collect();
            let _ = writeln!(
                out,
                "cpu{}: {what} {} ({})",
                e.cpu,
                e.total,
                tops.join(", ")
            );
        }
    }
    out
}

/// Geometric-mean throughput of `c` relative to `base` (see load::relative_throughput).
pub fn throughput_ratio(c: &ConfigResult, base: Option<&ConfigResult>) -> Option<f64> {
    crate::load::relative_throughput(&c.throughput, &base?.throughput)
}

/// The ARTiS-Table-1-style table of `rtmgr evaluate`.
pub fn evaluate_table(e: &EvaluateRun) -> String {
    let find = |n: &str| e.configs.iter().find(|c| c.name == n);
    let (stock, idle) = (find("stock"), find("idle"));
    let mut table = vec![[
        "config",
        "n",
        "p50",
        "p99",
        "p99.9",
        "max",
        "missed",
        "p99/stock",
        "max/stock",
        "p99/idle",
        "throughput/stock",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect::<Vec<_>>()];
    for c in &e.configs {
        let s = &c.result.summary;
        let rel = |base: Option<&ConfigResult>, ppm: Option<u32>| {
            let pick = |x: &Summary| match ppm {
                Some(p) => x.get(p),
                None => x.max_ns,
            };
            base.and_then(|b| crate::stats::ratio(pick(s), pick(&b.result.summary)))
        };
        table.push(vec![
            c.name.clone(),
            s.n.to_string(),
            us(s.get(500_000)),
            us(s.get(990_000)),
            us(s.get(999_000)),
            us(s.max_ns),
            s.missed.to_string(),
            ratio_cell(rel(stock, Some(990_000))),
            ratio_cell(rel(stock, None)),
            ratio_cell(rel(idle, Some(990_000))),
            if c.throughput.is_empty() {
                "-".into()
            } else {
                ratio_cell(throughput_ratio(c, stock))
            },
        ]);
    }
    let mut out = render(&table);
    out.push_str(
        "(latency of the RT CPU in µs; throughput = geometric mean over stressors of bogo-ops/s relative to stock)\n",
    );
    out
}

/// Plain verdict lines for `rtmgr evaluate`, from the numbers of this run only.
pub fn evaluate_verdicts(e: &EvaluateRun) -> Vec<String> {
    let find = |n: &str| e.configs.iter().find(|c| c.name == n);
    let mut v = Vec::new();
    let p99 = |c: &ConfigResult| c.result.summary.get(990_000);
    let max = |c: &ConfigResult| c.result.summary.max_ns;
    let Some(stock) = find("stock") else {
        return vec!["no stock measurement: nothing to compare".into()];
    };
    for name in ["shield", "rtmgr"] {
        let Some(c) = find(name) else { continue };
        let (Some(r99), Some(rmax)) = (
            crate::stats::ratio(p99(c), p99(stock)),
            crate::stats::ratio(max(c), max(stock)),
        ) else {
            v.push(format!("{name}: too few samples to compare with stock"));
            continue;
        };
        let word = |r: f64| {
            if r < 0.9 {
                format!("{:.1}x lower than stock", 1.0 / r)
            } else if r > 1.1 {
                format!("{r:.1}x higher than stock")
            } else {
                "about the same as stock".to_string()
            }
        };
        let mut line = format!(
            "{name}: p99 latency {} ({} vs {} µs), max {} ({} vs {} µs)",
            word(r99),
            us(p99(c)),
            us(p99(stock)),
            word(rmax),
            us(max(c)),
            us(max(stock)),
        );
        if let Some(t) = throughput_ratio(c, Some(stock)) {
            let _ = write!(
                line,
                "; ordinary work ran at {:.0}% of stock throughput",
                t * 100.0
            );
        }
        v.push(line);
    }
    if let (Some(sh), Some(rm)) = (find("shield"), find("rtmgr")) {
        if let (Some(ts), Some(tr)) = (
            throughput_ratio(sh, Some(stock)),
            throughput_ratio(rm, Some(stock)),
        ) {
            if ts < 1.0 {
                let recovered = ((tr - ts) / (1.0 - ts)).clamp(-10.0, 10.0);
                v.push(format!(
                    "rtmgr's SCHED_IDLE guests recovered {:.0}% of the throughput the shield gave up",
                    recovered * 100.0
                ));
            }
        }
    }
    let bound_ns = e.latency_bound_us as i64 * 1000;
    for c in &e.configs {
        if c.name == "idle" {
            continue;
        }
        if let Some(m) = max(c) {
            let over = c.result.summary.missed;
            v.push(format!(
                "{}: max {} µs {} the {} µs bound{}",
                c.name,
                us(Some(m)),
                if m <= bound_ns { "within" } else { "EXCEEDS" },
                e.latency_bound_us,
                if over > 0 {
                    format!(", {over} missed periods")
                } else {
                    String::new()
                }
            ));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::Hist;

    fn cpu_result(cpu: u32, vals: &[i64]) -> CpuResult {
        let mut h = Hist::new();
        for &v in vals {
            h.record(v);
        }
        CpuResult {
            cpu,
            summary: h.summary(1),
            hist: h.to_data(),
        }
    }

    fn sample_latency_report() -> Report {
        let r = cpu_result(1, &[1000, 2000, 3000, 50_000]);
        Report {
            schema: SCHEMA.into(),
            rtmgr_version: "0.1.0".into(),
            command: vec!["rtmgr".into(), "measure".into(), "latency".into()],
            started_unix_s: 1_700_000_000,
            host: HostInfo {
                hostname: "h".into(),
                kernel: "6.18".into(),
                cpus_online: "0-1".parse().unwrap(),
                hypervisor: Some("kvm".into()),
            },
            partial: true,
            partial_reason: Some("interrupted".into()),
            body: Body::Latency(LatencyRun {
                settings: ProbeSettings {
                    mode: ProbeMode::Absolute,
                    cpus: "1".parse().unwrap(),
                    interval_ns: 1_000_000,
                    duration_ns: Some(1_000_000_000),
                    loops: None,
                    policy: PolicySpec::Fifo { priority: 99 },
                    parallel: 1,
                    mlocked: true,
                    dma_latency_held: true,
                },
                load: Some(LoadResult {
                    kind: "all".into(),
                    cpus: "0".parse().unwrap(),
                    guest_cpus: CpuSet::new(),
                    metrics: vec![StressorMetrics {
                        stressor: "cpu".into(),
                        bogo_ops: 10,
                        bogo_ops_per_s: 5.5,
                    }],
                }),
                elapsed_ns: 4_000_000,
                threads: vec![ThreadResult {
                    cpu: 1,
                    index: 0,
                    summary: r.summary.clone(),
                    hist: r.hist.clone(),
                    voluntary_ctxt_switches: 4,
                    involuntary_ctxt_switches: 0,
                    cpu_time_ns: 12345,
                }],
                per_cpu: vec![r.clone()],
                overall: r,
                disturbance: Disturbance {
                    steal: vec![CpuSteal {
                        cpu: 1,
                        steal_ns: 1000,
                    }],
                    interrupts: vec![CpuEvents {
                        cpu: 1,
                        total: 3,
                        top: vec![crate::procstat::SourceCount {
                            source: "LOC".into(),
                            count: 3,
                        }],
                    }],
                    softirqs: vec![],
                },
            }),
        }
    }

    #[test]
    fn json_round_trip_and_kind_tag() {
        let rep = sample_latency_report();
        let json = serde_json::to_string_pretty(&rep).unwrap();
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["schema"], SCHEMA);
        assert_eq!(v["kind"], "latency");
        assert_eq!(v["settings"]["policy"]["policy"], "fifo");
        let back: Report = serde_json::from_str(&json).unwrap();
        assert_eq!(back, rep);
    }

    #[test]
    fn evaluate_round_trip_table_and_verdicts() {
        let m = |v: f64| {
            vec![StressorMetrics {
                stressor: "cpu".into(),
                bogo_ops: 1,
                bogo_ops_per_s: v,
            }]
        };
        let mk = |name: &str, base: i64, thr: Vec<StressorMetrics>| ConfigResult {
            name: name.into(),
            description: String::new(),
            result: cpu_result(1, &(0..2000).map(|i| base + i).collect::<Vec<_>>()),
            throughput: thr,
            segments: 2,
            disturbance: Disturbance::default(),
        };
        let e = EvaluateRun {
            rt_cpus: "1".parse().unwrap(),
            nrt_cpus: "0".parse().unwrap(),
            load: "all".into(),
            interval_ns: 250_000,
            rounds_planned: 2,
            rounds_done: 2,
            segment_ns: 1_000_000_000,
            latency_bound_us: 300,
            configs: vec![
                mk("idle", 1000, vec![]),
                mk("stock", 100_000, m(100.0)),
                mk("shield", 10_000, m(50.0)),
                mk("rtmgr", 10_000, m(75.0)),
            ],
            verdicts: vec![],
        };
        let t = evaluate_table(&e);
        assert!(t.contains("shield"), "{t}");
        assert!(t.contains("0.50x"), "{t}"); // shield throughput / stock
        let v = evaluate_verdicts(&e);
        assert!(
            v.iter()
                .any(|l| l.starts_with("shield: p99 latency") && l.contains("lower")),
            "{v:?}"
        );
        assert!(v.iter().any(|l| l.contains("recovered 50%")), "{v:?}");
        assert!(
            v.iter()
                .any(|l| l.starts_with("stock: max") && l.contains("within")),
            "{v:?}"
        );
        let json = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<EvaluateRun>(&json).unwrap(), e);
    }

    #[test]
    fn summary_table_shows_only_supported_columns() {
        let r = cpu_result(0, &[5, 6]);
        let t = summary_table(&[("cpu0".into(), &r.summary)]);
        assert!(!t.contains("p50"), "{t}");
        assert!(t.contains("missed"));
        assert_eq!(us(Some(1500)), "1.5");
        assert_eq!(us(None), "-");
    }
}
