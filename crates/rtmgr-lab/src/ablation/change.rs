//! What each ablation step changed (issue 28; docs/evaluate.md "Which knob
//! buys what"; McKenney "Real Time vs Real Fast" §2.1): every step's p99 and
//! p99.9 against the step before it, as a ratio with a 95 % interval by the
//! paired bootstrap over rounds (`rtmgr_core::stats::bootstrap`, the tails
//! from the resampled rounds' merged histograms, as in evaluate).

use super::AblationConfig;
use rtmgr_core::stats::bootstrap::{
    direction, ratio_interval, Direction, Interval, Replicates, Resampling, RoundBuckets,
    RoundHists,
};
use serde::{Deserialize, Serialize};

/// A step's tail against the step before it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepChange {
    /// The step before (stock for the first).
    pub base: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99: Option<Interval>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_direction: Option<Direction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_9: Option<Interval>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub p99_9_direction: Option<Direction>,
    /// Why an interval is missing ("not enough rounds …", "undefined …").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub none: Option<String>,
}

const PPMS: [u32; 2] = [990_000, 999_000];

/// Fill every step's `change` against the one before it, from the steps'
/// per-round histograms (the rounds every step completed).
pub fn set_changes(configs: &mut [AblationConfig]) {
    let rounds = configs.iter().map(|c| c.rounds.len()).min().unwrap_or(0);
    let r = Resampling::standard(rounds);
    let reps: Vec<Option<Replicates<Vec<Option<f64>>>>> = configs
        .iter()
        .map(|c| {
            let r = r.as_ref().ok()?;
            let data: Vec<RoundBuckets<'_>> = c.rounds[..rounds]
                .iter()
                .map(|h| (h.buckets.as_slice(), h.max_ns))
                .collect();
            let h = RoundHists::new(&data);
            Some(r.replicate(|w| h.quantiles(&PPMS, w)))
        })
        .collect();
    for i in 1..configs.len() {
        let base = configs[i - 1].name.clone();
        let mut change = StepChange {
            base,
            p99: None,
            p99_direction: None,
            p99_9: None,
            p99_9_direction: None,
            none: None,
        };
        match (&r, &reps[i], &reps[i - 1]) {
            (Err(e), _, _) => change.none = Some(e.to_string()),
            (Ok(_), Some(a), Some(b)) => {
                let col = |x: &Replicates<Vec<Option<f64>>>, k: usize| Replicates {
                    estimate: x.estimate[k],
                    draws: x.draws.iter().map(|d| d[k]).collect(),
                };
                let mut why = None;
                let mut at = |k: usize| match ratio_interval(&col(a, k), &col(b, k)) {
                    Ok(i) => (Some(i), Some(direction(&i, None))),
                    Err(e) => {
                        why.get_or_insert_with(|| e.to_string());
                        (None, None)
                    }
                };
                (change.p99, change.p99_direction) = at(0);
                (change.p99_9, change.p99_9_direction) = at(1);
                change.none = why;
            }
            _ => {}
        }
        configs[i].change = Some(change);
    }
}

/// "0.52x [0.31, 0.80] lower", or "-".
pub fn change_cell(i: Option<&Interval>, d: Option<Direction>) -> String {
    let Some(i) = i else { return "-".into() };
    let t = crate::report::ratio_text;
    let mark = match d {
        Some(Direction::Lower) => " lower",
        Some(Direction::Higher) => " higher",
        _ => "",
    };
    format!("{}x [{}, {}]{mark}", t(i.estimate), t(i.low), t(i.high))
}
