//! `rtmgr measure …` (issue #3; DESIGN.md "Measuring"): latency (McKenney §2.1,
//! §3; ARTiS §3.1 loads), execution-time variation (ARTiS §3.2), periodicity
//! (DROPS §5.3), and the side-by-side cross-check with cyclictest.

pub mod common;

use super::{bad_input, Outcome};
use anyhow::Result;
use common::*;
use rtmgr_core::load::LoadKind;
use rtmgr_core::plot::{histogram_svg, percentile_svg, series_svg, XScale};
use rtmgr_core::report::{
    disturbance_text, summary_table, Body, CompareRun, ExecRun, PeriodicityRun, PolicySpec,
    ProbeMode, ProbeSettings, Report, ToolResult,
};
use rtmgr_core::stats::Hist;
use rtmgr_core::CpuSet;
use rtmgr_linux::measure::probe::{max_fifo_priority, ProbeConfig};
use rtmgr_linux::measure::{cyclictest, exec, periodicity, unix_now_s, DmaLatencyGuard};
use rtmgr_linux::partition::Applied;
use rtmgr_linux::Host;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(clap::Subcommand)]
pub enum MeasureCmd {
    /// Wake-up latency of a periodic SCHED_FIFO task per CPU, optionally under load.
    Latency(LatencyArgs),
    /// Execution-time variation of a routine of integer divisions (ARTiS §3.2).
    Exec(ExecArgs),
    /// Periodicity of two tasks alternately woken by a 100 µs timer task (DROPS §5.3).
    Periodicity(PeriodicityArgs),
    /// Budget enforcement overhead and precision, soft and hard (budget-based RTAI §4).
    Budget(super::budget::BudgetArgs),
}

#[derive(clap::Args, Clone)]
pub struct LoadArgs {
    /// Load while measuring: compute, io, network, locks, cache or all (stress-ng).
    #[arg(long)]
    pub load: Option<LoadKind>,
    /// CPUs for the load (default: the online CPUs not measured, or all if none).
    #[arg(long, value_parser = parse_cpus)]
    pub load_cpus: Option<CpuSet>,
}

#[derive(clap::Args, Clone)]
pub struct OutArgs {
    /// Where to write the JSON report (schema: docs/report-schema.md).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Where to write the SVG plot(s); extra plots get a suffix.
    #[arg(long)]
    pub svg: Option<PathBuf>,
    /// Also print the JSON report on stdout after the table.
    #[arg(long)]
    pub print_json: bool,
}

#[derive(clap::Args)]
pub struct LatencyArgs {
    /// CPUs to measure, one thread each (default: the last online CPU).
    #[arg(long, value_parser = parse_cpus)]
    pub cpus: Option<CpuSet>,
    /// Release period: 100us, 1ms, …
    #[arg(long, default_value = "1ms", value_parser = parse_duration)]
    pub interval: Duration,
    /// How long to measure (ignored with --loops).
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub duration: Duration,
    /// Number of releases per thread instead of a duration.
    #[arg(long)]
    pub loops: Option<u64>,
    /// fifo, rr or deadline.
    #[arg(long, default_value = "fifo")]
    pub policy: String,
    /// Real-time priority for fifo/rr (default: the highest).
    #[arg(long)]
    pub priority: Option<u8>,
    /// SCHED_DEADLINE runtime (period = --interval).
    #[arg(long, default_value = "100us", value_parser = parse_duration)]
    pub dl_runtime: Duration,
    /// McKenney Fig. 1: sleep for the interval (relative) and record signed jitter.
    #[arg(long)]
    pub relative: bool,
    /// Measuring threads per CPU (McKenney Fig. 8).
    #[arg(long, default_value_t = 1)]
    pub parallel: u32,
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub out: OutArgs,
    /// Alternate rtmgr's probe with cyclictest under the same load and compare.
    #[arg(long)]
    pub compare_cyclictest: bool,
    /// Rounds for --compare-cyclictest (each: one probe and one cyclictest segment).
    #[arg(long, default_value_t = 4)]
    pub rounds: u32,
}

#[derive(clap::Args)]
pub struct ExecArgs {
    /// CPU to run the routine on (default: the last online CPU).
    #[arg(long)]
    pub cpu: Option<u32>,
    /// Integer divisions per run.
    #[arg(long, default_value_t = 1_000_000)]
    pub divisions: u64,
    /// Runs per pass (one unloaded pass for T_min, one loaded pass).
    #[arg(long, default_value_t = 300)]
    pub runs: u64,
    #[arg(long)]
    pub priority: Option<u8>,
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub out: OutArgs,
}

#[derive(clap::Args)]
pub struct PeriodicityArgs {
    /// CPU of the timer task and the two woken tasks (default: the last online CPU).
    #[arg(long)]
    pub cpu: Option<u32>,
    #[arg(long, default_value = "100us", value_parser = parse_duration)]
    pub period: Duration,
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    #[arg(long)]
    pub priority: Option<u8>,
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub out: OutArgs,
}

pub fn run(cmd: MeasureCmd) -> Result<Outcome> {
    match cmd {
        MeasureCmd::Latency(a) if a.compare_cyclictest => compare(a),
        MeasureCmd::Latency(a) => latency(a),
        MeasureCmd::Exec(a) => exec_cmd(a),
        MeasureCmd::Periodicity(a) => periodicity_cmd(a),
        MeasureCmd::Budget(a) => super::budget::run(a),
    }
}

/// What every measure subcommand sets up first, in this order: input checks
/// (nothing changed yet), root, the machine lock, signal handling, mlockall,
/// /dev/cpu_dma_latency.
struct Session {
    host: Host,
    online: CpuSet,
    applied: Option<Applied>,
    stop: Arc<AtomicBool>,
    mlocked: bool,
    dma: DmaLatencyGuard,
    started: u64,
    _lock: Option<rtmgr_linux::lock::MachineLock>,
}

impl Session {
    fn open(what: &str) -> Result<Session> {
        let host = crate::cmd::host();
        crate::cmd::require_root(&host, what)?;
        let online = rtmgr_linux::cpus::online(&host)?;
        let lock = crate::cmd::machine_lock(&host)?;
        let applied = rtmgr_linux::partition::current(
            &host,
            std::path::Path::new(rtmgr_linux::journal::DEFAULT_JOURNAL),
        )?;
        let stop = stop_flag()?;
        Ok(Session {
            host,
            online,
            applied,
            stop,
            mlocked: lock_memory(),
            dma: DmaLatencyGuard::hold(),
            started: unix_now_s(),
            _lock: lock,
        })
    }

    fn default_cpu(&self) -> u32 {
        self.applied
            .as_ref()
            .and_then(|a| a.plan.rt.iter().last())
            .or_else(|| self.online.iter().last())
            .unwrap_or(0)
    }

    fn load_plan(&self, args: &LoadArgs, measured: &CpuSet) -> Result<Option<LoadPlan>> {
        let Some(kind) = args.load else {
            return Ok(None);
        };
        let cpus = match &args.load_cpus {
            Some(c) => c.clone(),
            None => {
                let rest = self.online.difference(measured);
                if rest.is_empty() {
                    self.online.clone()
                } else {
                    rest
                }
            }
        };
        check_cpus("--load-cpus", &cpus, &self.online)?;
        Ok(Some(LoadPlan::simple(kind, cpus)))
    }

    fn partial(&self) -> Option<String> {
        self.stop.load(Ordering::Relaxed).then(|| {
            "interrupted (SIGINT/SIGTERM): the data cover only part of the planned run".to_string()
        })
    }
}

fn policy_spec(a: &LatencyArgs) -> Result<PolicySpec> {
    let prio = a.priority.unwrap_or_else(max_fifo_priority);
    if !(1..=99).contains(&prio) {
        return bad_input(format!("--priority {prio}: must be 1..99"));
    }
    Ok(match a.policy.as_str() {
        "fifo" => PolicySpec::Fifo { priority: prio },
        "rr" => PolicySpec::Rr { priority: prio },
        "deadline" => PolicySpec::Deadline {
            runtime_ns: a.dl_runtime.as_nanos() as u64,
            period_ns: a.interval.as_nanos() as u64,
        },
        p => return bad_input(format!("--policy {p}: expected fifo, rr or deadline")),
    })
}

fn outputs(out: &OutArgs, kind: &str, report: &Report, svgs: &[(&str, String)]) -> Result<()> {
    let json = out
        .json
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("rtmgr-{kind}.json")));
    write_json(&json, report)?;
    eprintln!("report: {}", json.display());
    let svg = out
        .svg
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("rtmgr-{kind}.svg")));
    for (suffix, text) in svgs {
        let p = with_suffix(&svg, suffix);
        write_file(&p, text)?;
        eprintln!("plot: {}", p.display());
    }
    if out.print_json {
        println!("{}", serde_json::to_string_pretty(report)?);
    }
    Ok(())
}

fn probe_config(
    a: &LatencyArgs,
    cpus: &CpuSet,
    policy: PolicySpec,
    duration: Option<Duration>,
) -> ProbeConfig {
    ProbeConfig {
        mode: if a.relative {
            ProbeMode::Relative
        } else {
            ProbeMode::Absolute
        },
        cpus: cpus.clone(),
        interval_ns: a.interval.as_nanos() as u64,
        duration_ns: if a.loops.is_some() {
            None
        } else {
            duration.map(|d| d.as_nanos() as u64)
        },
        loops: a.loops,
        policy,
        parallel: a.parallel,
    }
}

fn latency(a: LatencyArgs) -> Result<Outcome> {
    let policy = policy_spec(&a)?;
    if a.parallel == 0 {
        return bad_input("--parallel must be at least 1");
    }
    let s = Session::open("rtmgr measure latency")?;
    let cpus = a
        .cpus
        .clone()
        .unwrap_or_else(|| CpuSet::single(s.default_cpu()));
    check_cpus("--cpus", &cpus, &s.online)?;
    let _orchestrator = Orchestrator::enter(&cpus, &s.online);
    let load = s.load_plan(&a.load, &cpus)?;
    let prepare = prepare_for(&s.host, s.applied.as_ref(), &cpus)?;
    let cfg = probe_config(&a, &cpus, policy, Some(a.duration));
    let planned = match a.loops {
        Some(n) => a.interval * n.min(u32::MAX as u64) as u32,
        None => a.duration,
    };
    let pb = progress_bar(planned);
    let seg = run_segment(
        &s.host,
        &cfg,
        load.as_ref(),
        s.applied.as_ref(),
        prepare,
        &s.stop,
        &mut |p, el| {
            pb.set_position(el.as_millis() as u64);
            pb.set_message(progress_msg(p));
        },
    );
    pb.finish_and_clear();
    let seg = seg?;
    let settings = ProbeSettings {
        mode: cfg.mode,
        cpus: cpus.clone(),
        interval_ns: cfg.interval_ns,
        duration_ns: cfg.duration_ns,
        loops: cfg.loops,
        policy,
        parallel: a.parallel,
        mlocked: s.mlocked,
        dma_latency_held: s.dma.held(),
    };
    let run = latency_run(
        settings,
        &seg.threads,
        load.as_ref().map(|l| l.result(seg.metrics.clone())),
        seg.disturbance,
        seg.elapsed_ns,
    );
    let mut rows: Vec<(String, &rtmgr_core::stats::Summary)> = Vec::new();
    if a.parallel > 1 {
        for t in &run.threads {
            rows.push((format!("cpu{}.{}", t.cpu, t.index), &t.summary));
        }
    }
    for c in &run.per_cpu {
        rows.push((format!("cpu{}", c.cpu), &c.summary));
    }
    if run.per_cpu.len() > 1 {
        rows.push(("all".into(), &run.overall.summary));
    }
    println!("{}", summary_table(&rows));
    print!("{}", disturbance_text(&run.disturbance));
    for t in &run.threads {
        println!(
            "cpu{}.{}: context switches {} voluntary, {} involuntary; CPU time {:.0} ns/sample",
            t.cpu,
            t.index,
            t.voluntary_ctxt_switches,
            t.involuntary_ctxt_switches,
            t.cpu_time_ns as f64 / t.summary.n.max(1) as f64
        );
    }
    if let Some(l) = &run.load {
        for m in &l.metrics {
            println!("load {}: {:.1} bogo-ops/s", m.stressor, m.bogo_ops_per_s);
        }
    }
    let series: Vec<(String, &rtmgr_core::stats::HistData)> = run
        .per_cpu
        .iter()
        .map(|c| (format!("cpu{}", c.cpu), &c.hist))
        .collect();
    let named: Vec<(&str, &rtmgr_core::stats::HistData)> =
        series.iter().map(|(n, h)| (n.as_str(), *h)).collect();
    let title = format!(
        "wake-up latency{}",
        run.load
            .as_ref()
            .map(|l| format!(" under {} load", l.kind))
            .unwrap_or_default()
    );
    let xs = if a.relative {
        XScale::Linear
    } else {
        XScale::Log
    };
    let svgs = [
        ("", histogram_svg(&title, &named, xs)),
        ("-percentiles", percentile_svg(&title, &named)),
    ];
    let partial = s.partial();
    let rep = report(Body::Latency(run), &s.online, s.started, partial.clone());
    outputs(&a.out, "latency", &rep, &svgs)?;
    if let Some(p) = partial {
        eprintln!("rtmgr: {p}; partial report written");
        return Ok(Outcome::Code(130));
    }
    Ok(Outcome::Ok)
}

fn compare(a: LatencyArgs) -> Result<Outcome> {
    let policy = policy_spec(&a)?;
    let PolicySpec::Fifo { priority } = policy else {
        return bad_input("--compare-cyclictest compares SCHED_FIFO probes: use --policy fifo");
    };
    if a.relative || a.parallel != 1 || a.loops.is_some() {
        return bad_input(
            "--compare-cyclictest takes one absolute-mode thread on one CPU, with --duration",
        );
    }
    if a.rounds == 0 {
        return bad_input("--rounds must be at least 1");
    }
    rtmgr_linux::measure::which("cyclictest").ok_or_else(|| {
        measure_err(rtmgr_linux::measure::MeasureError::MissingTool(
            "cyclictest",
            "rt-tests",
        ))
    })?;
    let s = Session::open("rtmgr measure latency --compare-cyclictest")?;
    let cpus = a
        .cpus
        .clone()
        .unwrap_or_else(|| CpuSet::single(s.default_cpu()));
    check_cpus("--cpus", &cpus, &s.online)?;
    let _orchestrator = Orchestrator::enter(&cpus, &s.online);
    if cpus.len() != 1 {
        return bad_input("--compare-cyclictest measures one CPU: give --cpus N");
    }
    let cpu = cpus.first().expect("one CPU");
    let load = s.load_plan(&a.load, &cpus)?;
    let prepare = prepare_for(&s.host, s.applied.as_ref(), &cpus)?;
    let seg_d = a.duration / (2 * a.rounds);
    let interval_ns = a.interval.as_nanos() as u64;
    let loops = (seg_d.as_nanos() as u64 / interval_ns).max(1);
    let cfg = ProbeConfig {
        loops: Some(loops),
        duration_ns: None,
        ..probe_config(&a, &cpus, policy, None)
    };
    // One load for the whole comparison, so both tools see the same load.
    let loads = match &load {
        Some(plan) => Some(Loads::start(
            plan,
            &s.host,
            s.applied.as_ref(),
            a.duration * 2 + Duration::from_secs(60),
        )?),
        None => None,
    };
    sleep_checked(WARMUP, &s.stop);
    let loads = loads.map(Loads::check_alive).transpose()?;
    let pb = progress_bar(a.duration);
    let t0 = std::time::Instant::now();
    let (mut ours, mut theirs) = (Hist::new(), Hist::new());
    let (mut our_missed, mut our_cpu, mut their_cpu, mut their_overflows) =
        (0u64, 0u64, 0u64, 0u64);
    let mut their_cpu_samples = 0u64;
    let mut command = Vec::new();
    let enter_rt = |pid: u32| -> rtmgr_linux::measure::Result<()> {
        match (&prepare, &s.applied) {
            (Some(_), Some(ap)) => {
                rtmgr_linux::partition::enter(&s.host, ap, rtmgr_linux::partition::Role::Rt, pid)
                    .map_err(|e| rtmgr_linux::measure::MeasureError::Setup(e.to_string()))
            }
            _ => Ok(()),
        }
    };
    let mut rounds_done = 0;
    for r in 0..a.rounds {
        for step in 0..2 {
            if s.stop.load(Ordering::Relaxed) {
                break;
            }
            let probe_first = r % 2 == 0;
            if (step == 0) == probe_first {
                let seg = run_segment(
                    &s.host,
                    &cfg,
                    None,
                    None,
                    prepare.clone(),
                    &s.stop,
                    &mut |p, _| {
                        pb.set_position(t0.elapsed().as_millis() as u64);
                        pb.set_message(format!("round {} rtmgr {}", r + 1, progress_msg(p)));
                    },
                )?;
                let (h, m) = merged(&seg.threads);
                ours.merge(&h);
                our_missed += m;
                our_cpu += seg.threads.iter().map(|t| t.cpu_time_ns).sum::<u64>();
            } else {
                pb.set_message(format!("round {} cyclictest", r + 1));
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
                )
                .map_err(measure_err)?;
                pb.set_position(t0.elapsed().as_millis() as u64);
                theirs.merge(&ct.hist);
                their_overflows += ct.overflows;
                if let Some(c) = ct.cpu_time_ns {
                    their_cpu += c;
                    their_cpu_samples += ct.hist.len();
                }
                command = ct.command;
            }
        }
        if !s.stop.load(Ordering::Relaxed) {
            rounds_done += 1;
        }
    }
    pb.finish_and_clear();
    let metrics = match loads {
        Some(l) => l.stop()?,
        None => Vec::new(),
    };
    let per = |cpu_ns: u64, n: u64| (n > 0).then(|| cpu_ns as f64 / n as f64);
    let run = CompareRun {
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
    };
    println!(
        "{}",
        summary_table(&[
            ("rtmgr probe".into(), &run.rtmgr.result.summary),
            ("cyclictest".into(), &run.cyclictest.result.summary),
        ])
    );
    for (name, t) in [("rtmgr probe", &run.rtmgr), ("cyclictest", &run.cyclictest)] {
        println!(
            "{name}: CPU cost {} ns/sample{}",
            t.cpu_ns_per_sample
                .map(|c| format!("{c:.0}"))
                .unwrap_or("-".into()),
            if t.overflows > 0 {
                format!(
                    ", {} samples beyond its histogram (counted at its max)",
                    t.overflows
                )
            } else {
                String::new()
            }
        );
    }
    println!("(cyclictest does not report missed periods; its 1 µs buckets are shown at their midpoints)");
    let named = [
        ("rtmgr probe", &run.rtmgr.result.hist),
        ("cyclictest", &run.cyclictest.result.hist),
    ];
    let title = format!("rtmgr probe vs cyclictest on CPU {cpu}");
    let svgs = [
        ("", histogram_svg(&title, &named, XScale::Log)),
        ("-percentiles", percentile_svg(&title, &named)),
    ];
    let partial = s.partial();
    let rep = report(Body::Compare(run), &s.online, s.started, partial.clone());
    outputs(&a.out, "compare", &rep, &svgs)?;
    Ok(if partial.is_some() {
        Outcome::Code(130)
    } else {
        Outcome::Ok
    })
}

fn exec_cmd(a: ExecArgs) -> Result<Outcome> {
    if a.runs == 0 || a.divisions == 0 {
        return bad_input("--runs and --divisions must be at least 1");
    }
    let s = Session::open("rtmgr measure exec")?;
    let cpu = a.cpu.unwrap_or_else(|| s.default_cpu());
    let cpus = CpuSet::single(cpu);
    check_cpus("--cpu", &cpus, &s.online)?;
    let _orchestrator = Orchestrator::enter(&cpus, &s.online);
    let load = s.load_plan(&a.load, &cpus)?;
    let prepare = prepare_for(&s.host, s.applied.as_ref(), &cpus)?;
    let cfg = exec::ExecConfig {
        cpu,
        divisions: a.divisions,
        runs: a.runs,
        priority: a.priority.unwrap_or_else(max_fifo_priority),
    };
    eprintln!(
        "unloaded pass: {} runs of {} divisions on CPU {cpu}",
        a.runs, a.divisions
    );
    let (unloaded, _) =
        exec::run_pass(&cfg, s.stop.clone(), prepare.clone()).map_err(measure_err)?;
    let mut loaded = None;
    let mut load_result = None;
    if let Some(plan) = &load {
        if !s.stop.load(Ordering::Relaxed) {
            eprintln!(
                "loaded pass under {} load on CPUs {}",
                plan.kind, plan.parts[0].cpus
            );
            let max = Duration::from_nanos(unloaded.max().unwrap_or(0).max(0) as u64 * 3 * a.runs)
                + Duration::from_secs(60);
            let loads = Loads::start(plan, &s.host, s.applied.as_ref(), max)?;
            sleep_checked(WARMUP, &s.stop);
            let loads = loads.check_alive()?;
            let pass = exec::run_pass(&cfg, s.stop.clone(), prepare.clone()).map_err(measure_err);
            let metrics = loads.stop()?;
            loaded = Some(pass?.0);
            load_result = Some(plan.result(metrics));
        }
    }
    let t_min = unloaded.min();
    let worst = loaded.as_ref().unwrap_or(&unloaded).max();
    let (over_ns, over_pct) = exec::over_t_min(t_min, worst);
    let run = ExecRun {
        cpu,
        divisions: a.divisions,
        runs: a.runs,
        priority: cfg.priority,
        t_min_ns: t_min,
        unloaded: cpu_result(cpu, &unloaded, 0),
        loaded: loaded.as_ref().map(|h| cpu_result(cpu, h, 0)),
        load: load_result,
        max_over_t_min_ns: over_ns,
        max_over_t_min_pct: over_pct,
    };
    let mut rows = vec![("unloaded".to_string(), &run.unloaded.summary)];
    if let Some(l) = &run.loaded {
        rows.push(("loaded".into(), &l.summary));
    }
    println!(
        "{}",
        summary_table(&rows).replace("latencies", "execution times")
    );
    println!(
        "T_min {} µs; max − T_min = {} µs ({})",
        rtmgr_core::report::us(t_min),
        rtmgr_core::report::us(over_ns),
        over_pct.map(|p| format!("{p:.2}%")).unwrap_or("-".into())
    );
    let mut named = vec![("unloaded", &run.unloaded.hist)];
    if let Some(l) = &run.loaded {
        named.push(("loaded", &l.hist));
    }
    let svgs = [(
        "",
        histogram_svg(
            &format!("execution time of {} divisions", a.divisions),
            &named,
            XScale::Linear,
        ),
    )];
    let partial = s.partial();
    let rep = report(Body::Exec(run), &s.online, s.started, partial.clone());
    outputs(&a.out, "exec", &rep, &svgs)?;
    Ok(if partial.is_some() {
        Outcome::Code(130)
    } else {
        Outcome::Ok
    })
}

fn periodicity_cmd(a: PeriodicityArgs) -> Result<Outcome> {
    let s = Session::open("rtmgr measure periodicity")?;
    let cpu = a.cpu.unwrap_or_else(|| s.default_cpu());
    let cpus = CpuSet::single(cpu);
    check_cpus("--cpu", &cpus, &s.online)?;
    let _orchestrator = Orchestrator::enter(&cpus, &s.online);
    let prio = a.priority.unwrap_or_else(max_fifo_priority);
    if prio < 2 {
        return bad_input("--priority must be at least 2 (the woken tasks run one below)");
    }
    let load = s.load_plan(&a.load, &cpus)?;
    let prepare = prepare_for(&s.host, s.applied.as_ref(), &cpus)?;
    let cfg = periodicity::PeriodicityConfig {
        cpu,
        period_ns: a.period.as_nanos() as u64,
        duration_ns: a.duration.as_nanos() as u64,
        priority: prio,
    };
    let loads = match &load {
        Some(plan) => Some(Loads::start(
            plan,
            &s.host,
            s.applied.as_ref(),
            a.duration + Duration::from_secs(60),
        )?),
        None => None,
    };
    if loads.is_some() {
        sleep_checked(WARMUP, &s.stop);
    }
    let loads = loads.map(Loads::check_alive).transpose()?;
    eprintln!(
        "periodicity: {} µs period for {:?} on CPU {cpu}",
        cfg.period_ns / 1000,
        a.duration
    );
    let out = periodicity::run(&cfg, s.stop.clone(), prepare).map_err(measure_err);
    let metrics = match loads {
        Some(l) => l.stop()?,
        None => Vec::new(),
    };
    let out = out?;
    let run = PeriodicityRun {
        cpu,
        period_ns: cfg.period_ns,
        load: load.as_ref().map(|l| l.result(metrics)),
        expected: out.expected,
        activations: out.activations,
        lost: out.lost,
        inter_activation: cpu_result(cpu, &out.inter_activation, 0),
        deviation: cpu_result(cpu, &out.deviation, 0),
        series_ns: out.series_ns,
    };
    println!(
        "{}",
        summary_table(&[
            ("between activations".into(), &run.inter_activation.summary),
            ("deviation from period".into(), &run.deviation.summary),
        ])
    );
    println!(
        "{} activations of {} expected, {} lost",
        run.activations, run.expected, run.lost
    );
    let title = format!(
        "periodicity, {} µs period{}",
        cfg.period_ns / 1000,
        run.load
            .as_ref()
            .map(|l| format!(", {} load", l.kind))
            .unwrap_or_default()
    );
    let svgs = [
        ("", series_svg(&title, &run.series_ns, cfg.period_ns)),
        (
            "-deviation",
            histogram_svg(
                &title,
                &[("deviation", &run.deviation.hist)],
                XScale::Linear,
            ),
        ),
    ];
    let partial = s
        .partial()
        .or(out.interrupted.then(|| "interrupted".to_string()));
    let rep = report(
        Body::Periodicity(run),
        &s.online,
        s.started,
        partial.clone(),
    );
    outputs(&a.out, "periodicity", &rep, &svgs)?;
    Ok(if partial.is_some() {
        Outcome::Code(130)
    } else {
        Outcome::Ok
    })
}
