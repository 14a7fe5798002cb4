//! `rtmgr measure periodicity`: two tasks alternately woken by a timer task
//! every period on one CPU, optionally under load (DROPS §5.3).

use super::session::{check_cpus, LoadRequest};
use super::{bad_input, Reporter, Result, Session};
use crate::measure::periodicity::{self, PeriodicityConfig as RunConfig};
use crate::measure::probe::max_fifo_priority;
use crate::measure::segment::{cpu_result, prepare_for, stop_loads, Loads, Orchestrator};
use crate::report::PeriodicityRun;
use rtmgr_core::CpuSet;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct PeriodicityConfig {
    /// CPU of the timer task and the two woken tasks (default: `Session::default_cpu`).
    pub cpu: Option<u32>,
    pub period: Duration,
    pub duration: Duration,
    pub priority: Option<u8>,
    pub load: Option<LoadRequest>,
}

/// The run's body, and whether the run was cut short.
pub struct PeriodicityOutcome {
    pub run: PeriodicityRun,
    pub interrupted: bool,
}

pub fn run(
    s: &Session,
    cfg: &PeriodicityConfig,
    rep: &mut dyn Reporter,
) -> Result<PeriodicityOutcome> {
    let cpu = cfg.cpu.unwrap_or_else(|| s.default_cpu());
    let cpus = CpuSet::single(cpu);
    check_cpus("--cpu", &cpus, &s.online)?;
    let _orchestrator = Orchestrator::enter(&cpus, &s.online);
    let prio = cfg.priority.unwrap_or_else(max_fifo_priority);
    if prio < 2 {
        return bad_input("--priority must be at least 2 (the woken tasks run one below)");
    }
    let load = s.load_plan(cfg.load.as_ref(), &cpus)?;
    let prepare = prepare_for(&s.host, s.applied.as_ref(), &cpus).or_else(bad_input)?;
    let run_cfg = RunConfig {
        cpu,
        period_ns: cfg.period.as_nanos() as u64,
        duration_ns: cfg.duration.as_nanos() as u64,
        priority: prio,
    };
    let loads = match &load {
        Some(plan) => Some(Loads::start_warm(
            plan,
            &s.host,
            s.applied.as_ref(),
            cfg.duration + Duration::from_secs(60),
            &s.stop,
        )?),
        None => None,
    };
    rep.note(&format!(
        "periodicity: {} µs period for {:?} on CPU {cpu}",
        run_cfg.period_ns / 1000,
        cfg.duration
    ));
    let out = periodicity::run(&run_cfg, s.stop.clone(), prepare);
    let metrics = stop_loads(loads)?;
    let out = out?;
    Ok(PeriodicityOutcome {
        interrupted: out.interrupted,
        run: PeriodicityRun {
            cpu,
            period_ns: run_cfg.period_ns,
            load: load.as_ref().map(|l| l.result(metrics)),
            expected: out.expected,
            activations: out.activations,
            lost: out.lost,
            inter_activation: cpu_result(cpu, &out.inter_activation, 0),
            deviation: cpu_result(cpu, &out.deviation, 0),
            series_ns: out.series_ns,
        },
    })
}
