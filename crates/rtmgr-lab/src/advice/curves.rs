//! McKenney §3 Figs. 5–7 from measured data: total delay against work-unit
//! duration (1 µs to 100 ms) per configuration, for user-mode compute (the
//! build's user-time slowdown), a build (its wall-clock slowdown) and kernel
//! services / I/O (the micro-benchmarks' geometric mean), with the crossover
//! durations. Schema `rtmgr.delay/1` (docs/report-schema.md).

use super::delay::{crossover_ns, mckenney_grid, DelayModel};
use super::facts::{CostFact, TailFact};
use serde::{Deserialize, Serialize};

pub const DELAY_SCHEMA: &str = "rtmgr.delay/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DelayCurves {
    pub schema: String,
    /// The latency percentile, e.g. "p99.9".
    pub percentile: String,
    pub tail_source: String,
    pub cost_source: String,
    pub kinds: Vec<KindCurves>,
}

/// One kind of work (one of McKenney's figures).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KindCurves {
    /// "user", "build" or "kernel".
    pub kind: String,
    pub what: String,
    pub curves: Vec<Curve>,
    pub crossovers: Vec<Crossover>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Curve {
    pub config: String,
    pub model: DelayModel,
    /// (work ns, total delay ns).
    pub points: Vec<(f64, f64)>,
}

/// Where two configurations' curves cross.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Crossover {
    /// Finishes first below `work_ns` (the lower latency).
    pub below: String,
    /// Finishes first above it (the lower slowdown).
    pub above: String,
    pub work_ns: f64,
}

const KINDS: [(&str, &str); 3] = [
    (
        "user",
        "user-mode compute (slowdown: the build's user CPU time)",
    ),
    ("build", "a build (slowdown: the build's wall-clock time)"),
    (
        "kernel",
        "kernel services and I/O (slowdown: geometric mean of the micro-benchmarks)",
    ),
];

fn slowdown(cost: &CostFact, config: &str, kind: &str) -> Option<f64> {
    let c = cost.get(config)?;
    match kind {
        "user" => c.user_slowdown,
        "build" => c.build_slowdown,
        _ => c.kernel_slowdown,
    }
}

/// The curves of every configuration that has both a tail and a slowdown.
pub fn delay_curves(tail: &TailFact, cost: &CostFact) -> DelayCurves {
    let grid = mckenney_grid();
    let kinds = KINDS
        .iter()
        .map(|(kind, what)| {
            let curves: Vec<Curve> = tail
                .latency_ns
                .iter()
                .filter_map(|(config, lat)| {
                    let model = DelayModel {
                        latency_ns: *lat as f64,
                        slowdown: slowdown(cost, config, kind)?,
                    };
                    Some(Curve {
                        config: config.clone(),
                        model,
                        points: grid.iter().map(|w| (*w, model.total_ns(*w))).collect(),
                    })
                })
                .collect();
            let mut crossovers = Vec::new();
            for (i, a) in curves.iter().enumerate() {
                for b in &curves[i + 1..] {
                    if let Some(w) = crossover_ns(&a.model, &b.model) {
                        let (below, above) = if a.model.latency_ns < b.model.latency_ns {
                            (a, b)
                        } else {
                            (b, a)
                        };
                        crossovers.push(Crossover {
                            below: below.config.clone(),
                            above: above.config.clone(),
                            work_ns: w,
                        });
                    }
                }
            }
            KindCurves {
                kind: kind.to_string(),
                what: what.to_string(),
                curves,
                crossovers,
            }
        })
        .collect();
    DelayCurves {
        schema: DELAY_SCHEMA.into(),
        percentile: tail.percentile.clone(),
        tail_source: tail.source.clone(),
        cost_source: cost.source.clone(),
        kinds,
    }
}

/// The crossovers as lines of text.
pub fn crossovers_text(d: &DelayCurves) -> String {
    let mut s = String::new();
    for k in &d.kinds {
        if k.crossovers.is_empty() {
            s.push_str(&format!(
                "{}: no crossover among {} curves\n",
                k.kind,
                k.curves.len()
            ));
        }
        for c in &k.crossovers {
            s.push_str(&format!(
                "{}: {} finishes first below {:.1} µs of work, {} above (total delay at {})\n",
                k.kind,
                c.below,
                c.work_ns / 1e3,
                c.above,
                d.percentile
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advice::ConfigCost;

    #[test]
    fn curves_and_crossovers_from_measured_figures() {
        let tail = TailFact {
            source: "ev.json".into(),
            percentile: "p99.9".into(),
            latency_ns: vec![
                ("stock".into(), 1_000_000),
                ("shield".into(), 100_000),
                ("idle".into(), 5),
            ],
        };
        let cfg = |name: &str, s: f64| ConfigCost {
            config: name.into(),
            user_slowdown: Some(s),
            kernel_slowdown: Some(s * 2.0),
            build_slowdown: None,
            throughput: None,
        };
        let cost = CostFact {
            source: "cost.json".into(),
            configs: vec![cfg("stock", 1.0), cfg("shield", 1.5)],
        };
        let d = delay_curves(&tail, &cost);
        assert_eq!(d.kinds.len(), 3);
        let user = &d.kinds[0];
        // idle has no slowdown measured: no curve.
        assert_eq!(user.curves.len(), 2);
        assert_eq!(user.curves[0].points.len(), 51);
        // 900 µs of latency gained, 0.5 ns lost per ns of work: 1.8 ms.
        assert_eq!(user.crossovers.len(), 1);
        let c = &user.crossovers[0];
        assert_eq!((c.below.as_str(), c.above.as_str()), ("shield", "stock"));
        assert!((c.work_ns - 1_800_000.0).abs() < 1e-6);
        // Kernel: stock 2x, shield 3x → 900 µs / 1 = 900 µs.
        assert!((d.kinds[2].crossovers[0].work_ns - 900_000.0).abs() < 1e-6);
        // No build slowdown measured: no curves, said so.
        assert!(d.kinds[1].curves.is_empty());
        let t = crossovers_text(&d);
        assert!(
            t.contains("user: shield finishes first below 1800.0 µs"),
            "{t}"
        );
        assert!(t.contains("build: no crossover"), "{t}");
    }
}
