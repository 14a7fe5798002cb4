//! McKenney §3 Fig. 8: latency against the number of parallel real-time
//! tasks (1 to 12, 100 000 samples each): average, 99.999th percentile and
//! maximum per level. `rtmgr measure latency --parallel-sweep N`'s report
//! (schema `rtmgr.parallel/1`, docs/report-schema.md) and its table (pure);
//! `plot` draws Fig. 8 and `run` measures the levels.

mod plot;
pub mod run;

pub use plot::parallel_svg;

use crate::report::{render, us, Header};
use rtmgr_core::stats::Summary;
use rtmgr_core::CpuSet;
use serde::{Deserialize, Serialize};

pub const PARALLEL_SCHEMA: &str = "rtmgr.parallel/1";

/// p99.999 in parts per million.
pub const P99999: u32 = 999_990;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParallelSweep {
    /// schema, version, command, start, host, partial (see `report::Header`).
    #[serde(flatten)]
    pub header: Header,
    pub cpus: CpuSet,
    pub interval_ns: u64,
    /// Samples per task at each level.
    pub loops: u64,
    pub levels: Vec<ParallelLevel>,
}

/// All tasks of one level merged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParallelLevel {
    /// Parallel tasks per measured CPU.
    pub tasks: u32,
    pub summary: Summary,
}

/// One row per level: n, average, p99.999 (when n supports it), max, missed.
pub fn parallel_table(levels: &[ParallelLevel]) -> String {
    let mut t = vec![["tasks", "n", "avg", "p99.999", "max", "missed"]
        .map(String::from)
        .to_vec()];
    for l in levels {
        let s = &l.summary;
        t.push(vec![
            l.tasks.to_string(),
            s.n.to_string(),
            s.mean_ns
                .map_or("-".into(), |m| format!("{:.1}", m / 1000.0)),
            us(s.get(P99999)),
            us(s.max_ns),
            s.missed.to_string(),
        ]);
    }
    let mut out = render(&t);
    out.push_str("(µs; p99.999 needs n ≥ 1 000 000 — ten tasks of 100 000 samples)\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtmgr_core::stats::Hist;

    #[test]
    fn table_shows_p99999_only_when_supported() {
        let level = |tasks: u32, n: i64| {
            let mut h = Hist::new();
            for v in 0..n {
                h.record(1000 + v % 1000);
            }
            ParallelLevel {
                tasks,
                summary: h.summary(0),
            }
        };
        let t = parallel_table(&[level(1, 1000), level(10, 1_000_000)]);
        let rows: Vec<&str> = t.lines().collect();
        assert!(rows[1].contains(" - "), "{t}");
        assert!(!rows[2].contains(" - "), "{t}");
    }
}
