//! `rtmgr evaluate --ablate`: which knob buys what (issue 14). Stock, then one
//! configuration per cumulative isolation step of the partition
//! (`crate::ablation::steps`: cpusets; + IRQs; + workqueues; + each
//! run-time knob; + the live balancer), interleaved in rounds like
//! `rtmgr evaluate` (the same probe, load and worker count), each step's
//! partition applied and reset around its segment; p99 and p99.9 with 95 %
//! intervals, and the gates checked.

use crate::ablation::{
    check_gates, quantile_ci, set_changes, steps, AblationConfig, AblationReport, Gate, Step,
    ABLATION_SCHEMA,
};
use crate::experiment::background_balancer::BackgroundBalancer;
use crate::experiment::evaluate::EvaluateConfig;
use crate::experiment::own_partition;
use crate::experiment::segment_session::SegmentSession;
use crate::experiment::{bad_input, progress_line, Context, Error, Reporter, Result};
use crate::measure::host_info;
use crate::measure::host_split::HostSplit;
use crate::measure::probe::{ProbeConfig, Progress};
use crate::measure::segment::{
    merged, probe_result, rt_prepare, run_segment, LoadPart, LoadPlan, SegmentPlan,
};
use crate::report::Header;
use rtmgr_core::partition::{KnobId, PartitionPlan};
use rtmgr_core::stats::Hist;
use rtmgr_core::CpuSet;
use rtmgr_linux::machine_access::require_root;
use rtmgr_linux::partition::{ApplyOptions, PartitionGuard, Role};
use rtmgr_linux::Host;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to run: evaluate's settings, and the gates.
#[derive(Debug, Clone)]
pub struct AblateConfig {
    pub evaluate: EvaluateConfig,
    pub gates: Vec<Gate>,
    /// The step the gates check (its name's start; default `full`).
    pub gate_config: String,
}

pub struct AblateOutcome {
    pub report: AblationReport,
    pub failure: Option<Error>,
}

/// Stock (None) or a step.
type Config = Option<Step>;

fn name(c: &Config) -> &str {
    c.as_ref().map_or("stock", |s| s.name.as_str())
}

/// The load: stock's on every CPU, a step's on the NRT CPUs with as many workers.
fn load_plan(c: &Config, base: &LoadPlan, online: &CpuSet, plan: &PartitionPlan) -> LoadPlan {
    let part = match c {
        None => LoadPart {
            cpus: online.clone(),
            sched_idle: false,
            enter: None,
            instances: None,
        },
        Some(_) => LoadPart {
            cpus: plan.nrt.clone(),
            sched_idle: false,
            enter: Some(Role::Nrt),
            instances: Some(online.len()),
        },
    };
    LoadPlan {
        parts: vec![part],
        ..base.clone()
    }
}

pub fn run(host: &Host, cfg: &AblateConfig, rep: &mut dyn Reporter) -> Result<AblateOutcome> {
    let ev = &cfg.evaluate;
    require_root(host, "rtmgr evaluate --ablate")?;
    let program = ev.load_engine.resolve()?;
    let own = own_partition::prepare(host, "rtmgr evaluate --ablate", ev.rt_cpu)?;
    let (online, plan, rt_cpu, opts) = (&own.online, &own.plan, own.rt_cpu, &own.opts);
    // The preemption and favordynmods knobs only count when asked for
    // (evaluate asks for neither).
    let knobs: Vec<KnobId> = plan
        .knobs
        .iter()
        .copied()
        .filter(|k| *k != KnobId::Preempt || plan.preempt.is_some())
        .filter(|k| *k != KnobId::Favordynmods || plan.favordynmods)
        .collect();
    let mut configs: Vec<Config> = vec![None];
    configs.extend(steps(&knobs).into_iter().map(Some));
    let rounds = ev.rounds.max(1);
    let segment = ev.total / (rounds * configs.len() as u32);
    if segment < Duration::from_millis(100) || ev.interval.is_zero() || ev.interval > segment {
        return bad_input(format!(
            "--duration {:?} over {rounds} rounds and {} configurations gives {segment:?} each: too short for --interval {:?}",
            ev.total,
            configs.len(),
            ev.interval
        ));
    }
    let session = SegmentSession::open(&plan.rt, online, rt_cpu, ev.interval, segment)?;
    let (stop, probe, started) = (&session.stop, &session.probe, session.started);
    let base_load = LoadPlan::simple(ev.load, program, online.clone());
    rep.note(&format!(
        "evaluate --ablate: RT CPU {rt_cpu}, {} configurations ({}), {rounds} rounds x {segment:?}",
        configs.len(),
        configs.iter().map(name).collect::<Vec<_>>().join(", ")
    ));
    let mut acc: Vec<(Hist, u64, HostSplit)> = configs
        .iter()
        .map(|_| (Hist::new(), 0, HostSplit::default()))
        .collect();
    // Each step's rounds, for the bootstrap intervals (issue 28).
    let mut per_round: Vec<Vec<rtmgr_core::stats::HistData>> = vec![Vec::new(); configs.len()];
    let t0 = Instant::now();
    let mut rounds_done = 0;
    let mut failure = None;
    'rounds: for r in 0..rounds {
        let mut order: Vec<usize> = (0..configs.len()).collect();
        if r % 2 == 1 {
            order.reverse();
        }
        for i in order {
            if stop.load(Ordering::Relaxed) {
                break 'rounds;
            }
            let c = &configs[i];
            let load = load_plan(c, &base_load, online, plan);
            let step = StepRun {
                host,
                plan,
                opts,
                probe,
                stop,
                load: &load,
            };
            let measured = step.measure(c, &mut |p| {
                let msg = format!("round {}/{rounds} {} {}", r + 1, name(c), progress_line(p));
                rep.progress(t0.elapsed(), &msg)
            });
            match measured {
                Ok((h, m, split)) => {
                    per_round[i].push(h.to_data());
                    acc[i].0.merge(&h);
                    acc[i].1 += m;
                    acc[i].2.merge(&split);
                }
                Err(e) => {
                    failure = Some(e.context(format!("round {} {}", r + 1, name(c))));
                    break 'rounds;
                }
            }
        }
        if !stop.load(Ordering::Relaxed) {
            rounds_done += 1;
        }
    }
    let mut results = config_results(&configs, &acc, per_round, rt_cpu);
    set_changes(&mut results);
    let gates = check_gates(&results, &cfg.gates, &cfg.gate_config);
    let partial = match (&failure, stop.load(Ordering::Relaxed)) {
        (Some(e), _) => Some(format!("failed: {e}")),
        (None, true) => Some("interrupted (SIGINT/SIGTERM): fewer rounds than planned".into()),
        _ => None,
    };
    let report = AblationReport {
        header: Header::new(ABLATION_SCHEMA, started, host_info(online), partial),
        rt_cpus: plan.rt.clone(),
        nrt_cpus: plan.nrt.clone(),
        load: ev.load.name().into(),
        interval_ns: probe.interval_ns,
        rounds_planned: rounds,
        rounds_done,
        segment_ns: segment.as_nanos() as u64,
        configs: results,
        gates,
    };
    Ok(AblateOutcome { report, failure })
}

/// Each configuration's figures over the rounds.
fn config_results(
    configs: &[Config],
    acc: &[(Hist, u64, HostSplit)],
    per_round: Vec<Vec<rtmgr_core::stats::HistData>>,
    rt_cpu: u32,
) -> Vec<AblationConfig> {
    configs
        .iter()
        .zip(acc)
        .zip(per_round)
        .map(|((c, (h, missed, split)), rounds)| AblationConfig {
            name: name(c).into(),
            knobs: c.as_ref().map(|s| s.knobs.clone()).unwrap_or_default(),
            balancer: c.as_ref().is_some_and(|s| s.balancer),
            result: probe_result(rt_cpu, h, *missed, split),
            missed: *missed,
            p99_ci_ns: quantile_ci(h, 990_000),
            p999_ci_ns: quantile_ci(h, 999_000),
            rounds,
            change: None,
        })
        .collect()
}

/// What one step's segment runs with.
struct StepRun<'a> {
    host: &'a Host,
    plan: &'a PartitionPlan,
    opts: &'a ApplyOptions,
    probe: &'a ProbeConfig,
    stop: &'a Arc<AtomicBool>,
    load: &'a LoadPlan,
}

impl StepRun<'_> {
    /// Apply the step's partition (and balancer), run the segment, reset
    /// them: the merged histogram, the missed count and the host split.
    fn measure(
        &self,
        c: &Config,
        progress: &mut dyn FnMut(&Progress),
    ) -> Result<(Hist, u64, HostSplit)> {
        let host = self.host;
        let step_plan = c.as_ref().map(|s| PartitionPlan {
            knobs: s.knobs.clone(),
            ..self.plan.clone()
        });
        let guard = match &step_plan {
            Some(p) => Some(
                PartitionGuard::apply(host, p, self.opts).context("apply the step's partition")?,
            ),
            None => None,
        };
        let applied = guard.as_ref().map(|g| g.applied());
        let balancer = match (c, applied) {
            (Some(s), Some(a)) if s.balancer => Some(BackgroundBalancer::start_fresh(host, a)),
            _ => None,
        };
        let seg = run_segment(
            host,
            SegmentPlan {
                probe: self.probe,
                load: Some(self.load),
                applied,
                prepare: applied.map(|a| rt_prepare(host, a)),
                trace: None,
                guard_feed: None,
            },
            self.stop,
            &mut |p, _| progress(p),
        );
        let balanced = balancer.map(|b| b.finish().0);
        if let Some(g) = guard {
            g.reset().context("reset the step's partition")?;
        }
        let seg = seg?;
        if let Some(Err(e)) = balanced {
            return Err(Error::from(e).context("live balancer"));
        }
        let (h, m) = merged(&seg.threads);
        Ok((h, m, HostSplit::of(&seg.threads)))
    }
}
