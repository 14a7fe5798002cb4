//! `rtmgr measure latency`: the wake-up latency of periodic real-time threads
//! per CPU, optionally under one of the ARTiS loads (McKenney §2.1 Figs. 1–3,
//! §3 Fig. 8; ARTiS §3.1).

use super::session::{check_cpus, LoadRequest};
use super::{bad_input, progress_line, Reporter, Result, Session};
use crate::measure::probe::ProbeConfig;
use crate::measure::segment::{
    latency_run, merged, merged_wakeups, prepare_for, run_segment, Orchestrator, SegmentPlan,
};
use crate::report::{LatencyRun, PolicySpec, ProbeMode, ProbeSettings};
use crate::trace::tail_of_run;
use rtmgr_core::CpuSet;
use std::time::Duration;

/// What to measure and how.
#[derive(Debug, Clone)]
pub struct LatencyConfig {
    /// CPUs to measure, one thread each (default: `Session::default_cpu`).
    pub cpus: Option<CpuSet>,
    pub interval: Duration,
    /// How long (ignored with `loops`).
    pub duration: Duration,
    /// Releases per thread instead of a duration.
    pub loops: Option<u64>,
    pub policy: PolicySpec,
    /// McKenney Fig. 1: sleep for the interval and record signed jitter.
    pub relative: bool,
    /// Threads per CPU (McKenney Fig. 8).
    pub parallel: u32,
    pub load: Option<LoadRequest>,
    /// Explain the tail with tracefs: `Some(None)` above the run's p99.9,
    /// `Some(Some(ns))` above a fixed threshold.
    pub trace: Option<Option<u64>>,
}

impl LatencyConfig {
    /// The probe this configuration runs on `cpus`, for `duration` unless it counts loops.
    pub fn probe(&self, cpus: &CpuSet, duration: Option<Duration>) -> ProbeConfig {
        ProbeConfig {
            mode: if self.relative {
                ProbeMode::Relative
            } else {
                ProbeMode::Absolute
            },
            cpus: cpus.clone(),
            interval_ns: self.interval.as_nanos() as u64,
            duration_ns: if self.loops.is_some() {
                None
            } else {
                duration.map(|d| d.as_nanos() as u64)
            },
            loops: self.loops,
            policy: self.policy,
            parallel: self.parallel,
        }
    }

    /// The planned length of the run.
    pub fn planned(&self) -> Duration {
        match self.loops {
            Some(n) => self.interval * n.min(u32::MAX as u64) as u32,
            None => self.duration,
        }
    }

    /// The measured CPUs: the configured ones, checked, or the session's default.
    pub fn measured_cpus(&self, s: &Session) -> Result<CpuSet> {
        let cpus = self
            .cpus
            .clone()
            .unwrap_or_else(|| CpuSet::single(s.default_cpu()));
        check_cpus("--cpus", &cpus, &s.online)?;
        Ok(cpus)
    }
}

/// Checks that need no machine (before the session opens).
pub fn check(cfg: &LatencyConfig) -> Result<()> {
    if cfg.parallel == 0 {
        return bad_input("--parallel must be at least 1");
    }
    Ok(())
}

/// Run the measurement; the body of the latency report.
pub fn run(s: &Session, cfg: &LatencyConfig, rep: &mut dyn Reporter) -> Result<LatencyRun> {
    check(cfg)?;
    let cpus = cfg.measured_cpus(s)?;
    let _orchestrator = Orchestrator::enter(&cpus, &s.online);
    let load = s.load_plan(cfg.load.as_ref(), &cpus)?;
    let prepare = prepare_for(&s.host, s.applied.as_ref(), &cpus).or_else(bad_input)?;
    let probe = cfg.probe(&cpus, Some(cfg.duration));
    let plan = SegmentPlan {
        probe: &probe,
        load: load.as_ref(),
        applied: s.applied.as_ref(),
        prepare,
        trace: cfg.trace,
        guard_feed: None,
    };
    let seg = run_segment(&s.host, plan, &s.stop, &mut |p, el| {
        rep.progress(el, &progress_line(p))
    })?;
    let settings = ProbeSettings {
        probe,
        mlocked: s.mlocked,
        dma_latency_held: s.dma.held(),
    };
    let mut run = latency_run(
        settings,
        &seg.threads,
        load.as_ref().map(|l| l.result(seg.metrics.clone())),
        seg.disturbance,
        seg.elapsed_ns,
    );
    if let (Some(fixed), Some(t)) = (cfg.trace, &seg.tail) {
        let hist = merged(&seg.threads).0;
        let wakeups = merged_wakeups(&seg.threads);
        run.tail_causes = Some(tail_of_run(
            &hist,
            &wakeups,
            &t.attributions,
            fixed,
            t.stats.lost,
        ));
    }
    Ok(run)
}
