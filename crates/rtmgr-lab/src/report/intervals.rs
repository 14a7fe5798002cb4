//! evaluate's comparisons with their uncertainty (issue 28; docs/evaluate.md
//! "Intervals"; McKenney "Real Time vs Real Fast" §3, ARTiS §3.1 Table 1):
//! the per-round figures kept in the report, each compared pair's ratios with
//! a 95 % interval from the paired bootstrap over rounds
//! (`rtmgr_core::stats::bootstrap`), the A/A control (the shield against its
//! twin) as this run's noise floor, and verdicts only beyond it.

use super::text::{ratio_text, render};
use super::{config_name, ConfigResult, EvaluateRun};
use crate::load::ComponentMetrics;
use rtmgr_core::stats::bootstrap::{
    direction, ratio_interval, weighted_mean, weighted_sum, Direction, Floor, Interval, NoInterval,
    Replicates, Resampling, RoundBuckets, RoundHists, LEVEL, RESAMPLES, SEED,
};
use rtmgr_core::stats::{Hist, HistData};
use serde::{Deserialize, Serialize};

/// The A/A control: this configuration measured a second time in every round.
pub const CONTROL_OF: &str = "shield";
/// The twin's name in the report.
pub const CONTROL: &str = "shield-twin";

/// The pairs evaluate compares (configuration, base), after the control.
pub const PAIRS: [(&str, &str); 4] = [
    ("shield", "stock"),
    ("idle-guests", "stock"),
    ("balanced", "stock"),
    ("balanced", "shield"),
];

/// One configuration's figures in one round (one segment).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundFigures {
    /// The round, from 1.
    pub round: u32,
    pub n: u64,
    /// Nearest-rank values of this round's samples (indicative: a round of
    /// 4 000 samples rests its p99.9 on 4 of them; the intervals use `hist`).
    pub p99_ns: Option<i64>,
    pub p99_9_ns: Option<i64>,
    pub max_ns: Option<i64>,
    pub missed: u64,
    /// The same without the samples the host stalled (`CpuResult::guest_summary`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_p99_ns: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_p99_9_ns: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_max_ns: Option<i64>,
    #[serde(default)]
    pub guest_missed: u64,
    /// Ops/s per load component in this segment (empty for idle).
    pub throughput: Vec<ComponentMetrics>,
    /// This round's samples: the tail intervals merge resampled rounds'
    /// histograms. Written compactly (`super::compact`): a round's histogram
    /// has a thousand buckets or more.
    #[serde(with = "super::compact::hist")]
    pub hist: HistData,
    /// The guest's samples when they differ from `hist` (absent: the same,
    /// or not labelled — then `guest_max_ns` is absent too).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        with = "super::compact::opt"
    )]
    pub guest_hist: Option<HistData>,
}

impl RoundFigures {
    /// From one segment's histograms (all samples; the guest's, with its missed periods).
    pub fn of(
        round: u32,
        all: &Hist,
        missed: u64,
        guest: Option<(&Hist, u64)>,
        throughput: Vec<ComponentMetrics>,
    ) -> RoundFigures {
        let pick = |h: &Hist, ppm| h.percentile(ppm);
        RoundFigures {
            round,
            n: all.len(),
            p99_ns: pick(all, 990_000),
            p99_9_ns: pick(all, 999_000),
            max_ns: all.max(),
            missed,
            guest_p99_ns: guest.and_then(|(g, _)| pick(g, 990_000)),
            guest_p99_9_ns: guest.and_then(|(g, _)| pick(g, 999_000)),
            guest_max_ns: guest.and_then(|(g, _)| g.max()),
            guest_missed: guest.map_or(0, |(_, m)| m),
            throughput,
            hist: all.to_data(),
            // Most rounds have no host-labelled sample: the same histogram, kept once.
            guest_hist: guest
                .map(|(g, _)| g.to_data())
                .filter(|g| *g != all.to_data()),
        }
    }
}

/// What a comparison is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    P99,
    #[serde(rename = "p99_9")]
    P999,
    Max,
    Missed,
    Throughput,
    GuestP99,
    #[serde(rename = "guest_p99_9")]
    GuestP999,
    GuestMax,
}

pub const METRICS: [Metric; 8] = [
    Metric::P99,
    Metric::P999,
    Metric::Max,
    Metric::Missed,
    Metric::Throughput,
    Metric::GuestP99,
    Metric::GuestP999,
    Metric::GuestMax,
];

impl Metric {
    pub fn label(self) -> &'static str {
        match self {
            Metric::P99 => "p99",
            Metric::P999 => "p99.9",
            Metric::Max => "max",
            Metric::Missed => "missed periods",
            Metric::Throughput => "throughput",
            Metric::GuestP99 => "guest p99",
            Metric::GuestP999 => "guest p99.9",
            Metric::GuestMax => "guest max",
        }
    }
}

/// One metric of one comparison: the ratio config/base with its interval and
/// what it says, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricInterval {
    pub metric: Metric,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<Interval>,
    /// Set when the interval is: lower, higher or no_difference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    /// Why there is no interval ("not enough rounds …", "undefined …").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub none: Option<String>,
}

/// A configuration against a base, every metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Comparison {
    pub config: String,
    pub base: String,
    pub metrics: Vec<MetricInterval>,
}

impl Comparison {
    pub fn get(&self, m: Metric) -> Option<&MetricInterval> {
        self.metrics.iter().find(|x| x.metric == m)
    }
}

/// Every comparison of a run with its interval, and how they were made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Intervals {
    /// "paired bootstrap over rounds, percentile interval".
    pub method: String,
    pub level: f64,
    pub resamples: usize,
    pub seed: u64,
    /// Rounds every configuration completed: the units resampled.
    pub rounds: usize,
    /// The A/A control (`shield-twin` against `shield`); None with `--no-control`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<Comparison>,
    pub comparisons: Vec<Comparison>,
}

/// Per resample, one configuration's value of every metric (METRICS order;
/// throughput as per-component means, compared by geometric mean).
struct Figures {
    latency: Replicates<Vec<Option<f64>>>,
    missed: Replicates<Option<f64>>,
    throughput: Replicates<Vec<(String, Option<f64>)>>,
}

const PPMS: [u32; 2] = [990_000, 999_000];

fn figures(c: &ConfigResult, r: &Resampling) -> Figures {
    let rounds = &c.rounds[..r.rounds()];
    let hists = |guest: bool| {
        let data: Vec<RoundBuckets<'_>> = rounds
            .iter()
            .map(|x| {
                let h = if guest {
                    x.guest_hist.as_ref().unwrap_or(&x.hist)
                } else {
                    &x.hist
                };
                (h.buckets.as_slice(), h.max_ns)
            })
            .collect();
        RoundHists::new(&data)
    };
    let (all, guest) = (hists(false), hists(true));
    // Labelled rounds have guest figures (their histogram only when it differs).
    let has_guest = rounds.iter().all(|x| x.guest_max_ns.is_some() || x.n == 0);
    let latency = r.replicate(|w| {
        let mut v = all.quantiles(&PPMS, w);
        let g = guest.quantiles(&PPMS, w);
        v.extend(g.into_iter().map(|x| x.filter(|_| has_guest)));
        v
    });
    let missed: Vec<f64> = rounds.iter().map(|x| x.missed as f64).collect();
    let mut components: Vec<String> = rounds
        .iter()
        .flat_map(|x| x.throughput.iter().map(|m| m.component.clone()))
        .collect();
    components.sort();
    components.dedup();
    let per_component: Vec<(String, Vec<Option<f64>>)> = components
        .into_iter()
        .map(|name| {
            let v = rounds
                .iter()
                .map(|x| {
                    x.throughput
                        .iter()
                        .find(|m| m.component == name)
                        .map(|m| m.ops_per_s)
                })
                .collect();
            (name, v)
        })
        .collect();
    Figures {
        latency,
        missed: r.replicate(|w| Some(weighted_sum(&missed, w))),
        throughput: r.replicate(|w| {
            per_component
                .iter()
                .map(|(n, v)| (n.clone(), weighted_mean(v, w)))
                .collect()
        }),
    }
}

/// Geometric mean over shared components of a/b (as `load::relative_throughput`).
fn geo_ratio(a: &[(String, Option<f64>)], b: &[(String, Option<f64>)]) -> Option<f64> {
    let (mut s, mut k) = (0.0, 0);
    for (n, x) in a {
        if let (Some(x), Some(Some(y))) = (x, b.iter().find(|(m, _)| m == n).map(|(_, y)| *y)) {
            if *x > 0.0 && y > 0.0 {
                s += (x / y).ln();
                k += 1;
            }
        }
    }
    (k > 0).then(|| (s / k as f64).exp())
}

/// The interval of one metric of `a` against `b` (paired replicates).
fn metric_interval(m: Metric, a: &Figures, b: &Figures) -> Result<Interval, NoInterval> {
    let col = |f: &Figures, i: usize| Replicates {
        estimate: f.latency.estimate[i],
        draws: f.latency.draws.iter().map(|d| d[i]).collect(),
    };
    // Latency columns: p99, p99.9, max, guest p99, guest p99.9, guest max.
    let lat = |i: usize| ratio_interval(&col(a, i), &col(b, i));
    match m {
        Metric::P99 => lat(0),
        Metric::P999 => lat(1),
        Metric::Max => lat(2),
        Metric::GuestP99 => lat(3),
        Metric::GuestP999 => lat(4),
        Metric::GuestMax => lat(5),
        Metric::Missed => ratio_interval(&a.missed, &b.missed),
        Metric::Throughput => {
            let ratios = Replicates {
                estimate: geo_ratio(&a.throughput.estimate, &b.throughput.estimate),
                draws: a
                    .throughput
                    .draws
                    .iter()
                    .zip(&b.throughput.draws)
                    .map(|(x, y)| geo_ratio(x, y))
                    .collect(),
            };
            let ones = Replicates {
                estimate: Some(1.0),
                draws: vec![Some(1.0); ratios.draws.len()],
            };
            ratio_interval(&ratios, &ones)
        }
    }
}

fn compare(
    config: &str,
    base: &str,
    a: &Figures,
    b: &Figures,
    floor: &dyn Fn(Metric) -> Option<Floor>,
) -> Comparison {
    let metrics = METRICS
        .iter()
        .map(|&m| match metric_interval(m, a, b) {
            Ok(i) => MetricInterval {
                metric: m,
                interval: Some(i),
                direction: Some(direction(&i, floor(m).as_ref())),
                none: None,
            },
            Err(e) => MetricInterval {
                metric: m,
                interval: None,
                direction: None,
                none: Some(e.to_string()),
            },
        })
        .collect();
    Comparison {
        config: config.into(),
        base: base.into(),
        metrics,
    }
}

/// The run's comparisons with intervals, from the configurations' per-round
/// figures; None when the report has none (reports before issue 28).
pub fn evaluate_intervals(e: &EvaluateRun) -> Option<Intervals> {
    let find = |n: &str| e.configs.iter().find(|c| config_name(&c.name) == n);
    let rounds = e.configs.iter().map(|c| c.rounds.len()).min()?;
    if e.configs.iter().all(|c| c.rounds.is_empty()) {
        return None;
    }
    let method = "paired bootstrap over rounds, percentile interval".to_string();
    let mut out = Intervals {
        method,
        level: LEVEL,
        resamples: RESAMPLES,
        seed: SEED,
        rounds,
        control: None,
        comparisons: Vec::new(),
    };
    let r = match Resampling::standard(rounds) {
        Ok(r) => r,
        Err(why) => {
            // Every pair, every metric: no interval, and why.
            let none = |c: &str, b: &str| Comparison {
                config: c.into(),
                base: b.into(),
                metrics: METRICS
                    .iter()
                    .map(|&m| MetricInterval {
                        metric: m,
                        interval: None,
                        direction: None,
                        none: Some(why.to_string()),
                    })
                    .collect(),
            };
            out.control = find(CONTROL).map(|_| none(CONTROL, CONTROL_OF));
            out.comparisons = pairs(e).map(|(c, b)| none(c, b)).collect();
            return Some(out);
        }
    };
    let figs: Vec<(&str, Figures)> = e
        .configs
        .iter()
        .map(|c| (config_name(&c.name), figures(c, &r)))
        .collect();
    let of = |n: &str| figs.iter().find(|(x, _)| *x == n).map(|(_, f)| f);
    let no_floor = |_: Metric| None;
    if let (Some(t), Some(s)) = (of(CONTROL), of(CONTROL_OF)) {
        out.control = Some(compare(CONTROL, CONTROL_OF, t, s, &no_floor));
    }
    let control = out.control.clone();
    let floor = move |m: Metric| {
        let c = control.as_ref()?.get(m)?;
        c.interval.as_ref().map(Floor::of)
    };
    for (c, b) in pairs(e) {
        if let (Some(x), Some(y)) = (of(c), of(b)) {
            out.comparisons.push(compare(c, b, x, y, &floor));
        }
    }
    Some(out)
}

/// The compared pairs this run has both configurations of.
fn pairs(e: &EvaluateRun) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
    let has = |n: &str| e.configs.iter().any(|c| config_name(&c.name) == n);
    PAIRS.into_iter().filter(move |(c, b)| has(c) && has(b))
}

/// "1.29x [0.41, 4.1]", or why there is no interval.
pub fn interval_text(m: &MetricInterval) -> String {
    match &m.interval {
        Some(i) => format!(
            "{}x [{}, {}]",
            ratio_text(i.estimate),
            ratio_text(i.low),
            ratio_text(i.high)
        ),
        None => m.none.clone().unwrap_or_else(|| "-".into()),
    }
}

/// "p99.9 1.29x [0.41, 4.1] — no difference at this machine's noise".
pub fn metric_verdict(m: &MetricInterval) -> String {
    match (&m.interval, m.direction) {
        (Some(_), Some(d)) => format!("{} {} — {}", m.metric.label(), interval_text(m), d.words()),
        _ => format!("{}: {}", m.metric.label(), interval_text(m)),
    }
}

/// The metrics a verdict line names (the table has them all).
pub const HEADLINE: [Metric; 4] = [Metric::P99, Metric::P999, Metric::Max, Metric::Throughput];

/// The verdict lines: the control first (this run's noise floor), then each
/// pair's headline metrics that have an interval, with its direction.
pub fn interval_verdicts(iv: &Intervals) -> Vec<String> {
    let mut v = Vec::new();
    match &iv.control {
        Some(c) => {
            let parts: Vec<String> = HEADLINE
                .iter()
                .filter_map(|m| c.get(*m))
                .filter(|m| m.interval.is_some())
                .map(|m| format!("{} {}", m.metric.label(), interval_text(m)))
                .collect();
            let parts = if parts.is_empty() {
                c.metrics.first().map(interval_text).unwrap_or_default()
            } else {
                parts.join("; ")
            };
            v.push(format!(
                "A/A control ({} vs {}, the same configuration twice: this run's noise floor): {parts}",
                c.config, c.base
            ));
        }
        None => v.push(
            "no A/A control (--no-control): the verdicts below test against 1 only, not against this machine's noise floor"
                .into(),
        ),
    }
    for c in &iv.comparisons {
        let ms: Vec<&MetricInterval> = HEADLINE.iter().filter_map(|m| c.get(*m)).collect();
        let with: Vec<String> = ms
            .iter()
            .filter(|m| m.interval.is_some())
            .map(|m| metric_verdict(m))
            .collect();
        let text = if with.is_empty() {
            ms.first().map(|m| interval_text(m)).unwrap_or_default()
        } else {
            with.join("; ")
        };
        v.push(format!("{} vs {}: {text}", c.config, c.base));
    }
    v
}

/// Every comparison and metric as a table: metrics down, pairs across; a
/// cell the verdict rule calls a difference ends in "lower" or "higher".
pub fn intervals_table(iv: &Intervals) -> String {
    let cols: Vec<&Comparison> = iv.control.iter().chain(&iv.comparisons).collect();
    let mut t = vec![std::iter::once("ratio [95 % interval]".to_string())
        .chain(cols.iter().map(|c| format!("{}/{}", c.config, c.base)))
        .collect::<Vec<_>>()];
    for m in METRICS {
        let mut row = vec![m.label().to_string()];
        for c in &cols {
            row.push(match c.get(m) {
                Some(x) if x.interval.is_some() => {
                    let mark = match x.direction {
                        Some(Direction::Lower) => " lower",
                        Some(Direction::Higher) => " higher",
                        _ => "",
                    };
                    format!("{}{mark}", interval_text(x))
                }
                Some(_) => "-".into(),
                None => "-".into(),
            });
        }
        t.push(row);
    }
    let mut out = render(&t);
    out.push_str(&format!(
        "({} rounds resampled {} times, paired, seed {:#x}; tails from the resampled rounds' merged histograms; a difference is claimed only where the whole interval lies beyond 1 and beyond the A/A control's band{})\n",
        iv.rounds,
        iv.resamples,
        iv.seed,
        if iv.control.is_none() { " — no control in this run" } else { "" }
    ));
    out
}

#[cfg(test)]
mod tests;
