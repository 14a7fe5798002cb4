//! McKenney §3 Figs. 5–7: the total delay of a work item = scheduling latency
//! (a percentile of the measured distribution) + its duration × the measured
//! slowdown of that kind of work, per configuration; and the crossover, the
//! work duration above which the faster-but-later configuration finishes
//! first. Pure arithmetic on measured figures.

use serde::{Deserialize, Serialize};

/// One configuration's measured figures for one kind of work.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct DelayModel {
    /// Scheduling latency at the chosen percentile, ns.
    pub latency_ns: f64,
    /// Work runs this many times slower than on stock (1 = as fast).
    pub slowdown: f64,
}

impl DelayModel {
    /// Latency + work × slowdown, ns.
    pub fn total_ns(&self, work_ns: f64) -> f64 {
        self.latency_ns + work_ns * self.slowdown
    }
}

/// The work duration at which `a` and `b` finish at the same time, if they
/// cross at a positive duration: below it the one with the lower latency
/// finishes first, above it the one with the lower slowdown.
pub fn crossover_ns(a: &DelayModel, b: &DelayModel) -> Option<f64> {
    let dl = b.latency_ns - a.latency_ns;
    let ds = a.slowdown - b.slowdown;
    if ds == 0.0 || !dl.is_finite() || !ds.is_finite() {
        return None;
    }
    let w = dl / ds;
    (w > 0.0).then_some(w)
}

/// Work durations from `lo` to `hi` ns, `per_decade` points per decade (log spaced).
pub fn log_grid(lo: f64, hi: f64, per_decade: u32) -> Vec<f64> {
    if !(lo > 0.0 && hi >= lo) || per_decade == 0 {
        return Vec::new();
    }
    let steps = ((hi / lo).log10() * per_decade as f64).round() as u32;
    (0..=steps)
        .map(|i| lo * 10f64.powf(i as f64 / per_decade as f64))
        .collect()
}

/// McKenney's range: 1 µs to 100 ms, 10 points per decade.
pub fn mckenney_grid() -> Vec<f64> {
    log_grid(1e3, 1e8, 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn total_delay_and_crossover() {
        let stock = DelayModel {
            latency_ns: 1_000_000.0,
            slowdown: 1.0,
        };
        let rt = DelayModel {
            latency_ns: 50_000.0,
            slowdown: 1.5,
        };
        assert_eq!(rt.total_ns(100_000.0), 200_000.0);
        // 1 ms − 50 µs = 950 µs gained in latency, lost at 0.5 ns per ns of work.
        let w = crossover_ns(&stock, &rt).unwrap();
        assert!((w - 1_900_000.0).abs() < 1e-6);
        assert!((stock.total_ns(w) - rt.total_ns(w)).abs() < 1e-6);
        assert_eq!(crossover_ns(&rt, &stock), Some(w));
        // Better in both: they never cross.
        let better = DelayModel {
            latency_ns: 10.0,
            slowdown: 0.9,
        };
        assert_eq!(crossover_ns(&stock, &better), None);
        assert_eq!(crossover_ns(&stock, &stock), None);
    }

    #[test]
    fn grid_spans_the_range_log_spaced() {
        let g = mckenney_grid();
        assert_eq!(g.len(), 51);
        assert!((g[0] - 1e3).abs() < 1e-9 && (g[50] - 1e8).abs() < 1e-3);
        assert!((g[10] - 1e4).abs() < 1e-6);
        assert!(log_grid(0.0, 1.0, 10).is_empty());
    }
}
