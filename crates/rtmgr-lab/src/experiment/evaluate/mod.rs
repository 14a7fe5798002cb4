//! `rtmgr evaluate`, the main job: the RT CPU's wake-up latency under the
//! `all` load (ARTiS §3.1) in five configurations, interleaved in rounds so
//! drift hits them alike (docs/architecture.md "Measuring"): idle, stock,
//! shield, idle-guests (SCHED_IDLE guests on the RT CPU without the balancer,
//! ARTiS §2.2) and balanced (the live
//! balancer lending the RT CPU, ARTiS §2.3), plus preempt (Table 1's "Linux
//! with preemption") where the kernel can switch its preemption model. The RT
//! CPU defaults to the one the kernel leaves most alone (`--rt-cpus auto`).
//! The shield runs twice per round (`shield-twin`, the A/A control) and every
//! round's figures are kept, so each comparison gets a bootstrap interval
//! against this run's noise floor (issue 28, docs/evaluate.md "Intervals").
//! Always resets the partition it applied.

mod config;
mod configs;
mod host_prior;
mod prepare;
mod rounds;

pub use config::EvaluateConfig;

use super::segment_session::SegmentSession;
use super::session::report;
use super::{Error, Reporter, Result};
use crate::load::ComponentMetrics;
use crate::measure::load::LoadProgram;
use crate::measure::segment::probe_result;
use crate::report::{
    evaluate_intervals, evaluate_verdicts, Body, ConfigResult, EvaluateRun, Report,
};
use crate::trace::tail_of_run;
use configs::Config;
use prepare::prepare;
use rounds::{Acc, Rounds};
use rtmgr_core::host_preemption::HostPreemption;
use rtmgr_core::partition::PartitionPlan;
use rtmgr_core::CpuSet;
use rtmgr_linux::Host;
use std::time::Duration;

/// Per-segment average of ops/s per load component.
fn mean_metrics(parts: &[Vec<ComponentMetrics>]) -> Vec<ComponentMetrics> {
    let mut sum = crate::load::merge_metrics(parts);
    for m in &mut sum {
        let k = parts
            .iter()
            .filter(|p| p.iter().any(|x| x.component == m.component))
            .count()
            .max(1);
        m.ops_per_s /= k as f64;
    }
    sum
}

/// What a run gives back: the report (partial when cut short), how it was
/// measured, and the failure that ended it early, if one did.
pub struct EvaluateOutcome {
    pub report: Report,
    pub mlocked: bool,
    pub dma_held: bool,
    pub failure: Option<Error>,
}

impl EvaluateOutcome {
    pub fn run(&self) -> &EvaluateRun {
        match &self.report.body {
            Body::Evaluate(e) => e,
            _ => unreachable!("an evaluate report"),
        }
    }
}

/// Check the request, take the machine, run every round, reset the partition.
/// Errors before the first round are returned; a failure during the rounds
/// ends them and comes back in the outcome with the data so far.
pub fn run(host: &Host, cfg: &EvaluateConfig, rep: &mut dyn Reporter) -> Result<EvaluateOutcome> {
    let prep = prepare(host, cfg, rep)?;
    let session = SegmentSession::open(
        &prep.plan.rt,
        &prep.online,
        prep.rt_cpu,
        cfg.interval,
        prep.segment,
    )?;
    rep.note(&format!(
        "evaluate: RT CPU {}, NRT CPUs {}, {} load ({} engine), {} rounds x {} configurations x {:?}, probe every {:?}",
        prep.rt_cpu,
        prep.plan.nrt,
        cfg.load,
        prep.program.engine(),
        prep.rounds,
        prep.configs.len(),
        prep.segment,
        cfg.interval
    ));
    let shape = Shape {
        cfg,
        configs: &prep.configs,
        rt_cpu: prep.rt_cpu,
        plan: &prep.plan,
        program: &prep.program,
        interval_ns: session.probe.interval_ns,
        rounds: prep.rounds,
        segment: prep.segment,
        rt_choice: &prep.rt_choice,
        skipped: &prep.skipped,
        online: &prep.online,
        started: session.started,
        host_test: &prep.host_test,
    };
    let build =
        |acc: &[Acc], done: u32, partial: Option<String>| build_report(&shape, acc, done, partial);
    let rounds = Rounds {
        host,
        cfg,
        prep: &prep,
        session: &session,
        build: &build,
    };
    let (tally, failure) = rounds.run(rep);
    // Any guard still alive was dropped (reset) when the rounds ended.
    let partial = if let Some(e) = &failure {
        Some(format!("failed: {e}"))
    } else if session.stopped() {
        Some("interrupted (SIGINT/SIGTERM): fewer rounds than planned".to_string())
    } else {
        None
    };
    Ok(EvaluateOutcome {
        report: build(&tally.acc, tally.rounds_done, partial),
        mlocked: session.mlocked,
        dma_held: session.dma.held(),
        failure,
    })
}

/// What the report is built from, besides the data.
struct Shape<'a> {
    cfg: &'a EvaluateConfig,
    configs: &'a [Config],
    rt_cpu: u32,
    plan: &'a PartitionPlan,
    program: &'a LoadProgram,
    interval_ns: u64,
    rounds: u32,
    segment: Duration,
    rt_choice: &'a Option<String>,
    skipped: &'a [String],
    online: &'a CpuSet,
    started: u64,
    host_test: &'a Option<HostPreemption>,
}

fn build_report(sh: &Shape<'_>, acc: &[Acc], rounds_done: u32, partial: Option<String>) -> Report {
    let (cfg, rt_cpu) = (sh.cfg, sh.rt_cpu);
    let configs: Vec<ConfigResult> = sh
        .configs
        .iter()
        .zip(acc)
        .map(|(c, a)| ConfigResult {
            name: c.name().into(),
            description: c.description().into(),
            result: probe_result(rt_cpu, &a.hist, a.missed, &a.host),
            throughput: mean_metrics(&a.metrics),
            segments: a.segments,
            disturbance: a.disturbance.clone(),
            tail_causes: cfg.trace.map(|fixed| {
                tail_of_run(&a.hist, &a.wakeups, &a.attributions, fixed, a.events_lost)
            }),
            balancer: a.balancer.clone(),
            rounds: a.rounds.clone(),
        })
        .collect();
    let mut run = EvaluateRun {
        rt_cpus: sh.plan.rt.clone(),
        nrt_cpus: sh.plan.nrt.clone(),
        load: cfg.load.name().into(),
        load_engine: sh.program.engine(),
        interval_ns: sh.interval_ns,
        rounds_planned: sh.rounds,
        rounds_done,
        segment_ns: sh.segment.as_nanos() as u64,
        latency_bound_us: sh.plan.latency_bound_us,
        configs,
        verdicts: Vec::new(),
        rt_choice: sh.rt_choice.clone(),
        skipped: sh.skipped.to_vec(),
        host_preemption: sh.host_test.clone(),
        intervals: None,
    };
    run.intervals = evaluate_intervals(&run);
    run.verdicts = evaluate_verdicts(&run);
    report(Body::Evaluate(run), sh.online, sh.started, partial)
}
