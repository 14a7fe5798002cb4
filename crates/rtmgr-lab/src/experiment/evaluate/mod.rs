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

mod configs;
mod host_prior;

use super::long_run::{rounds_for, write_checkpoint, CHECKPOINT_EVERY};
use super::session::{lock_memory, report, stop_flag, STOP_SIGNALS};
use super::{bad_input, progress_line, Context, Error, Reporter, Result};
use crate::load::{ComponentMetrics, LoadKind};
use crate::measure::host_split::HostSplit;
use crate::measure::load::{EngineChoice, LoadProgram};
use crate::measure::probe::{max_fifo_priority, ProbeConfig};
use crate::measure::segment::{
    merged, merged_wakeups, probe_result, rt_prepare, run_segment, Orchestrator, SegmentPlan,
};
use crate::measure::{disturb, unix_now_s, DmaLatencyGuard};
use crate::report::{
    evaluate_intervals, evaluate_verdicts, BalancerSummary, Body, ConfigResult, Disturbance,
    EvaluateRun, PolicySpec, ProbeMode, Report, RoundFigures,
};
use crate::trace::{tail_of_run, Attribution};
use configs::{Config, CONFIGS};
use host_prior::host_preemption_for;
use rtmgr_core::balance::Balancer;
use rtmgr_core::host_preemption::HostPreemption;
use rtmgr_core::partition::{validate, KnobId, PartitionConfig, PartitionPlan, PreemptMode};
use rtmgr_core::stats::Hist;
use rtmgr_core::CpuSet;
use rtmgr_linux::balance::background::{background_config, BackgroundBalancer};
use rtmgr_linux::balance::guard::GuardFeed;
use rtmgr_linux::balance::lending_prior;
use rtmgr_linux::journal::DEFAULT_JOURNAL;
use rtmgr_linux::machine_access::{machine_lock, require_root};
use rtmgr_linux::partition::{self, ApplyOptions, PartitionGuard};
use rtmgr_linux::Host;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct EvaluateConfig {
    /// Total measuring time, spread over all rounds and configurations.
    pub total: Duration,
    /// Rounds; each runs every configuration once.
    pub rounds: u32,
    /// The RT CPU (default: the one with the least unmovable work, `--rt-cpus auto`).
    pub rt_cpu: Option<u32>,
    pub load: LoadKind,
    pub load_engine: EngineChoice,
    /// Probe release period.
    pub interval: Duration,
    /// Explain each configuration's tail with tracefs (see `LatencyConfig::trace`).
    pub trace: Option<Option<u64>>,
    /// Long runs: where to write the report so far, at most every
    /// `CHECKPOINT_EVERY` (a valid report marked partial), so a crash loses
    /// at most that much.
    pub checkpoint: Option<PathBuf>,
    /// Measure the shield twice per round, the A/A control (`--no-control`: not).
    pub control: bool,
}

impl EvaluateConfig {
    /// The defaults: 36 s over 8 rounds, or 8 s over 4 with `quick` — many
    /// short rounds, the units the intervals resample (issue 28); with the
    /// control's sixth segment and each segment's load start the run takes
    /// about 60 s (about 25 s with `quick`).
    pub fn new(quick: bool, load_engine: EngineChoice) -> Self {
        EvaluateConfig {
            total: Duration::from_secs(if quick { 8 } else { 36 }),
            rounds: if quick { 4 } else { 8 },
            rt_cpu: None,
            load: LoadKind::All,
            load_engine,
            interval: Duration::from_micros(250),
            trace: None,
            checkpoint: None,
            control: true,
        }
    }

    /// `--ablate`'s defaults: 48 s over 4 rounds, or 12 s over 2 with
    /// `quick` (its steps' partitions are applied per segment, and it has no
    /// bootstrap intervals yet: more rounds would only cost set-up time).
    pub fn ablation(quick: bool, load_engine: EngineChoice) -> Self {
        EvaluateConfig {
            total: Duration::from_secs(if quick { 12 } else { 48 }),
            rounds: if quick { 2 } else { 4 },
            ..Self::new(quick, load_engine)
        }
    }
}

/// One configuration's data over the rounds.
#[derive(Default)]
struct Acc {
    hist: Hist,
    missed: u64,
    metrics: Vec<Vec<ComponentMetrics>>,
    segments: u32,
    disturbance: Disturbance,
    /// The wake-ups alone; late samples the tracer explained; events it lost.
    wakeups: Hist,
    attributions: Vec<Attribution>,
    events_lost: u64,
    /// What the live balancer did over the segments ("balanced").
    balancer: Option<BalancerSummary>,
    /// The samples the host did not stall, and what it took.
    host: HostSplit,
    /// Each round's figures, for the intervals.
    rounds: Vec<RoundFigures>,
}

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
    require_root(host, "rtmgr evaluate")?;
    let program = cfg.load_engine.resolve()?;
    let online = rtmgr_linux::cpus::online(host)?;
    if online.len() < 2 {
        return bad_input(format!(
            "rtmgr evaluate needs at least 2 online CPUs (one RT, one NRT); online: {online}"
        ));
    }
    let (rt_cpu, rt_choice) = match cfg.rt_cpu {
        Some(c) => (c, None),
        None => {
            let window = rtmgr_linux::unmovable::SAMPLE_WINDOW;
            let c = rtmgr_linux::unmovable::choose_rt_cpus(host, 1, window)
                .map_err(|e| Error::Failed(format!("choosing the RT CPU: {e}")))?;
            (c.rt.first().expect("one CPU"), Some(c.reason))
        }
    };
    let plan = validate(
        &PartitionConfig::default(),
        Some(&CpuSet::single(rt_cpu)),
        &online,
    )
    .or_else(|e| bad_input(e.to_string()))?;
    let rounds = cfg.rounds;
    if rounds == 0 {
        return bad_input("--rounds must be at least 1");
    }
    // ARTiS Table 1's "Linux with preemption" where the kernel can switch to it.
    let mut configs = CONFIGS.to_vec();
    if cfg.control {
        configs.push(Config::ShieldTwin);
    }
    let mut skipped = Vec::new();
    match partition::preempt_switchable(host, PreemptMode::Full) {
        Ok(()) => configs.insert(2, Config::Preempt),
        Err(why) => skipped.push(format!(
            "preempt (ARTiS Table 1's Linux with preemption): this kernel cannot switch its preemption model at run time ({why})"
        )),
    }
    let preempt_plan = PartitionPlan {
        knobs: vec![KnobId::Preempt],
        preempt: Some(PreemptMode::Full),
        ..plan.clone()
    };
    let total = cfg.total;
    let rounds = rounds_for(rounds, total, configs.len());
    let segment = total / (rounds * configs.len() as u32);
    if segment < Duration::from_millis(100) || cfg.interval.is_zero() || cfg.interval > segment {
        return bad_input(format!(
            "--duration {total:?} over {rounds} rounds gives {segment:?} per configuration: too short for --interval {:?}",
            cfg.interval
        ));
    }
    // What lending may cost here, before the machine is taken for the rounds.
    let host_test = host_preemption_for(host, rt_cpu, rep)?;
    let journal = PathBuf::from(DEFAULT_JOURNAL);
    let _lock = machine_lock(host)?;
    if let Some(a) = partition::current(host, &journal)? {
        return bad_input(format!(
            "a partition is already applied (RT CPUs {}): evaluate applies and resets its own; run `rtmgr partition reset` first",
            a.plan.rt
        ));
    }
    let opts = ApplyOptions {
        journal,
        replace: false,
    };
    // Also refuses leftover rtmgr cgroups (a partition applied with another journal).
    if let Err(e) = partition::preflight(host, &opts) {
        return bad_input(format!("cannot apply evaluate's partition: {e}"));
    }
    let stop = stop_flag(&STOP_SIGNALS)?;
    let _orchestrator = Orchestrator::enter(&plan.rt, &online);
    let mlocked = lock_memory();
    let dma = DmaLatencyGuard::hold();
    let started = unix_now_s();
    let probe = ProbeConfig {
        mode: ProbeMode::Absolute,
        cpus: CpuSet::single(rt_cpu),
        interval_ns: cfg.interval.as_nanos() as u64,
        duration_ns: Some(segment.as_nanos() as u64),
        loops: None,
        policy: PolicySpec::Fifo {
            priority: max_fifo_priority(),
        },
        parallel: 1,
    };
    rep.note(&format!(
        "evaluate: RT CPU {rt_cpu}, NRT CPUs {}, {} load ({} engine), {rounds} rounds x {} configurations x {segment:?}, probe every {:?}",
        plan.nrt,
        cfg.load,
        program.engine(),
        configs.len(),
        cfg.interval
    ));

    let mut acc: Vec<Acc> = configs.iter().map(|_| Acc::default()).collect();
    let shape = Shape {
        cfg,
        configs: &configs,
        rt_cpu,
        plan: &plan,
        program: &program,
        interval_ns: probe.interval_ns,
        rounds,
        segment,
        rt_choice: &rt_choice,
        skipped: &skipped,
        online: &online,
        started,
        host_test: &host_test,
    };
    let build =
        |acc: &[Acc], done: u32, partial: Option<String>| build_report(&shape, acc, done, partial);
    let mut last_checkpoint = Instant::now();
    let t0 = Instant::now();
    let mut rounds_done = 0;
    let mut failure: Option<Error> = None;
    // The balancer's policy lives across the "balanced" segments (its
    // lending controller, back-offs and baselines), and evaluate's probe is
    // its latency guard: no second SCHED_FIFO thread on the RT CPU.
    let feed = GuardFeed::new(&plan.rt);
    let mut policy: Option<Balancer> = None;
    let stopped = || stop.load(std::sync::atomic::Ordering::Relaxed);
    'rounds: for r in 0..rounds {
        // Alternate the order so no configuration always runs first or last.
        let mut order: Vec<Config> = configs.clone();
        if r % 2 == 1 {
            order.reverse();
        }
        let mut guard: Option<PartitionGuard> = None;
        for c in order {
            if stopped() {
                break 'rounds;
            }
            if c.partitioned() && guard.is_none() {
                rep.progress(t0.elapsed(), &format!("round {} applying partition", r + 1));
                let t = Instant::now();
                let applied = PartitionGuard::apply(host, &plan, &opts);
                tracing::debug!("partition apply took {:?}", t.elapsed());
                match applied.context("apply the partition") {
                    Ok(g) => guard = Some(g),
                    Err(e) => {
                        failure = Some(e);
                        break 'rounds;
                    }
                }
            }
            if !c.partitioned() {
                if let Some(g) = guard.take() {
                    if let Err(e) = g.reset().context("reset the partition") {
                        failure = Some(e);
                        break 'rounds;
                    }
                }
            }
            let applied = guard.as_ref().map(|g| g.applied());
            let prepare = applied.map(|a| rt_prepare(host, a));
            let load = c.load_plan(cfg.load, &program, &online, &plan);
            let i = configs.iter().position(|x| *x == c).expect("listed");
            // The preemption model is switched for this segment only.
            let preempt = match c {
                Config::Preempt => match PartitionGuard::apply(host, &preempt_plan, &opts) {
                    Ok(g) if g.report().knobs.iter().all(|k| k.available) => Some(g),
                    Ok(g) => {
                        let why = g.report().knobs.iter().flat_map(|k| k.lines.clone());
                        failure = Some(Error::Failed(format!(
                            "the kernel offered full preemption but refused it: {}",
                            why.collect::<Vec<_>>().join("; ")
                        )));
                        break 'rounds;
                    }
                    Err(e) => {
                        failure = Some(Error::from(e).context("switch to full preemption"));
                        break 'rounds;
                    }
                },
                _ => None,
            };
            let seg_start = Instant::now();
            // The live balancer runs during the "balanced" segment.
            let balancer = match (c, applied) {
                (Config::Balanced, Some(a)) => {
                    let mut live = background_config(a, Some(feed.clone()));
                    // The host test is the controller's prior (the first run only:
                    // the policy's memory carries it on).
                    live.read_host_cache = false;
                    live.host_prior = match &policy {
                        None => host_test.as_ref().map(lending_prior),
                        Some(_) => None,
                    };
                    let p = policy
                        .take()
                        .unwrap_or_else(|| Balancer::new(live.policy.clone()));
                    Some(BackgroundBalancer::start(host, a, live, p))
                }
                _ => None,
            };
            let plan = SegmentPlan {
                probe: &probe,
                load: load.as_ref(),
                applied,
                prepare,
                trace: cfg.trace,
                guard_feed: balancer.is_some().then(|| feed.clone()),
            };
            let seg = run_segment(host, plan, &stop, &mut |p, _| {
                let msg = format!(
                    "round {}/{rounds} {:6} {}",
                    r + 1,
                    c.name(),
                    progress_line(p)
                );
                rep.progress(t0.elapsed(), &msg)
            });
            tracing::debug!(
                "round {} {}: segment took {:?}",
                r + 1,
                c.name(),
                seg_start.elapsed()
            );
            if let Some(Err(e)) = preempt.map(|g| g.reset()) {
                failure = Some(Error::from(e).context("restore the preemption model"));
                break 'rounds;
            }
            let mut live = None;
            if let Some(b) = balancer {
                let (r, p) = b.finish();
                policy = p;
                live = Some(r);
            }
            let seg = match (seg, live) {
                (Ok(_), Some(Err(e))) => Err(Error::from(e).context("live balancer")),
                (Ok(seg), Some(Ok(rep))) => {
                    let now = rtmgr_sys::time::mono_ns();
                    let sum = acc[i].balancer.get_or_insert_with(BalancerSummary::default);
                    sum.add_run(&rep, policy.as_ref(), now);
                    Ok(seg)
                }
                (seg, _) => seg.map_err(Error::from),
            };
            match seg {
                Ok(seg) => {
                    let a = &mut acc[i];
                    let (h, m) = merged(&seg.threads);
                    let split = HostSplit::of(&seg.threads);
                    if !seg.interrupted {
                        a.rounds.push(RoundFigures::of(
                            r + 1,
                            &h,
                            m,
                            Some((&split.guest, split.guest_missed)),
                            seg.metrics.clone(),
                        ));
                    }
                    a.hist.merge(&h);
                    a.wakeups.merge(&merged_wakeups(&seg.threads));
                    a.missed += m;
                    a.host.merge(&split);
                    if !seg.metrics.is_empty() {
                        a.metrics.push(seg.metrics);
                    }
                    if !seg.interrupted {
                        a.segments += 1;
                    }
                    if let Some(t) = seg.tail {
                        a.attributions.extend(t.attributions);
                        a.events_lost += t.stats.lost;
                    }
                    disturb::accumulate(&mut a.disturbance, &seg.disturbance);
                    if let Some(path) = &cfg.checkpoint {
                        if last_checkpoint.elapsed() >= CHECKPOINT_EVERY {
                            last_checkpoint = Instant::now();
                            let why = format!(
                                "in progress: round {} of {rounds} (written every minute)",
                                r + 1
                            );
                            if let Err(e) =
                                write_checkpoint(path, &build(&acc, rounds_done, Some(why)))
                            {
                                rep.note(&format!(
                                    "rtmgr: writing the report so far to {}: {e}",
                                    path.display()
                                ));
                            }
                        }
                    }
                }
                Err(e) => {
                    failure = Some(e.context(format!("round {} {}", r + 1, c.name())));
                    break 'rounds;
                }
            }
        }
        if let Some(g) = guard.take() {
            if let Err(e) = g.reset().context("reset the partition") {
                failure = Some(e);
                break 'rounds;
            }
        }
        if !stopped() {
            rounds_done += 1;
        }
    }
    // Any guard still alive was dropped (reset) when the loop ended.
    let partial = if let Some(e) = &failure {
        Some(format!("failed: {e}"))
    } else if stopped() {
        Some("interrupted (SIGINT/SIGTERM): fewer rounds than planned".to_string())
    } else {
        None
    };
    Ok(EvaluateOutcome {
        report: build(&acc, rounds_done, partial),
        mlocked,
        dma_held: dma.held(),
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
