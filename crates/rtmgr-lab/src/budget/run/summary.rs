//! From per-period records to the figures of budget-based RTAI §4.2: budget
//! rate (received / assigned budget) per period, violations beyond the
//! tolerance, enforcement cost per expiration; group members summed per period (§5).

use super::taskset::{ns, spec, TaskSpec};
use super::Mode;
use crate::budget::BudgetTaskResult;
use rtmgr_rt::periodic::{PeriodRecord, TaskStats};

/// Periods dropped at the start of each round (learning / start-up).
pub const WARMUP: usize = 5;

/// One task's raw results, possibly merged over several rounds.
#[derive(Debug, Default)]
pub struct Raw {
    /// Records after each round's warm-up.
    pub records: Vec<PeriodRecord>,
    pub warmup: usize,
    pub stats: TaskStats,
    pub cpu: Option<u32>,
}

impl Raw {
    pub fn merge(&mut self, b: Raw) {
        self.records.extend(b.records);
        self.warmup += b.warmup;
        self.cpu = b.cpu;
        let (x, y) = (&mut self.stats, b.stats);
        x.periods += y.periods;
        x.exhaustions += y.exhaustions;
        x.ignored_waits += y.ignored_waits;
        x.missed += y.missed;
        x.if_wait = y.if_wait;
        x.if_wait_saturated += y.if_wait_saturated;
        x.kernel_overruns += y.kernel_overruns;
        x.expirations += y.expirations;
        x.handler_cpu_sum += y.handler_cpu_sum;
        x.handler_cpu_max = x.handler_cpu_max.max(y.handler_cpu_max);
        x.spin_cpu_sum += y.spin_cpu_sum;
        x.signal_late_sum += y.signal_late_sum;
        x.signal_late_max = x.signal_late_max.max(y.signal_late_max);
        x.margin = y.margin;
    }
}

/// Allowed deviation of the budget rate (issue goals): ±2 % for W ≥ 1 ms,
/// ±10 % below.
pub fn tolerance_pct(budget_ns: u64) -> f64 {
    if budget_ns >= 1_000_000 {
        2.0
    } else {
        10.0
    }
}

pub fn summarise(t: &TaskSpec, raw: &Raw) -> BudgetTaskResult {
    let (s, cpu) = (&raw.stats, raw.cpu);
    let w = ns(t.budget_ms);
    let tol = tolerance_pct(w);
    let used: Vec<&PeriodRecord> = raw.records.iter().collect();
    let rates: Vec<f64> = used
        .iter()
        .map(|r| r.received_ns as f64 * 100.0 / w as f64)
        .collect();
    let unbounded = t.kind == "compute" && t.job_ms.is_none();
    let violations = used
        .iter()
        .zip(&rates)
        .filter(|(r, &rate)| {
            if unbounded || r.exhausted {
                (rate - 100.0).abs() > tol
            } else {
                rate > 100.0 + tol
            }
        })
        .count();
    let over_budget = rates.iter().filter(|&&r| r > 100.0 + tol).count();
    let n = rates.len().max(1) as f64;
    let lats: Vec<u64> = used.iter().filter_map(|r| r.latency_ns).collect();
    let exp = s.expirations.max(1) as f64;
    BudgetTaskResult {
        name: t.name.clone(),
        kind: t.kind.clone(),
        period_ns: ns(t.period_ms),
        budget_ns: w,
        cpu,
        periods: rates.len(),
        warmup: raw.warmup,
        tolerance_pct: tol,
        within_tolerance_pct: 100.0 * (rates.len() - violations) as f64 / n,
        violations,
        over_budget,
        under_budget: violations - over_budget,
        rate_min_pct: rates.iter().copied().fold(f64::INFINITY, f64::min).min(1e9),
        rate_mean_pct: rates.iter().sum::<f64>() / n,
        rate_max_pct: rates.iter().copied().fold(0.0, f64::max),
        exhaustions: s.exhaustions,
        ignored_waits: s.ignored_waits,
        missed: s.missed,
        kernel_overruns: s.kernel_overruns,
        expirations: s.expirations,
        handler_cpu_avg_ns: s.handler_cpu_sum as f64 / exp,
        handler_cpu_max_ns: s.handler_cpu_max,
        signal_late_avg_ns: s.signal_late_sum as f64 / exp,
        signal_late_max_ns: s.signal_late_max,
        overhead_per_period_ns: s.handler_cpu_sum as f64 / s.periods.max(1) as f64,
        release_latency_avg_ns: lats.iter().sum::<u64>() as f64 / lats.len().max(1) as f64,
        release_latency_max_ns: lats.iter().copied().max().unwrap_or(0),
        rates: rates.into_iter().take(500).collect(),
    }
}

/// Group mode: the members' records summed per period into one "group" record
/// (the members share the group's windows).
pub fn group_members_to_one(raws: &mut Vec<Raw>) {
    let mut by_index: std::collections::BTreeMap<u64, PeriodRecord> = Default::default();
    let mut all = Raw::default();
    for r in raws.drain(..) {
        for rec in &r.records {
            let e = by_index.entry(rec.index).or_insert(PeriodRecord {
                latency_ns: None,
                received_ns: 0,
                ..*rec
            });
            e.received_ns += rec.received_ns;
            e.exhausted |= rec.exhausted;
        }
        let warmup = r.warmup;
        all.merge(Raw {
            records: vec![],
            ..r
        });
        all.warmup = warmup;
    }
    all.cpu = None;
    all.records = by_index.into_values().collect();
    raws.push(all);
}

/// The task list to report: the set, or one "group" task in group mode.
pub fn group_spec(set: &[TaskSpec], mode: Mode) -> Vec<TaskSpec> {
    match mode {
        Mode::Group => vec![spec(
            "group",
            set[0].period_ms,
            set[0].budget_ms,
            "compute",
            None,
        )],
        _ => set.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::budget::budget_rates_svg;
    use crate::budget::BudgetRun;

    #[test]
    fn group_records_are_summed_per_period() {
        let rec = |index, received_ns, exhausted| PeriodRecord {
            index,
            budget_ns: 1_000_000,
            received_ns,
            exhausted,
            ..Default::default()
        };
        let a = Raw {
            records: vec![rec(5, 400_000, false), rec(6, 700_000, true)],
            warmup: 5,
            ..Default::default()
        };
        let b = Raw {
            records: vec![rec(5, 600_000, true), rec(7, 1_000_000, true)],
            warmup: 5,
            ..Default::default()
        };
        let mut v = vec![a, b];
        group_members_to_one(&mut v);
        assert_eq!(v.len(), 1);
        let got: Vec<(u64, u64, bool)> = v[0]
            .records
            .iter()
            .map(|r| (r.index, r.received_ns, r.exhausted))
            .collect();
        assert_eq!(
            got,
            vec![
                (5, 1_000_000, true),
                (6, 700_000, true),
                (7, 1_000_000, true)
            ]
        );
        assert_eq!(v[0].warmup, 5);
    }

    #[test]
    fn summary_counts_violations() {
        let t = spec("t", 4.0, 1.0, "compute", None);
        let recs: Vec<PeriodRecord> = (0..100u64)
            .map(|i| PeriodRecord {
                index: i,
                budget_ns: 1_000_000,
                received_ns: if i == 50 { 1_100_000 } else { 1_005_000 },
                exhausted: true,
                ..Default::default()
            })
            .collect();
        let mut raw = Raw::default();
        raw.merge(Raw {
            records: recs,
            warmup: 5,
            ..Default::default()
        });
        let r = summarise(&t, &raw);
        assert_eq!(r.warmup, 5);
        assert_eq!(r.periods, 100);
        assert_eq!(r.violations, 1);
        assert!((r.within_tolerance_pct - 99.0).abs() < 1e-9);
        assert!(budget_rates_svg(&[&BudgetRun {
            experiment: "precision".into(),
            mode: "soft".into(),
            duration_ms: 1,
            tasks: vec![r],
            errors: vec![],
        }])
        .contains("polyline"));
    }
}
