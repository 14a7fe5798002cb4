//! What `rtmgr advise` knows: the workload as the user describes it (flags or
//! a workload file — only the user knows these), and the facts measured on
//! this machine (McKenney §5's principles 3 and 4: memory, virtualisation) or
//! read from an earlier report (`--from`: evaluate's tail, measure cost's
//! slowdowns). Pure: the caller reads the files.

use crate::cost::CostReport;
use crate::report::{EvaluateRun, Report};
use rtmgr_core::host_preemption::{HostPreemption, HOW_TO_MEASURE};
use serde::{Deserialize, Serialize};

/// The workload, as the user describes it. Unknown fields stay None.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Only throughput matters (principle 1).
    pub throughput_only: Option<bool>,
    /// Processing time of one work item, µs (principle 6).
    pub work_us: Option<f64>,
    /// Deadline from the item's release to its completion, µs.
    pub deadline_us: Option<f64>,
    /// Period of the work items, µs (for a daemon reservation).
    pub period_us: Option<f64>,
    /// Peak CPU utilisation of the real-time work per RT CPU, 0..1 (principle 2).
    pub utilization: Option<f64>,
    /// Memory the real-time work must lock, MiB (principle 3).
    pub memory_mib: Option<f64>,
    /// Share of the work spent in kernel services, 0..1 (principle 5).
    pub kernel_share: Option<f64>,
}

/// A workload file (TOML, the keys of `Workload`).
pub fn parse_workload(text: &str) -> Result<Workload, String> {
    let w: Workload = toml::from_str(text).map_err(|e| e.to_string())?;
    for (name, v) in [
        ("utilization", w.utilization),
        ("kernel_share", w.kernel_share),
    ] {
        if let Some(v) = v {
            if !(0.0..=1.0).contains(&v) {
                return Err(format!("{name} = {v}: expected 0..1"));
            }
        }
    }
    Ok(w)
}

/// Measured facts about the machine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Facts {
    /// The hypervisor, if the CPU says it runs under one.
    pub hypervisor: Option<String>,
    /// Steal time share of the worst CPU over `steal_window_ms`.
    pub steal_share: Option<f64>,
    pub steal_window_ms: u64,
    pub mem_available_bytes: Option<u64>,
    pub swap_total_bytes: Option<u64>,
    pub swap_free_bytes: Option<u64>,
    pub online_cpus: u32,
    /// The utilisation cap per RT CPU the daemon admits up to.
    pub rt_cap: f64,
    pub tail: Option<TailFact>,
    pub cost: Option<CostFact>,
    /// The steal share taken with the CPUs busy, and where from; when absent,
    /// `steal_share` is an idle sample of `steal_window_ms`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal: Option<StealFact>,
    /// The cached host-preemption test (`rtmgr status --host-test`), if recent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_test: Option<HostTestFact>,
}

/// Steal time with the CPUs busy: what the hypervisor takes under load.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StealFact {
    /// Share of the worst CPU's time, 0..1.
    pub share: f64,
    /// How it was taken, quoted in the answer.
    pub how: String,
    pub source: super::Source,
}

/// What the cached host-preemption test said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostTestFact {
    pub preempts: bool,
    pub stall_max_ns: Option<i64>,
    pub verdict: String,
    pub measured_at_unix_s: u64,
    /// Its capacity measurement (status item `cpu_capacity`), if it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capacity: Option<CapacityFact>,
}

/// What 1…N busy vCPUs did in the host test (issue 28).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityFact {
    /// CPUs' worth of work with every candidate CPU busy.
    pub effective_cpus: f64,
    /// What the last busy CPU (the RT CPU, were it lent) added, in CPUs.
    pub marginal: f64,
    pub finding: String,
}

/// The steal of the `stock` configuration of an evaluate run (the RT CPU
/// under the load, no partition): its worst CPU's share of the time measured.
pub fn steal_from_evaluate(run: &EvaluateRun, source: &str) -> Option<StealFact> {
    let stock = run.configs.iter().find(|c| c.name == "stock")?;
    let elapsed_ns = u64::from(stock.segments) * run.segment_ns;
    let worst = stock.disturbance.steal.iter().max_by_key(|s| s.steal_ns)?;
    (elapsed_ns > 0).then(|| StealFact {
        share: (worst.steal_ns as f64 / elapsed_ns as f64).min(1.0),
        how: format!(
            "CPU {} lost {:.0} ms to steal in {:.1} s of `stock` under the {} load",
            worst.cpu,
            worst.steal_ns as f64 / 1e6,
            elapsed_ns as f64 / 1e9,
            run.load
        ),
        source: super::Source::Report(source.into()),
    })
}

/// The cached host test's steal with the spinner beside the probe (every CPU
/// busy), worst CPU; and its verdict.
pub fn from_host_test(r: &HostPreemption) -> (Option<StealFact>, HostTestFact) {
    let worst = r.per_cpu.iter().max_by(|a, b| {
        a.with_spinner
            .steal_ms_per_s
            .total_cmp(&b.with_spinner.steal_ms_per_s)
    });
    let steal = worst.map(|c| StealFact {
        share: (c.with_spinner.steal_ms_per_s / 1000.0).min(1.0),
        how: format!(
            "CPU {} with every CPU busy for {:.1} s in the host test",
            c.cpu, c.with_spinner.seconds
        ),
        source: super::Source::Measured(format!(
            "{} (`{HOW_TO_MEASURE}`)",
            rtmgr_linux::host_preemption::CACHE_PATH
        )),
    });
    let fact = HostTestFact {
        preempts: r.preempts,
        stall_max_ns: r.stall_max_ns,
        verdict: r.verdict.clone(),
        measured_at_unix_s: r.setup.measured_at_unix_s,
        capacity: r.cpu_capacity.as_ref().map(|c| CapacityFact {
            effective_cpus: c.effective_cpus,
            marginal: c.marginal,
            finding: c.finding.clone(),
        }),
    };
    (steal, fact)
}

/// Scheduling latency per configuration, from an evaluate report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TailFact {
    /// The report file.
    pub source: String,
    /// "p99.9".
    pub percentile: String,
    /// (configuration, latency ns) for those that have the percentile.
    pub latency_ns: Vec<(String, i64)>,
}

impl TailFact {
    pub fn get(&self, config: &str) -> Option<i64> {
        self.latency_ns
            .iter()
            .find(|(c, _)| c == config)
            .map(|(_, v)| *v)
    }
}

/// The cost of real time per configuration, from a cost report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostFact {
    pub source: String,
    /// Per configuration: (name, user-mode slowdown (the build's user time),
    /// kernel slowdown (geometric mean of the micro-benchmarks), throughput
    /// relative to stock (the sweep)).
    pub configs: Vec<ConfigCost>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConfigCost {
    pub config: String,
    pub user_slowdown: Option<f64>,
    pub kernel_slowdown: Option<f64>,
    pub build_slowdown: Option<f64>,
    pub throughput: Option<f64>,
}

impl CostFact {
    pub fn get(&self, config: &str) -> Option<&ConfigCost> {
        self.configs.iter().find(|c| c.config == config)
    }
}

/// The tail at `ppm` of every configuration of an evaluate run; when the
/// run is too short for it (a percentile needs enough samples beyond it),
/// the highest reported percentile below it that every configuration has.
pub fn tail_from_evaluate(run: &EvaluateRun, ppm: u32, source: &str) -> TailFact {
    let measured: Vec<_> = run
        .configs
        .iter()
        .filter(|c| c.result.summary.n > 0)
        .collect();
    let mut candidates = vec![ppm];
    candidates.extend(
        rtmgr_core::stats::PERCENTILES_PPM
            .iter()
            .rev()
            .copied()
            .filter(|p| *p < ppm),
    );
    let chosen = candidates
        .into_iter()
        .find(|p| measured.iter().all(|c| c.result.summary.get(*p).is_some()))
        .unwrap_or(ppm);
    TailFact {
        source: source.into(),
        percentile: rtmgr_core::stats::label(chosen),
        latency_ns: measured
            .iter()
            .filter_map(|c| Some((c.name.clone(), c.result.summary.get(chosen)?)))
            .collect(),
    }
}

/// The evaluate run in a report, if it is one.
pub fn evaluate_run(r: &Report) -> Option<&EvaluateRun> {
    match &r.body {
        crate::report::Body::Evaluate(e) => Some(e),
        _ => None,
    }
}

fn geo_mean(xs: &[f64]) -> Option<f64> {
    let v: Vec<f64> = xs
        .iter()
        .copied()
        .filter(|x| *x > 0.0 && x.is_finite())
        .collect();
    (!v.is_empty()).then(|| (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp())
}

/// Each configuration's slowdowns and throughput from a cost report.
pub fn cost_from_report(r: &CostReport, source: &str) -> CostFact {
    let configs = r
        .configs
        .iter()
        .map(|c| {
            let micro: Vec<f64> = r
                .micro
                .iter()
                .filter_map(|b| b.per_config.iter().find(|m| m.config == c.name)?.slowdown)
                .collect();
            let build = r
                .build
                .as_ref()
                .and_then(|b| b.per_config.iter().find(|x| x.config == c.name));
            ConfigCost {
                config: c.name.clone(),
                user_slowdown: build.and_then(|b| b.user_s.slowdown),
                kernel_slowdown: geo_mean(&micro),
                build_slowdown: build.and_then(|b| b.real_s.slowdown),
                throughput: r
                    .sweep
                    .as_ref()
                    .and_then(|s| s.per_config.iter().find(|x| x.config == c.name))
                    .and_then(|x| x.relative_to_stock),
            }
        })
        .collect();
    CostFact {
        source: source.into(),
        configs,
    }
}

/// /proc/stat counts in USER_HZ ticks, 100 per second on every Linux ABI.
pub const USER_HZ: f64 = 100.0;

/// The worst CPU's steal share between two /proc/stat readings `window_ms` apart.
pub fn steal_share(before: &str, after: &str, window_ms: u64) -> Option<f64> {
    let (a, b) = (
        crate::procstat::parse_steal(before),
        crate::procstat::parse_steal(after),
    );
    let ticks = window_ms as f64 / 1000.0 * USER_HZ;
    if ticks <= 0.0 {
        return None;
    }
    b.iter()
        .filter_map(|(cpu, s)| Some(s.saturating_sub(*a.get(cpu)?) as f64 / ticks))
        .map(|x| x.min(1.0))
        .reduce(f64::max)
}

/// MemAvailable, SwapTotal and SwapFree from /proc/meminfo, in bytes.
pub fn parse_meminfo(text: &str) -> (Option<u64>, Option<u64>, Option<u64>) {
    let get = |key: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(key)?.strip_prefix(':')?;
            let kib: u64 = rest.split_whitespace().next()?.parse().ok()?;
            Some(kib * 1024)
        })
    };
    (get("MemAvailable"), get("SwapTotal"), get("SwapFree"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steal_and_memory_from_proc_text() {
        let before =
            "cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 1 0 0 0 0 0 0 10 0 0\ncpu1 1 0 0 0 0 0 0 20 0 0\n";
        let after =
            "cpu  1 2 3 4 5 6 7 8 0 0\ncpu0 1 0 0 0 0 0 0 12 0 0\ncpu1 1 0 0 0 0 0 0 25 0 0\n";
        // cpu1: 5 ticks of 100 in one second.
        assert_eq!(steal_share(before, after, 1000), Some(0.05));
        assert_eq!(steal_share(before, after, 0), None);
        let m = "MemTotal: 8000 kB\nMemAvailable:    2048 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\n";
        assert_eq!(parse_meminfo(m), (Some(2 << 20), Some(0), Some(0)));
        assert_eq!(parse_meminfo(""), (None, None, None));
    }

    #[test]
    fn workload_files_are_checked() {
        let w = parse_workload("work_us = 100\ndeadline_us = 250\nutilization = 0.6\n").unwrap();
        assert_eq!(w.work_us, Some(100.0));
        assert_eq!(w.utilization, Some(0.6));
        assert!(parse_workload("utilization = 1.5").is_err());
        assert!(parse_workload("wrok_us = 1").is_err());
        assert_eq!(parse_workload("").unwrap(), Workload::default());
    }

    #[test]
    fn geometric_mean_ignores_missing() {
        assert!((geo_mean(&[2.0, 8.0]).unwrap() - 4.0).abs() < 1e-12);
        assert_eq!(geo_mean(&[f64::NAN]), None);
    }
}
