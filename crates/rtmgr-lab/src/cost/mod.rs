//! What real time costs ordinary work (`rtmgr measure cost`, schema
//! `rtmgr.cost/1` in docs/report-schema.md): the same work in every
//! configuration, as mean ± sd and the slowdown against stock Linux — DROPS
//! §5.1 Fig. 4 (micro-benchmarks), McKenney §2.2 Table 1 (a build's real/user/
//! sys) and DROPS §5.2 Fig. 5 (jobs per minute against load). The whole
//! feature is here: this file's report, statistics and `text`'s tables and
//! `plot`'s figures are pure; `run` is the engine on the machine and `micro`
//! the worker it starts in each configuration.

pub mod micro;
mod plot;
pub mod run;
mod text;

pub use plot::{slowdown_svg, sweep_svg};
pub use text::{build_table, micro_table, sig3, sweep_table};

use crate::report::Header;
use rtmgr_core::cpuset::CpuSet;
use rtmgr_core::stats::bootstrap::{ratio_interval, weighted_mean, Interval, Resampling};
use serde::{Deserialize, Serialize};

/// Bumped on any incompatible change; readers must check it.
pub const COST_SCHEMA: &str = "rtmgr.cost/1";

/// The configuration every other is compared with.
pub const BASELINE: &str = "stock";

/// Mean and sample standard deviation (n − 1; 0 for one sample).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MeanSd {
    pub n: usize,
    pub mean: f64,
    pub sd: f64,
}

/// Mean ± sd of the finite values; None when there are none.
pub fn mean_sd(xs: &[f64]) -> Option<MeanSd> {
    let v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    let n = v.len();
    let mean = v.iter().sum::<f64>() / n as f64;
    let sd = if n > 1 {
        (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    } else {
        0.0
    };
    Some(MeanSd { n, mean, sd })
}

/// Which way is better for a figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Times (ns per operation, seconds of a build).
    Lower,
    /// Rates (MB/s, jobs per minute).
    Higher,
}

/// How many times slower than the baseline: > 1 is slower whichever way the
/// figure goes (time / baseline time, or baseline rate / rate). None when
/// either is missing or the denominator is zero.
pub fn slowdown(value: Option<f64>, baseline: Option<f64>, better: Better) -> Option<f64> {
    let (v, b) = (value?, baseline?);
    let (num, den) = match better {
        Better::Lower => (v, b),
        Better::Higher => (b, v),
    };
    (den > 0.0 && num.is_finite()).then(|| num / den)
}

/// One figure of one configuration over the rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    pub config: String,
    /// One value per round, in the order measured.
    pub samples: Vec<f64>,
    pub stats: Option<MeanSd>,
    /// Against the stock configuration (see `slowdown`); 1 for stock itself.
    pub slowdown: Option<f64>,
    /// The slowdown's 95 % interval (issue 28, `slowdown_interval`); None for
    /// stock, with fewer than 4 rounds, and in reports before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown_ci: Option<Interval>,
}

impl Measured {
    pub fn new(config: &str, samples: Vec<f64>) -> Measured {
        Measured {
            config: config.into(),
            stats: mean_sd(&samples),
            samples,
            slowdown: None,
            slowdown_ci: None,
        }
    }

    pub fn mean(&self) -> Option<f64> {
        self.stats.map(|s| s.mean)
    }
}

/// Fill every row's slowdown against the row named `BASELINE`, with its interval.
pub fn set_slowdowns(rows: &mut [Measured], better: Better) {
    let base = rows.iter().find(|m| m.config == BASELINE);
    let (mean, samples) = (
        base.and_then(Measured::mean),
        base.map(|b| b.samples.clone()),
    );
    for m in rows {
        m.slowdown = slowdown(m.mean(), mean, better);
        m.slowdown_ci = match &samples {
            Some(b) if m.config != BASELINE => slowdown_interval(&m.samples, b, better),
            _ => None,
        };
    }
}

/// The 95 % interval of the slowdown of per-round `values` against the
/// baseline's of the same rounds: the paired bootstrap over rounds of the
/// ratio of means (`rtmgr_core::stats::bootstrap`; docs/cost.md). None
/// when the two have not one value per round each, or fewer than 4 rounds.
pub fn slowdown_interval(values: &[f64], base: &[f64], better: Better) -> Option<Interval> {
    if values.len() != base.len() || values.iter().chain(base).any(|x| !x.is_finite()) {
        return None;
    }
    let r = Resampling::standard(values.len()).ok()?;
    let opt = |xs: &[f64]| xs.iter().map(|x| Some(*x)).collect::<Vec<_>>();
    let (v, b) = (opt(values), opt(base));
    let (num, den) = match better {
        Better::Lower => (&v, &b),
        Better::Higher => (&b, &v),
    };
    ratio_interval(
        &r.replicate(|w| weighted_mean(num, w)),
        &r.replicate(|w| weighted_mean(den, w)),
    )
    .ok()
}

/// A configuration the work ran in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostConfig {
    pub name: String,
    pub description: String,
    /// CPUs left to Linux tasks (where the work ran).
    pub work_cpus: CpuSet,
}

/// One micro-benchmark (DROPS Fig. 4, hbench:OS / lmbench style).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MicroBench {
    /// e.g. "null-syscall".
    pub name: String,
    pub what: String,
    /// "ns" (per operation) or "MB/s".
    pub unit: String,
    pub better: Better,
    pub per_config: Vec<Measured>,
}

/// McKenney Table 1: one code base built from clean, timed from wait4's rusage.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildCost {
    /// What was built (crate name and version, or a directory).
    pub source: String,
    /// The build command without its -j.
    pub command: Vec<String>,
    pub per_config: Vec<BuildConfigCost>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BuildConfigCost {
    pub config: String,
    /// Parallel jobs = the CPUs this configuration leaves to Linux tasks.
    pub jobs: u32,
    /// Seconds: wall clock, user and system CPU time of the build and its children.
    pub real_s: Measured,
    pub user_s: Measured,
    pub sys_s: Measured,
    /// Builds that failed (not counted), with why.
    pub failures: Vec<String>,
}

/// DROPS §5.2 Fig. 5 (AIM): jobs per minute of a fixed job mix against the
/// number of jobs run at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepCost {
    /// What one job does.
    pub job: String,
    /// How long each point is measured, per round.
    pub segment_ms: u64,
    pub levels: Vec<u32>,
    pub per_config: Vec<SweepConfigCost>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepConfigCost {
    pub config: String,
    /// Jobs per minute at each level (same order as `levels`).
    pub points: Vec<Measured>,
    /// Mean over the levels of this configuration's jobs/min ÷ stock's at the same level.
    pub relative_to_stock: Option<f64>,
    /// The highest mean jobs/min, and the number of concurrent jobs it came at.
    pub max_jobs_per_min: Option<f64>,
    pub max_at: Option<u32>,
}

/// Fill the per-configuration summary of a sweep from its points.
pub fn summarize_sweep(levels: &[u32], rows: &mut [SweepConfigCost]) {
    let base: Vec<Option<f64>> = rows
        .iter()
        .find(|r| r.config == BASELINE)
        .map(|r| r.points.iter().map(Measured::mean).collect())
        .unwrap_or_default();
    for r in rows.iter_mut() {
        let ratios: Vec<f64> = r
            .points
            .iter()
            .zip(&base)
            .filter_map(|(p, b)| match (p.mean(), *b) {
                (Some(v), Some(b)) if b > 0.0 => Some(v / b),
                _ => None,
            })
            .collect();
        r.relative_to_stock = mean_sd(&ratios).map(|s| s.mean);
        let best = r
            .points
            .iter()
            .zip(levels)
            .filter_map(|(p, l)| p.mean().map(|m| (m, *l)))
            // The first level that reaches the maximum.
            .fold(None, |best: Option<(f64, u32)>, x| match best {
                Some(b) if b.0 >= x.0 => Some(b),
                _ => Some(x),
            });
        r.max_jobs_per_min = best.map(|b| b.0);
        r.max_at = best.map(|b| b.1);
        for p in &mut r.points {
            p.slowdown = None;
        }
    }
}

/// Concurrency levels 1, 2, 4, … up to `4 × cpus` (past saturation).
pub fn sweep_levels(cpus: usize, max: Option<u32>) -> Vec<u32> {
    let top = max.unwrap_or((4 * cpus.max(1)) as u32).max(1);
    std::iter::successors(Some(1u32), |l| l.checked_mul(2))
        .take_while(|l| *l <= top)
        .collect()
}

/// `rtmgr measure cost`'s report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostReport {
    /// schema, version, command, start, host, partial (see `report::Header`).
    #[serde(flatten)]
    pub header: Header,
    pub rt_cpus: CpuSet,
    pub nrt_cpus: CpuSet,
    pub rounds_planned: u32,
    pub rounds_done: u32,
    pub configs: Vec<CostConfig>,
    /// Configurations not run, and why (e.g. preempt-full on a kernel that cannot switch).
    pub skipped: Vec<String>,
    pub micro: Vec<MicroBench>,
    pub build: Option<BuildCost>,
    pub sweep: Option<SweepCost>,
}

#[cfg(test)]
mod tests;
