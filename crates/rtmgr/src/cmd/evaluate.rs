//! `rtmgr evaluate` (issue #3 item 5): the main job. The RT CPU's wake-up latency
//! under the `all` load (ARTiS §3.1) in four configurations, interleaved in
//! rounds so drift hits them alike (DESIGN.md "Measuring"): idle (no load),
//! stock (load everywhere), shield (partition, load on NRT CPUs only) and rtmgr
//! (partition, plus the load as SCHED_IDLE guests on the RT CPU, ARTiS §2.2).
//! Prints an ARTiS-Table-1-style table with ratios and verdicts, writes
//! report.json and report.html, and always resets the partition it applied.

use super::measure::common::*;
use super::{bad_input, Outcome};
use anyhow::{Context, Result};
use rtmgr_core::load::{LoadKind, StressorMetrics};
use rtmgr_core::partition::{validate, PartitionConfig, PartitionPlan};
use rtmgr_core::plot::{histogram_svg, percentile_svg, XScale};
use rtmgr_core::report::{
    disturbance_text, evaluate_table, evaluate_verdicts, Body, ConfigResult, Disturbance,
    EvaluateRun, PolicySpec, ProbeMode, Report,
};
use rtmgr_core::stats::Hist;
use rtmgr_core::CpuSet;
use rtmgr_linux::measure::probe::{max_fifo_priority, ProbeConfig};
use rtmgr_linux::measure::{disturb, unix_now_s, DmaLatencyGuard};
use rtmgr_linux::partition::{self, ApplyOptions, PartitionGuard, Role};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct EvaluateArgs {
    /// About 15 s instead of about 60 s (CI, smoke tests).
    #[arg(long)]
    pub quick: bool,
    /// Total measuring time, spread over all rounds and configurations
    /// (default 48s, or 12s with --quick; set-up adds a few seconds).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Rounds (each runs every configuration once; default 4, or 2 with --quick).
    #[arg(long)]
    pub rounds: Option<u32>,
    /// The RT CPU (default: the last online CPU).
    #[arg(long)]
    pub rt_cpu: Option<u32>,
    /// The load (default: all five ARTiS loads).
    #[arg(long, default_value = "all")]
    pub load: LoadKind,
    /// Probe release period.
    #[arg(long, default_value = "250us", value_parser = parse_duration)]
    pub interval: Duration,
    /// Directory for report.json, report.html and the SVG plots.
    #[arg(long, default_value = "rtmgr-evaluate")]
    pub out: PathBuf,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Config {
    Idle,
    Stock,
    Shield,
    Rtmgr,
    /// Issue 6: partition + the live balancer (`rtmgr balance`).
    Balanced,
}

const CONFIGS: [Config; 5] = [
    Config::Idle,
    Config::Stock,
    Config::Shield,
    Config::Rtmgr,
    Config::Balanced,
];

impl Config {
    fn name(self) -> &'static str {
        match self {
            Config::Idle => "idle",
            Config::Stock => "stock",
            Config::Shield => "shield",
            Config::Rtmgr => "rtmgr",
            Config::Balanced => "balanced",
        }
    }
    fn description(self) -> &'static str {
        match self {
            Config::Idle => "no partition, no load: the machine's floor",
            Config::Stock => "no partition, load on every CPU",
            Config::Shield => "partition applied, load confined to the NRT CPUs (cset/RedHawk-style shielding)",
            Config::Rtmgr => "partition applied, load on the NRT CPUs and as SCHED_IDLE guests on the RT CPU (ARTiS)",
            Config::Balanced => "partition applied, load on the NRT CPUs, the live balancer (`rtmgr balance`) lending the RT CPU to it under its latency guard",
        }
    }
    fn partitioned(self) -> bool {
        matches!(self, Config::Shield | Config::Rtmgr | Config::Balanced)
    }
}

#[derive(Default)]
struct Acc {
    hist: Hist,
    missed: u64,
    metrics: Vec<Vec<StressorMetrics>>,
    segments: u32,
    disturbance: Disturbance,
}

/// Per-segment average of bogo-ops/s per stressor.
fn mean_metrics(parts: &[Vec<StressorMetrics>]) -> Vec<StressorMetrics> {
    let mut sum = rtmgr_core::load::merge_metrics(parts);
    for m in &mut sum {
        let k = parts
            .iter()
            .filter(|p| p.iter().any(|x| x.stressor == m.stressor))
            .count()
            .max(1);
        m.bogo_ops_per_s /= k as f64;
    }
    sum
}

fn load_plan(c: Config, kind: LoadKind, online: &CpuSet, plan: &PartitionPlan) -> Option<LoadPlan> {
    let part = |cpus: &CpuSet, idle: bool, enter: Option<Role>| LoadPart {
        cpus: cpus.clone(),
        sched_idle: idle,
        enter,
    };
    let parts = match c {
        Config::Idle => return None,
        Config::Stock => vec![part(online, false, None)],
        Config::Shield | Config::Balanced => vec![part(&plan.nrt, false, Some(Role::Nrt))],
        Config::Rtmgr => vec![
            part(&plan.nrt, false, Some(Role::Nrt)),
            part(&plan.rt, true, Some(Role::Rt)),
        ],
    };
    Some(LoadPlan { kind, parts })
}

pub fn run(args: EvaluateArgs) -> Result<Outcome> {
    let host = crate::cmd::host();
    crate::cmd::require_root(&host, "rtmgr evaluate")?;
    rtmgr_linux::measure::load::stress_ng().map_err(measure_err)?;
    let online = rtmgr_linux::cpus::online(&host)?;
    if online.len() < 2 {
        return bad_input(format!(
            "rtmgr evaluate needs at least 2 online CPUs (one RT, one NRT); online: {online}"
        ));
    }
    let rt_cpu = args
        .rt_cpu
        .unwrap_or_else(|| online.iter().last().expect("non-empty"));
    let plan = validate(
        &PartitionConfig::default(),
        Some(&CpuSet::single(rt_cpu)),
        &online,
    )
    .map_err(|e| super::BadInput(e.to_string()))?;
    let rounds = args.rounds.unwrap_or(if args.quick { 2 } else { 4 });
    let total = args
        .duration
        .unwrap_or(Duration::from_secs(if args.quick { 12 } else { 48 }));
    if rounds == 0 {
        return bad_input("--rounds must be at least 1");
    }
    let segment = total / (rounds * CONFIGS.len() as u32);
    if segment < Duration::from_millis(100) || args.interval.is_zero() || args.interval > segment {
        return bad_input(format!(
            "--duration {total:?} over {rounds} rounds gives {segment:?} per configuration: too short for --interval {:?}",
            args.interval
        ));
    }
    let journal = PathBuf::from(rtmgr_linux::journal::DEFAULT_JOURNAL);
    let _lock = crate::cmd::machine_lock(&host)?;
    if let Some(a) = partition::current(&host, &journal)? {
        return bad_input(format!(
            "a partition is already applied (RT CPUs {}): evaluate applies and resets its own; run `rtmgr partition reset` first",
            a.plan.rt
        ));
    }
    // Also refuses leftover rtmgr cgroups (a partition applied with another journal).
    if let Err(e) = partition::preflight(
        &host,
        &ApplyOptions {
            journal: journal.clone(),
            replace: false,
        },
    ) {
        return bad_input(format!("cannot apply evaluate's partition: {e}"));
    }
    let stop = stop_flag()?;
    let _orchestrator = Orchestrator::enter(&plan.rt, &online);
    let mlocked = lock_memory();
    let dma = DmaLatencyGuard::hold();
    let started = unix_now_s();
    let probe_cpus = CpuSet::single(rt_cpu);
    let probe = ProbeConfig {
        mode: ProbeMode::Absolute,
        cpus: probe_cpus.clone(),
        interval_ns: args.interval.as_nanos() as u64,
        duration_ns: Some(segment.as_nanos() as u64),
        loops: None,
        policy: PolicySpec::Fifo {
            priority: max_fifo_priority(),
        },
        parallel: 1,
    };
    eprintln!(
        "evaluate: RT CPU {rt_cpu}, NRT CPUs {}, {} load, {rounds} rounds x {} configurations x {segment:?}, probe every {:?}",
        plan.nrt,
        args.load,
        CONFIGS.len(),
        args.interval
    );
    let opts = ApplyOptions {
        journal: journal.clone(),
        replace: false,
    };
    let mut acc: Vec<Acc> = CONFIGS.iter().map(|_| Acc::default()).collect();
    let pb = progress_bar(total);
    let t0 = Instant::now();
    let mut rounds_done = 0;
    let mut failure: Option<anyhow::Error> = None;
    'rounds: for r in 0..rounds {
        // Alternate the order so no configuration always runs first or last.
        let mut order: Vec<Config> = CONFIGS.to_vec();
        if r % 2 == 1 {
            order.reverse();
        }
        let mut guard: Option<PartitionGuard> = None;
        for c in order {
            if stop.load(Ordering::Relaxed) {
                break 'rounds;
            }
            if c.partitioned() && guard.is_none() {
                pb.set_message(format!("round {} applying partition", r + 1));
                let t = Instant::now();
                let applied = PartitionGuard::apply(&host, &plan, &opts);
                tracing::debug!("partition apply took {:?}", t.elapsed());
                match applied {
                    Ok(g) => guard = Some(g),
                    Err(e) => {
                        failure = Some(anyhow::Error::new(e).context("apply the partition"));
                        break 'rounds;
                    }
                }
            }
            if !c.partitioned() {
                if let Some(g) = guard.take() {
                    if let Err(e) = g.reset() {
                        failure = Some(anyhow::Error::new(e).context("reset the partition"));
                        break 'rounds;
                    }
                }
            }
            let applied = guard.as_ref().map(|g| g.applied());
            let prepare = applied.map(|a| rt_prepare(&host, a));
            let load = load_plan(c, args.load, &online, &plan);
            let i = CONFIGS.iter().position(|x| *x == c).expect("listed");
            let seg_start = Instant::now();
            // Issue 6: the live balancer runs during the "balanced" segment.
            let balancer = match (c, applied) {
                (Config::Balanced, Some(a)) => {
                    Some(super::balance::BackgroundBalancer::start(&host, a))
                }
                _ => None,
            };
            let seg = run_segment(
                &host,
                &probe,
                load.as_ref(),
                applied,
                prepare,
                &stop,
                &mut |p, _| {
                    pb.set_position(t0.elapsed().as_millis() as u64);
                    pb.set_message(format!(
                        "round {}/{rounds} {:6} {}",
                        r + 1,
                        c.name(),
                        progress_msg(p)
                    ));
                },
            );
            tracing::debug!(
                "round {} {}: segment took {:?}",
                r + 1,
                c.name(),
                seg_start.elapsed()
            );
            let seg = match (seg, balancer.map(|b| b.finish())) {
                (Ok(_), Some(Err(e))) => Err(e.context("live balancer")),
                (seg, _) => seg,
            };
            match seg {
                Ok(seg) => {
                    let a = &mut acc[i];
                    let (h, m) = merged(&seg.threads);
                    a.hist.merge(&h);
                    a.missed += m;
                    if !seg.metrics.is_empty() {
                        a.metrics.push(seg.metrics);
                    }
                    if !seg.interrupted {
                        a.segments += 1;
                    }
                    disturb::accumulate(&mut a.disturbance, &seg.disturbance);
                }
                Err(e) => {
                    failure = Some(e.context(format!("round {} {}", r + 1, c.name())));
                    break 'rounds;
                }
            }
        }
        if let Some(g) = guard.take() {
            if let Err(e) = g.reset() {
                failure = Some(anyhow::Error::new(e).context("reset the partition"));
                break 'rounds;
            }
        }
        if !stop.load(Ordering::Relaxed) {
            rounds_done += 1;
        }
    }
    // Any guard still alive was dropped (reset) when the loop ended.
    pb.finish_and_clear();
    let configs: Vec<ConfigResult> = CONFIGS
        .iter()
        .zip(&acc)
        .map(|(c, a)| ConfigResult {
            name: c.name().into(),
            description: c.description().into(),
            result: cpu_result(rt_cpu, &a.hist, a.missed),
            throughput: mean_metrics(&a.metrics),
            segments: a.segments,
            disturbance: a.disturbance.clone(),
        })
        .collect();
    let mut run = EvaluateRun {
        rt_cpus: plan.rt.clone(),
        nrt_cpus: plan.nrt.clone(),
        load: args.load.name().into(),
        interval_ns: probe.interval_ns,
        rounds_planned: rounds,
        rounds_done,
        segment_ns: segment.as_nanos() as u64,
        latency_bound_us: plan.latency_bound_us,
        configs,
        verdicts: Vec::new(),
    };
    run.verdicts = evaluate_verdicts(&run);
    let partial = if let Some(e) = &failure {
        Some(format!("failed: {e:#}"))
    } else if stop.load(Ordering::Relaxed) {
        Some("interrupted (SIGINT/SIGTERM): fewer rounds than planned".to_string())
    } else {
        None
    };
    print_run(&run, mlocked, dma.held());
    let rep = report(Body::Evaluate(run), &online, started, partial.clone());
    write_outputs(&args.out, &rep)?;
    if let Some(e) = failure {
        return Err(e.context("evaluate stopped early (partial report written)"));
    }
    if let Some(p) = partial {
        eprintln!("rtmgr: {p}; partial report written");
        return Ok(Outcome::Code(130));
    }
    Ok(Outcome::Ok)
}

fn print_run(run: &EvaluateRun, mlocked: bool, dma: bool) {
    println!(
        "RT CPU {} latency under the {} load ({} of {} rounds, {:.1} s per configuration per round, probe every {} µs{}{}):\n",
        run.rt_cpus,
        run.load,
        run.rounds_done,
        run.rounds_planned,
        run.segment_ns as f64 / 1e9,
        run.interval_ns / 1000,
        if mlocked { "" } else { ", memory NOT locked" },
        if dma { "" } else { ", cpu_dma_latency unavailable" },
    );
    print!("{}", evaluate_table(run));
    println!();
    for v in &run.verdicts {
        println!("- {v}");
    }
    println!();
    for c in &run.configs {
        let d = disturbance_text(&c.disturbance);
        if !d.is_empty() {
            println!("{} disturbances:", c.name);
            for l in d.lines() {
                println!("  {l}");
            }
        }
    }
}

fn series(rep: &Report) -> Vec<(String, rtmgr_core::stats::HistData)> {
    match &rep.body {
        Body::Evaluate(e) => e
            .configs
            .iter()
            .filter(|c| c.result.hist.n > 0)
            .map(|c| (c.name.clone(), c.result.hist.clone()))
            .collect(),
        _ => Vec::new(),
    }
}

fn write_outputs(dir: &Path, rep: &Report) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    write_json(&dir.join("report.json"), rep)?;
    let s = series(rep);
    let named: Vec<(&str, &rtmgr_core::stats::HistData)> =
        s.iter().map(|(n, h)| (n.as_str(), h)).collect();
    let hist = histogram_svg(
        "RT CPU wake-up latency per configuration",
        &named,
        XScale::Log,
    );
    let pct = percentile_svg("RT CPU wake-up latency percentiles", &named);
    write_file(&dir.join("latency-histogram.svg"), &hist)?;
    write_file(&dir.join("latency-percentiles.svg"), &pct)?;
    let Body::Evaluate(e) = &rep.body else {
        unreachable!("evaluate report")
    };
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    let verdicts: String = e
        .verdicts
        .iter()
        .map(|v| format!("<li>{}</li>", esc(v)))
        .collect();
    let configs: String = e
        .configs
        .iter()
        .map(|c| format!("<li><b>{}</b>: {}</li>", c.name, esc(&c.description)))
        .collect();
    let html = format!(
        "<!doctype html><html><head><meta charset=\"utf-8\"><title>rtmgr evaluate</title></head><body>\
         <h1>rtmgr evaluate</h1><p>{host} ({kernel}){partial}</p><ul>{configs}</ul><pre>{table}</pre><ul>{verdicts}</ul>\
         {hist}{pct}<p>Data: <a href=\"report.json\">report.json</a> (schema {schema}).</p></body></html>\n",
        host = esc(&rep.host.hostname),
        kernel = esc(&rep.host.kernel),
        partial = if rep.partial {
            format!(" — <b>PARTIAL</b>: {}", esc(rep.partial_reason.as_deref().unwrap_or("")))
        } else {
            String::new()
        },
        table = esc(&evaluate_table(e)),
        schema = rep.schema,
    );
    write_file(&dir.join("report.html"), &html)?;
    eprintln!(
        "report: {}/report.json, {}/report.html",
        dir.display(),
        dir.display()
    );
    Ok(())
}
