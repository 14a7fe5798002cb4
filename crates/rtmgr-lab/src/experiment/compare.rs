//! `rtmgr measure latency --compare-cyclictest`: rtmgr's probe and cyclictest
//! (rt-tests) alternated on one CPU under the same load, in rounds, so an
//! independent tool checks the probe (docs/architecture.md "Measuring").

use super::latency::LatencyConfig;
use super::{bad_input, progress_line, Reporter, Result, Session};
use crate::measure::probe::ProbeConfig;
use crate::measure::segment::{
    cpu_result, merged, prepare_for, run_segment, stop_loads, Loads, Orchestrator, SegmentPlan,
};
use crate::measure::{cyclictest, MeasureError};
use crate::report::{CompareRun, PolicySpec, ToolResult};
use rtmgr_core::stats::Hist;
use rtmgr_linux::partition::{self, Role};
use std::time::{Duration, Instant};

/// Rounds on top of a latency configuration (each: one probe and one cyclictest segment).
#[derive(Debug, Clone)]
pub struct CompareConfig {
    pub latency: LatencyConfig,
    pub rounds: u32,
}

/// Checks that need no machine (before the session opens).
pub fn check(cfg: &CompareConfig) -> Result<u8> {
    let a = &cfg.latency;
    let PolicySpec::Fifo { priority } = a.policy else {
        return bad_input("--compare-cyclictest compares SCHED_FIFO probes: use --policy fifo");
    };
    if a.relative || a.parallel != 1 || a.loops.is_some() {
        return bad_input(
            "--compare-cyclictest takes one absolute-mode thread on one CPU, with --duration",
        );
    }
    if cfg.rounds == 0 {
        return bad_input("--rounds must be at least 1");
    }
    crate::measure::which("cyclictest")
        .ok_or(MeasureError::MissingTool("cyclictest", "rt-tests"))?;
    Ok(priority)
}

pub fn run(s: &Session, cfg: &CompareConfig, rep: &mut dyn Reporter) -> Result<CompareRun> {
    let priority = check(cfg)?;
    let a = &cfg.latency;
    let cpus = a.measured_cpus(s)?;
    let _orchestrator = Orchestrator::enter(&cpus, &s.online);
    if cpus.len() != 1 {
        return bad_input("--compare-cyclictest measures one CPU: give --cpus N");
    }
    let cpu = cpus.first().expect("one CPU");
    let load = s.load_plan(a.load.as_ref(), &cpus)?;
    let prepare = prepare_for(&s.host, s.applied.as_ref(), &cpus).or_else(bad_input)?;
    let seg_d = a.duration / (2 * cfg.rounds);
    let interval_ns = a.interval.as_nanos() as u64;
    let loops = (seg_d.as_nanos() as u64 / interval_ns).max(1);
    let probe = ProbeConfig {
        loops: Some(loops),
        duration_ns: None,
        ..a.probe(&cpus, None)
    };
    // One load for the whole comparison, so both tools see the same load.
    let loads = match &load {
        Some(plan) => Some(Loads::start_warm(
            plan,
            &s.host,
            s.applied.as_ref(),
            a.duration * 2 + Duration::from_secs(60),
            &s.stop,
        )?),
        None => None,
    };
    let t0 = Instant::now();
    let (mut ours, mut theirs) = (Hist::new(), Hist::new());
    let (mut our_missed, mut our_cpu, mut their_cpu, mut their_overflows) =
        (0u64, 0u64, 0u64, 0u64);
    let mut their_cpu_samples = 0u64;
    let mut command = Vec::new();
    let enter_rt = |pid: u32| -> crate::measure::Result<()> {
        match (&prepare, &s.applied) {
            (Some(_), Some(ap)) => partition::enter(&s.host, ap, Role::Rt, pid)
                .map_err(|e| MeasureError::Setup(e.to_string())),
            _ => Ok(()),
        }
    };
    let mut rounds_done = 0;
    for r in 0..cfg.rounds {
        for step in 0..2 {
            if s.stopped() {
                break;
            }
            let probe_first = r % 2 == 0;
            if (step == 0) == probe_first {
                let plan = SegmentPlan {
                    probe: &probe,
                    load: None,
                    applied: None,
                    prepare: prepare.clone(),
                    trace: None,
                    guard_feed: None,
                };
                let seg = run_segment(&s.host, plan, &s.stop, &mut |p, _| {
                    let msg = format!("round {} rtmgr {}", r + 1, progress_line(p));
                    rep.progress(t0.elapsed(), &msg)
                })?;
                let (h, m) = merged(&seg.threads);
                ours.merge(&h);
                our_missed += m;
                our_cpu += seg.threads.iter().map(|t| t.cpu_time_ns).sum::<u64>();
            } else {
                rep.progress(t0.elapsed(), &format!("round {} cyclictest", r + 1));
                let ct = cyclictest::run(
                    cpu,
                    interval_ns,
                    loops,
                    priority,
                    if prepare.is_some() {
                        Some(&enter_rt)
                    } else {
                        None
                    },
                    &s.stop,
                )?;
                rep.progress(t0.elapsed(), &format!("round {} cyclictest", r + 1));
                theirs.merge(&ct.hist);
                their_overflows += ct.overflows;
                if let Some(c) = ct.cpu_time_ns {
                    their_cpu += c;
                    their_cpu_samples += ct.hist.len();
                }
                command = ct.command;
            }
        }
        if !s.stopped() {
            rounds_done += 1;
        }
    }
    let metrics = stop_loads(loads)?;
    let per = |cpu_ns: u64, n: u64| (n > 0).then(|| cpu_ns as f64 / n as f64);
    Ok(CompareRun {
        cpu,
        interval_ns,
        rounds: rounds_done,
        segment_ns: seg_d.as_nanos() as u64,
        load: load.as_ref().map(|l| l.result(metrics)),
        rtmgr: ToolResult {
            result: cpu_result(cpu, &ours, our_missed),
            cpu_ns_per_sample: per(our_cpu, ours.len()),
            overflows: 0,
            resolution_ns: 1,
        },
        cyclictest: ToolResult {
            result: cpu_result(cpu, &theirs, 0),
            cpu_ns_per_sample: per(their_cpu, their_cpu_samples),
            overflows: their_overflows,
            resolution_ns: 1000,
        },
        cyclictest_command: command,
    })
}
