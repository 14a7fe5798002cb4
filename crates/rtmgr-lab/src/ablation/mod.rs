//! `rtmgr evaluate --ablate`: which knob buys what. One configuration per
//! isolation step of the partition (cpusets only; + IRQ steering; + kernel
//! threads' workqueues; + each run-time knob; + the live balancer), measured
//! interleaved like evaluate (docs/architecture.md "Measuring"; McKenney §2.1: what must
//! be shut down on a real-time CPU), each tail with a 95 % confidence
//! interval, and exit-code gates for CI pipelines. Pure: steps, intervals,
//! gates, the report (`rtmgr.ablation/1`) and its table; `run` measures the
//! steps on the machine; `change` each step against the one before, with a
//! bootstrap interval over rounds (issue 28).

mod change;
pub mod run;

pub use change::{change_cell, set_changes, StepChange};

use crate::report::{render, us, CpuResult, Header};
use rtmgr_core::partition::KnobId;
use rtmgr_core::stats::{label, nearest_rank, Hist, HistData};
use rtmgr_core::CpuSet;
use serde::{Deserialize, Serialize};

pub const ABLATION_SCHEMA: &str = "rtmgr.ablation/1";

/// One configuration of the ablation: the knobs applied, and the balancer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub name: String,
    pub knobs: Vec<KnobId>,
    pub balancer: bool,
}

/// The name of the step with every knob of the plan and no balancer: the
/// one the gates check by default.
pub const FULL: &str = "full";

/// Cumulative steps over the plan's knobs (in apply order): cpusets (with the
/// tasks moved into them); + IRQs (and where new ones go); + workqueues
/// (kernel threads' unbound work); + each further knob; the last of these is
/// `full`; then `full` + the live balancer.
pub fn steps(plan: &[KnobId]) -> Vec<Step> {
    let has = |k: &KnobId| plan.contains(k);
    let groups: Vec<(String, Vec<KnobId>)> = [
        ("cpusets", vec![KnobId::Cgroups, KnobId::Tasks]),
        ("+irqs", vec![KnobId::Irqs, KnobId::Defaults]),
        ("+workqueues", vec![KnobId::Workqueues]),
    ]
    .into_iter()
    .map(|(n, ks)| (n.to_string(), ks))
    .chain(
        KnobId::ALL
            .into_iter()
            .filter(|k| {
                !matches!(
                    k,
                    KnobId::Cgroups
                        | KnobId::Tasks
                        | KnobId::Irqs
                        | KnobId::Defaults
                        | KnobId::Workqueues
                )
            })
            .map(|k| (format!("+{}", k.name()), vec![k])),
    )
    .collect();
    let mut out: Vec<Step> = Vec::new();
    let mut knobs: Vec<KnobId> = Vec::new();
    for (name, ks) in groups {
        let added: Vec<KnobId> = ks.into_iter().filter(has).collect();
        if added.is_empty() {
            continue;
        }
        knobs.extend(added);
        out.push(Step {
            name,
            knobs: knobs.clone(),
            balancer: false,
        });
    }
    if let Some(last) = out.last_mut() {
        last.name = format!("{FULL} ({})", last.name);
    }
    if !knobs.is_empty() {
        out.push(Step {
            name: "+balancer".into(),
            knobs,
            balancer: true,
        });
    }
    out
}

/// 95 % confidence interval of percentile `ppm` of the sampled distribution:
/// the bootstrap's percentile interval in its large-sample limit, read from
/// the histogram at the ranks n·p ± 1.96·√(n·p·(1−p)) (no resampling, so
/// deterministic). None when n does not support the percentile.
pub fn quantile_ci(h: &Hist, ppm: u32) -> Option<(i64, i64)> {
    let n = h.len();
    if !rtmgr_core::stats::supports(n, ppm) {
        return None;
    }
    let p = ppm as f64 / 1e6;
    let half = 1.96 * (n as f64 * p * (1.0 - p)).sqrt();
    let center = nearest_rank(n, ppm) as f64;
    let lo = ((center - half).floor() as u64).clamp(1, n);
    let hi = ((center + half).ceil() as u64).clamp(1, n);
    Some((h.value_at_rank(lo)?, h.value_at_rank(hi)?))
}

/// One configuration's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AblationConfig {
    pub name: String,
    /// The knobs applied (empty: stock, no partition).
    pub knobs: Vec<KnobId>,
    pub balancer: bool,
    pub result: CpuResult,
    pub missed: u64,
    /// 95 % intervals of p99 and p99.9, ns.
    pub p99_ci_ns: Option<(i64, i64)>,
    pub p999_ci_ns: Option<(i64, i64)>,
    /// Each round's samples (issue 28): what `change` is computed from
    /// (buckets written as one string, as evaluate's rounds).
    #[serde(
        default,
        skip_serializing_if = "Vec::is_empty",
        with = "crate::report::compact::list"
    )]
    pub rounds: Vec<HistData>,
    /// This step's p99 and p99.9 against the step before it, with 95 %
    /// intervals (paired bootstrap over rounds); None for stock and in older reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub change: Option<StepChange>,
}

/// A limit for CI pipelines: the percentile (None = max) of `config` must not exceed `limit_ns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gate {
    pub ppm: Option<u32>,
    pub limit_ns: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GateResult {
    pub what: String,
    pub config: String,
    pub limit_ns: i64,
    /// None when the run does not support the percentile (the gate fails).
    pub value_ns: Option<i64>,
    pub passed: bool,
}

/// Check each gate against the configuration whose name starts with `config`.
pub fn check_gates(configs: &[AblationConfig], gates: &[Gate], config: &str) -> Vec<GateResult> {
    let c = configs.iter().find(|c| c.name.starts_with(config));
    gates
        .iter()
        .map(|g| {
            let value = c.and_then(|c| match g.ppm {
                Some(p) => c.result.summary.get(p),
                None => c.result.summary.max_ns,
            });
            GateResult {
                what: g.ppm.map_or("max".into(), label),
                config: c.map_or(config.to_string(), |c| c.name.clone()),
                limit_ns: g.limit_ns,
                value_ns: value,
                passed: value.is_some_and(|v| v <= g.limit_ns),
            }
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AblationReport {
    /// schema, version, command, start, host, partial (see `report::Header`).
    #[serde(flatten)]
    pub header: Header,
    pub rt_cpus: CpuSet,
    pub nrt_cpus: CpuSet,
    pub load: String,
    pub interval_ns: u64,
    pub rounds_planned: u32,
    pub rounds_done: u32,
    pub segment_ns: u64,
    pub configs: Vec<AblationConfig>,
    pub gates: Vec<GateResult>,
}

fn ci_cell(ci: Option<(i64, i64)>) -> String {
    ci.map_or("-".into(), |(a, b)| {
        format!("{}–{}", us(Some(a)), us(Some(b)))
    })
}

/// One row per step: p99 and p99.9 with their intervals, max, missed.
pub fn ablation_table(configs: &[AblationConfig]) -> String {
    let mut t = vec![[
        "step",
        "n",
        "p99",
        "p99 95% CI",
        "p99.9",
        "p99.9 95% CI",
        "max",
        "missed",
        "p99 vs previous",
        "p99.9 vs previous",
    ]
    .map(String::from)
    .to_vec()];
    for c in configs {
        let s = &c.result.summary;
        t.push(vec![
            c.name.clone(),
            s.n.to_string(),
            us(s.get(990_000)),
            ci_cell(c.p99_ci_ns),
            us(s.get(999_000)),
            ci_cell(c.p999_ci_ns),
            us(s.max_ns),
            c.missed.to_string(),
            c.change
                .as_ref()
                .map_or("-".into(), |x| match (&x.p99, &x.none) {
                    (None, Some(why)) => why.clone(),
                    _ => change_cell(x.p99.as_ref(), x.p99_direction),
                }),
            c.change.as_ref().map_or("-".into(), |x| {
                change_cell(x.p99_9.as_ref(), x.p99_9_direction)
            }),
        ]);
    }
    let mut out = render(&t);
    out.push_str("(µs; steps are cumulative; the 95% CI columns: the percentile's interval within the step's samples; \"vs previous\": the ratio to the step before with its 95 % interval by the paired bootstrap over rounds — \"lower\"/\"higher\" only where it excludes 1)\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_cumulative_and_skip_knobs_not_in_the_plan() {
        let all = steps(&KnobId::all());
        let names: Vec<&str> = all.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names[0], "cpusets");
        assert_eq!(names[1], "+irqs");
        assert_eq!(names[2], "+workqueues");
        assert!(names.contains(&"+timer_migration"), "{names:?}");
        assert!(names[names.len() - 2].starts_with("full ("), "{names:?}");
        assert_eq!(names[names.len() - 1], "+balancer");
        for w in all.windows(2) {
            assert!(w[0].knobs.iter().all(|k| w[1].knobs.contains(k)));
        }
        let last = all.last().unwrap();
        assert!(last.balancer && last.knobs.len() == KnobId::all().len());
        let small = steps(&[KnobId::Cgroups, KnobId::Tasks, KnobId::Watchdog]);
        let names: Vec<&str> = small.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, vec!["cpusets", "full (+watchdog)", "+balancer"]);
        assert!(steps(&[]).is_empty());
    }

    fn uniform(n: i64) -> Hist {
        let mut h = Hist::new();
        for v in 1..=n {
            h.record(v * 1000);
        }
        h
    }

    #[test]
    fn quantile_intervals_bracket_the_percentile_and_narrow_with_n() {
        let h = uniform(10_000);
        let (lo, hi) = quantile_ci(&h, 990_000).unwrap();
        let p99 = h.percentile(990_000).unwrap();
        assert!(lo < p99 && p99 < hi, "{lo} {p99} {hi}");
        // ±1.96·√(10 000·0.99·0.01) ≈ ±19.5 ranks.
        assert!(
            h.equivalent(lo, 9_880_000) && h.equivalent(hi, 9_920_000),
            "{lo} {hi}"
        );
        let big = uniform(100_000);
        let (l2, h2) = quantile_ci(&big, 990_000).unwrap();
        assert!(((h2 - l2) as f64 / 100_000.0) < ((hi - lo) as f64 / 10_000.0));
        assert_eq!(quantile_ci(&uniform(100), 999_000), None);
    }

    fn config(name: &str, h: &Hist) -> AblationConfig {
        AblationConfig {
            name: name.into(),
            knobs: vec![],
            balancer: false,
            result: CpuResult {
                cpu: 1,
                summary: h.summary(0),
                hist: h.to_data(),
                guest_summary: None,
                host_stalled_samples: 0,
                host_stalled_ns: 0,
            },
            missed: 0,
            p99_ci_ns: quantile_ci(h, 990_000),
            p999_ci_ns: quantile_ci(h, 999_000),
            rounds: vec![],
            change: None,
        }
    }

    /// Stock, then a step whose tail is half of stock's in every round.
    #[test]
    fn a_step_that_halves_the_tail_is_lower_with_its_interval() {
        let round = |scale: i64, r: i64| {
            let mut h = Hist::new();
            for v in 1..=12_000 {
                h.record(scale * (v * 100 + r * 7_000));
            }
            h
        };
        let mk = |name: &str, scale: i64, rounds: i64| {
            let hs: Vec<Hist> = (0..rounds).map(|r| round(scale, r)).collect();
            let mut all = Hist::new();
            hs.iter().for_each(|h| all.merge(h));
            AblationConfig {
                rounds: hs.iter().map(Hist::to_data).collect(),
                ..config(name, &all)
            }
        };
        let mut configs = vec![
            mk("stock", 2, 5),
            mk("cpusets", 1, 5),
            mk("full (+irqs)", 1, 5),
        ];
        set_changes(&mut configs);
        assert!(configs[0].change.is_none());
        let c = configs[1].change.as_ref().unwrap();
        assert_eq!(c.base, "stock");
        let i = c.p99_9.unwrap();
        assert!(i.high < 1.0 && (i.estimate - 0.5).abs() < 0.01, "{i:?}");
        assert_eq!(
            c.p99_9_direction,
            Some(rtmgr_core::stats::bootstrap::Direction::Lower)
        );
        let same = configs[2].change.as_ref().unwrap();
        assert!(same.p99.unwrap().contains(1.0));
        let t = ablation_table(&configs);
        assert!(t.contains("lower") && t.contains("vs previous"), "{t}");
        let json = serde_json::to_string(&configs[1]).unwrap();
        assert!(json.contains("\"buckets\":\""), "compact buckets");
        assert_eq!(
            serde_json::from_str::<AblationConfig>(&json).unwrap(),
            configs[1]
        );
        // Too few rounds: said, not claimed.
        let mut short = vec![mk("stock", 2, 2), mk("cpusets", 1, 2)];
        set_changes(&mut short);
        let c = short[1].change.as_ref().unwrap();
        assert!(c.p99.is_none() && c.none.as_deref().unwrap().starts_with("not enough rounds"));
    }

    #[test]
    fn gates_pass_fail_and_fail_when_unsupported() {
        let h = uniform(20_000);
        let configs = vec![config("stock", &uniform(10)), config("full (+cpufreq)", &h)];
        let gates = [
            Gate {
                ppm: Some(999_000),
                limit_ns: 100_000_000,
            },
            Gate {
                ppm: Some(999_000),
                limit_ns: 1_000,
            },
            Gate {
                ppm: None,
                limit_ns: 20_000_000,
            },
        ];
        let r = check_gates(&configs, &gates, FULL);
        assert_eq!(
            r.iter().map(|g| g.passed).collect::<Vec<_>>(),
            vec![true, false, true]
        );
        assert_eq!(r[0].config, "full (+cpufreq)");
        assert_eq!(r[0].what, "p99.9");
        let r = check_gates(&configs, &gates[..1], "stock");
        assert!(!r[0].passed && r[0].value_ns.is_none());
        let t = ablation_table(&configs);
        assert!(t.contains("full (+cpufreq)") && t.contains("–"), "{t}");
    }
}
