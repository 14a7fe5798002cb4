//! `rtmgr measure latency --trace-cost`: what the tail tracer costs the
//! latency it explains (docs/architecture.md "Measuring": configurations compared in one
//! run, interleaved, as ratios) — the same probe with and without tracing,
//! alternated in rounds under one load.

use super::latency::LatencyConfig;
use super::{bad_input, progress_line, Reporter, Result, Session};
use crate::measure::probe::ProbeConfig;
use crate::measure::segment::{
    cpu_result, merged, prepare_for, run_segment, stop_loads, Loads, Orchestrator, SegmentPlan,
};
use crate::report::TraceCostRun;
use rtmgr_core::stats::Hist;
use std::time::{Duration, Instant};

/// Checks that need no machine (before the session opens).
pub fn check(cfg: &LatencyConfig, rounds: u32) -> Result<()> {
    if cfg.relative || cfg.loops.is_some() {
        return bad_input("--trace-cost takes absolute-mode probes with --duration");
    }
    if rounds == 0 {
        return bad_input("--rounds must be at least 1");
    }
    Ok(())
}

pub fn run(
    s: &Session,
    cfg: &LatencyConfig,
    rounds: u32,
    rep: &mut dyn Reporter,
) -> Result<TraceCostRun> {
    check(cfg, rounds)?;
    let cpus = cfg.measured_cpus(s)?;
    let _orchestrator = Orchestrator::enter(&cpus, &s.online);
    let load = s.load_plan(cfg.load.as_ref(), &cpus)?;
    let prepare = prepare_for(&s.host, s.applied.as_ref(), &cpus).or_else(bad_input)?;
    let seg_d = cfg.duration / (2 * rounds);
    let probe = ProbeConfig {
        duration_ns: Some(seg_d.as_nanos() as u64),
        ..cfg.probe(&cpus, None)
    };
    // One load for the whole comparison, so both halves see the same load.
    let loads = match &load {
        Some(plan) => Some(Loads::start_warm(
            plan,
            &s.host,
            s.applied.as_ref(),
            cfg.duration * 2 + Duration::from_secs(60),
            &s.stop,
        )?),
        None => None,
    };
    let t0 = Instant::now();
    let mut hist = [Hist::new(), Hist::new()];
    let mut missed = [0u64; 2];
    let (mut events, mut lost, mut traced_ns) = (0u64, 0u64, 0u64);
    let mut rounds_done = 0;
    for r in 0..rounds {
        for step in 0..2 {
            if s.stopped() {
                break;
            }
            // Alternate which half goes first.
            let traced = (step + r as usize) % 2 == 1;
            let plan = SegmentPlan {
                probe: &probe,
                load: None,
                applied: None,
                prepare: prepare.clone(),
                trace: traced.then_some(cfg.trace.unwrap_or(None)),
                guard_feed: None,
            };
            let label = if traced { "traced" } else { "untraced" };
            let seg = run_segment(&s.host, plan, &s.stop, &mut |p, _| {
                let msg = format!("round {} {label} {}", r + 1, progress_line(p));
                rep.progress(t0.elapsed(), &msg)
            })?;
            let (h, m) = merged(&seg.threads);
            let i = usize::from(traced);
            hist[i].merge(&h);
            missed[i] += m;
            if let Some(t) = &seg.tail {
                events += t.stats.events;
                lost += t.stats.lost;
                traced_ns += seg.elapsed_ns;
            }
        }
        if !s.stopped() {
            rounds_done += 1;
        }
    }
    let metrics = stop_loads(loads)?;
    let cpu = cpus.first().unwrap_or(0);
    Ok(TraceCostRun {
        cpus,
        interval_ns: probe.interval_ns,
        rounds: rounds_done,
        segment_ns: seg_d.as_nanos() as u64,
        load: load.as_ref().map(|l| l.result(metrics)),
        untraced: cpu_result(cpu, &hist[0], missed[0]),
        traced: cpu_result(cpu, &hist[1], missed[1]),
        events,
        events_per_s: events as f64 * 1e9 / traced_ns.max(1) as f64,
        events_lost: lost,
    })
}
