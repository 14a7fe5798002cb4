//! `rtmgr measure latency --parallel-sweep N`: McKenney §3 Fig. 8 — the same
//! latency measurement with 1, 2, … N parallel real-time tasks per measured
//! CPU, one level after the other, each level merged into one distribution
//! (average, p99.999, maximum).

use super::{ParallelLevel, ParallelSweep, PARALLEL_SCHEMA};
use crate::experiment::latency::{self, LatencyConfig};
use crate::experiment::{bad_input, Reporter, Result, Session};
use crate::report::Header;

/// Checks that need no machine (before the session opens).
pub fn check(cfg: &LatencyConfig, max_tasks: u32) -> Result<()> {
    if !(1..=64).contains(&max_tasks) {
        return bad_input("--parallel-sweep takes 1 to 64 tasks");
    }
    if cfg.loops.is_none() {
        return bad_input(
            "--parallel-sweep needs --loops (samples per task at each level, McKenney: 100000)",
        );
    }
    latency::check(&LatencyConfig {
        parallel: 1,
        ..cfg.clone()
    })
}

pub fn run(
    s: &Session,
    cfg: &LatencyConfig,
    max_tasks: u32,
    rep: &mut dyn Reporter,
) -> Result<ParallelSweep> {
    check(cfg, max_tasks)?;
    let cpus = cfg.measured_cpus(s)?;
    let mut levels = Vec::new();
    for tasks in 1..=max_tasks {
        if s.stopped() {
            break;
        }
        rep.note(&format!("{tasks} parallel task(s) per CPU on CPUs {cpus}"));
        let level = LatencyConfig {
            parallel: tasks,
            ..cfg.clone()
        };
        let run = latency::run(s, &level, rep)?;
        levels.push(ParallelLevel {
            tasks,
            summary: run.overall.summary,
        });
    }
    let partial = s.partial();
    Ok(ParallelSweep {
        header: Header::new(
            PARALLEL_SCHEMA,
            s.started,
            crate::measure::host_info(&s.online),
            partial,
        ),
        cpus,
        interval_ns: cfg.interval.as_nanos() as u64,
        loops: cfg.loops.unwrap_or(0),
        levels,
    })
}
