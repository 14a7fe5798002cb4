//! `rtmgr measure exec`: execution-time variation of a routine of integer
//! divisions at the top real-time priority, unloaded (T_min) then under load
//! (ARTiS §3.2).

use super::session::{check_cpus, LoadRequest};
use super::{bad_input, Reporter, Result, Session};
use crate::measure::exec::{over_t_min, run_pass, ExecConfig as PassConfig};
use crate::measure::probe::max_fifo_priority;
use crate::measure::segment::{cpu_result, prepare_for, Loads, Orchestrator};
use crate::report::ExecRun;
use rtmgr_core::CpuSet;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct ExecConfig {
    /// CPU to run on (default: `Session::default_cpu`).
    pub cpu: Option<u32>,
    /// Integer divisions per run.
    pub divisions: u64,
    /// Runs per pass.
    pub runs: u64,
    pub priority: Option<u8>,
    pub load: Option<LoadRequest>,
}

/// Checks that need no machine (before the session opens).
pub fn check(cfg: &ExecConfig) -> Result<()> {
    if cfg.runs == 0 || cfg.divisions == 0 {
        return bad_input("--runs and --divisions must be at least 1");
    }
    Ok(())
}

pub fn run(s: &Session, cfg: &ExecConfig, rep: &mut dyn Reporter) -> Result<ExecRun> {
    check(cfg)?;
    let cpu = cfg.cpu.unwrap_or_else(|| s.default_cpu());
    let cpus = CpuSet::single(cpu);
    check_cpus("--cpu", &cpus, &s.online)?;
    let _orchestrator = Orchestrator::enter(&cpus, &s.online);
    let load = s.load_plan(cfg.load.as_ref(), &cpus)?;
    let prepare = prepare_for(&s.host, s.applied.as_ref(), &cpus).or_else(bad_input)?;
    let pass = PassConfig {
        cpu,
        divisions: cfg.divisions,
        runs: cfg.runs,
        priority: cfg.priority.unwrap_or_else(max_fifo_priority),
    };
    rep.note(&format!(
        "unloaded pass: {} runs of {} divisions on CPU {cpu}",
        cfg.runs, cfg.divisions
    ));
    let (unloaded, _) = run_pass(&pass, s.stop.clone(), prepare.clone())?;
    let mut loaded = None;
    let mut load_result = None;
    if let Some(plan) = &load {
        if !s.stopped() {
            rep.note(&format!(
                "loaded pass under {} load on CPUs {}",
                plan.kind, plan.parts[0].cpus
            ));
            let max =
                Duration::from_nanos(unloaded.max().unwrap_or(0).max(0) as u64 * 3 * cfg.runs)
                    + Duration::from_secs(60);
            let loads = Loads::start_warm(plan, &s.host, s.applied.as_ref(), max, &s.stop)?;
            let measured = run_pass(&pass, s.stop.clone(), prepare.clone());
            let metrics = loads.stop()?;
            loaded = Some(measured?.0);
            load_result = Some(plan.result(metrics));
        }
    }
    let t_min = unloaded.min();
    let worst = loaded.as_ref().unwrap_or(&unloaded).max();
    let (over_ns, over_pct) = over_t_min(t_min, worst);
    Ok(ExecRun {
        cpu,
        divisions: cfg.divisions,
        runs: cfg.runs,
        priority: pass.priority,
        t_min_ns: t_min,
        unloaded: cpu_result(cpu, &unloaded, 0),
        loaded: loaded.as_ref().map(|h| cpu_result(cpu, h, 0)),
        load: load_result,
        max_over_t_min_ns: over_ns,
        max_over_t_min_pct: over_pct,
    })
}
