//! The tail's causes over a run (ARTiS §3.1 Table 1 asks how bad the tail is;
//! this says why): every sample above a threshold attributed, then the causes
//! ranked by the total delay they added, with how many samples each touched
//! and its worst single contribution.

use super::attribute::{Attribution, Cause};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// One cause over all attributed samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CauseTotal {
    #[serde(flatten)]
    pub cause: Cause,
    /// Human label ("stress-ng-futex in futex()").
    pub label: String,
    pub total_ns: u64,
    /// Samples it took part in.
    pub samples: u64,
    pub max_ns: u64,
}

/// What explains the samples above `threshold_ns` of one run or configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TailCauses {
    pub threshold_ns: u64,
    /// How the threshold was chosen ("p99.9 of the run", "--trace=100us").
    pub threshold_from: String,
    /// Wake-ups at or above the threshold (releases they missed not counted).
    pub samples_above: u64,
    /// Of those, the ones the trace explained (the rest arrived while the
    /// tracer's queue was full, or before it knew the threshold).
    pub attributed: u64,
    /// Sum of the attributed samples' latencies.
    pub delay_ns: u64,
    /// Time no event explains and no evidence names the host's, ns
    /// (`unexplained` and `stalled` causes).
    pub unexplained_ns: u64,
    /// Time the host took on evidence (the `host` cause), ns.
    #[serde(default)]
    pub host_ns: u64,
    pub causes: Vec<CauseTotal>,
    /// The worst attributed samples, each with its breakdown.
    pub worst: Vec<Attribution>,
    /// Events the kernel dropped (buffer overrun) while tracing.
    pub events_lost: u64,
}

/// Rank the causes of `attributions` (all at or above the threshold).
pub fn summarise(
    attributions: &[Attribution],
    threshold_ns: u64,
    threshold_from: &str,
    samples_above: u64,
    events_lost: u64,
    worst_kept: usize,
) -> TailCauses {
    let mut by: BTreeMap<Cause, (u64, u64, u64)> = BTreeMap::new();
    for a in attributions {
        for (c, ns) in &a.parts {
            let e = by.entry(c.clone()).or_default();
            e.0 += ns;
            e.1 += 1;
            e.2 = e.2.max(*ns);
        }
    }
    let mut causes: Vec<CauseTotal> = by
        .into_iter()
        .map(|(cause, (total_ns, samples, max_ns))| CauseTotal {
            label: cause.to_string(),
            cause,
            total_ns,
            samples,
            max_ns,
        })
        .collect();
    causes.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.cause.cmp(&b.cause)));
    let mut worst: Vec<Attribution> = attributions.to_vec();
    worst.sort_by_key(|a| std::cmp::Reverse(a.sample.latency_ns()));
    worst.truncate(worst_kept);
    TailCauses {
        threshold_ns,
        threshold_from: threshold_from.into(),
        samples_above,
        attributed: attributions.len() as u64,
        delay_ns: attributions.iter().map(|a| a.sample.latency_ns()).sum(),
        unexplained_ns: causes
            .iter()
            .filter(|c| matches!(c.cause, Cause::Unexplained | Cause::Stalled { .. }))
            .map(|c| c.total_ns)
            .sum(),
        host_ns: causes
            .iter()
            .filter(|c| c.cause == Cause::Host)
            .map(|c| c.total_ns)
            .sum(),
        causes,
        worst,
        events_lost,
    }
}

/// The tail of one run: the wake-ups at or above `fixed` (the user's
/// threshold) or else the run's p99.9 (of `hist`, which also counts the
/// releases late wake-ups missed), explained by the attributions that reach
/// it; `wakeups` holds the wake-ups alone.
pub fn tail_of_run(
    hist: &rtmgr_core::stats::Hist,
    wakeups: &rtmgr_core::stats::Hist,
    attributions: &[Attribution],
    fixed: Option<u64>,
    events_lost: u64,
) -> TailCauses {
    let (threshold, from) = match fixed {
        Some(t) => (t, format!("--trace={:.0}us", t as f64 / 1e3)),
        None => (
            hist.percentile(999_000).unwrap_or(0).max(0) as u64,
            "p99.9 of the run".to_string(),
        ),
    };
    let above: Vec<Attribution> = attributions
        .iter()
        .filter(|a| a.sample.latency_ns() >= threshold)
        .cloned()
        .collect();
    let samples_above = wakeups
        .count_at_or_above(threshold as i64)
        .max(above.len() as u64);
    summarise(&above, threshold, &from, samples_above, events_lost, 5)
}

/// The causes as lines for the terminal: the top `n` by total delay.
pub fn causes_text(t: &TailCauses, n: usize) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "tail causes: {} of {} wake-ups ≥ {:.1} µs ({}) explained{}",
        t.attributed,
        t.samples_above,
        t.threshold_ns as f64 / 1e3,
        t.threshold_from,
        if t.events_lost > 0 {
            format!(", {} events lost by the tracer", t.events_lost)
        } else {
            String::new()
        }
    );
    let total = t.delay_ns.max(1) as f64;
    for c in t.causes.iter().take(n) {
        let _ = writeln!(
            s,
            "  {:>5.1}%  {:>9.1} µs in {:>4} samples (max {:>7.1} µs)  {}",
            100.0 * c.total_ns as f64 / total,
            c.total_ns as f64 / 1e3,
            c.samples,
            c.max_ns as f64 / 1e3,
            c.label
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trace::attribute::Sample;

    #[test]
    fn causes_are_ranked_by_total_delay() {
        let s = |lat| Sample {
            cpu: 1,
            tid: 7,
            release_ns: 0,
            wake_ns: lat,
        };
        let futex = Cause::Syscall {
            comm: "f".into(),
            syscall: "futex".into(),
        };
        let a = vec![
            Attribution {
                sample: s(100),
                parts: vec![(futex.clone(), 90), (Cause::Switch, 10)],
            },
            Attribution {
                sample: s(300),
                parts: vec![(Cause::Unexplained, 280), (Cause::Switch, 20)],
            },
        ];
        let t = summarise(&a, 50, "p99.9 of the run", 3, 0, 1);
        assert_eq!(t.causes[0].cause, Cause::Unexplained);
        assert_eq!(t.causes[1].cause, futex);
        assert_eq!(
            (
                t.causes[2].total_ns,
                t.causes[2].samples,
                t.causes[2].max_ns
            ),
            (30, 2, 20)
        );
        assert_eq!((t.attributed, t.samples_above, t.delay_ns), (2, 3, 400));
        assert_eq!(t.unexplained_ns, 280);
        assert_eq!(t.worst.len(), 1);
        assert_eq!(t.worst[0].sample.wake_ns, 300);
        let text = causes_text(&t, 2);
        assert!(
            text.contains("2 of 3 wake-ups") && text.contains("f in futex()"),
            "{text}"
        );
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<TailCauses>(&json).unwrap(), t);
    }
}
