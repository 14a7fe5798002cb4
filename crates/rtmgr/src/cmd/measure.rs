//! `rtmgr measure …` (issue #3; docs/architecture.md "Measuring"): latency (McKenney §2.1,
//! §3; ARTiS §3.1 loads), execution-time variation (ARTiS §3.2), periodicity
//! (DROPS §5.3), and the side-by-side cross-check with cyclictest.

pub mod cost;
pub mod parallel;
pub mod resources;

use super::flags::*;
use super::output::{write_report, OutArgs};
use super::progress::Bar;
use super::{bad_input, Outcome};
use anyhow::Result;
use rtmgr_core::stats::HistData;
use rtmgr_core::CpuSet;
use rtmgr_lab::experiment::compare::CompareConfig;
use rtmgr_lab::experiment::exec::ExecConfig;
use rtmgr_lab::experiment::latency::LatencyConfig;
use rtmgr_lab::experiment::periodicity::PeriodicityConfig;
use rtmgr_lab::experiment::session::LoadRequest;
use rtmgr_lab::experiment::{self, Session};
use rtmgr_lab::load::{LoadEngine, LoadKind};
use rtmgr_lab::measure::probe::max_fifo_priority;
use rtmgr_lab::plot::{histogram_svg, percentile_svg, series_svg, XScale};
use rtmgr_lab::report::{disturbance_text, ratio_text, summary_table, Body, PolicySpec};
use rtmgr_lab::trace::causes_text;
use rtmgr_linux::machine_access::host_from_env;
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
    /// What real time costs ordinary work: micro-benchmarks, a build, a load sweep in stock, shield and balanced.
    Cost(cost::CostArgs),
    /// An RT task beside cache-thrashing and I/O-loading NRT neighbours, with and without the resource settings (DROPS §4.4–5).
    Resources(resources::ResourcesArgs),
}

#[derive(clap::Args, Clone)]
pub struct LoadArgs {
    /// Load while measuring: compute, io, network, locks, cache or all (the ARTiS loads).
    #[arg(long)]
    pub load: Option<LoadKind>,
    /// CPUs for the load (default: the online CPUs not measured, or all if none).
    #[arg(long, value_parser = parse_cpus)]
    pub load_cpus: Option<CpuSet>,
    /// What runs the load: builtin or stress-ng (default: stress-ng when installed, else builtin).
    #[arg(long, value_name = "ENGINE")]
    pub load_engine: Option<LoadEngine>,
}

impl LoadArgs {
    /// The load the user asked for, if any.
    pub fn request(&self) -> Result<Option<LoadRequest>> {
        self.load
            .map(|kind| {
                Ok(LoadRequest {
                    kind,
                    cpus: self.load_cpus.clone(),
                    engine: engine_choice(self.load_engine)?,
                })
            })
            .transpose()
    }
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
    /// Explain every sample above THRESHOLD (default: the run's p99.9) from a
    /// private tracefs instance: interrupts, softirqs, the task and system
    /// call that held the CPU, the time no event explains.
    #[arg(long, value_name = "THRESHOLD", num_args = 0..=1, default_missing_value = "p99.9", value_parser = parse_trace)]
    pub trace: Option<TraceThreshold>,
    /// What --trace costs: alternate traced and untraced halves in --rounds
    /// rounds under the same load and compare their latencies.
    #[arg(long, conflicts_with = "compare_cyclictest")]
    pub trace_cost: bool,
    /// McKenney Fig. 8: measure with 1, 2, … N parallel tasks per CPU, one
    /// level after the other, each with --loops samples per task.
    #[arg(long, value_name = "N", conflicts_with_all = ["compare_cyclictest", "trace_cost", "parallel"])]
    pub parallel_sweep: Option<u32>,
}

/// What `measure exec` and `measure periodicity` share: the measured
/// task's priority, the load beside it and where the report goes.
#[derive(clap::Args)]
pub struct TaskArgs {
    /// SCHED_FIFO priority of the measured task(s) (default: the highest).
    #[arg(long)]
    pub priority: Option<u8>,
    #[command(flatten)]
    pub load: LoadArgs,
    #[command(flatten)]
    pub out: OutArgs,
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
    #[command(flatten)]
    pub task: TaskArgs,
}

#[derive(clap::Args)]
pub struct PeriodicityArgs {
    /// CPU of the timer task and the two woken tasks (default: the last online CPU).
    #[arg(long)]
    pub cpu: Option<u32>,
    /// The timer task's period.
    #[arg(long, default_value = "100us", value_parser = parse_duration)]
    pub period: Duration,
    /// How long to measure.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub duration: Duration,
    #[command(flatten)]
    pub task: TaskArgs,
}

pub fn run(cmd: MeasureCmd) -> Result<Outcome> {
    match cmd {
        MeasureCmd::Latency(a) if a.compare_cyclictest => compare(a),
        MeasureCmd::Latency(a) if a.trace_cost => trace_cost(a),
        MeasureCmd::Latency(a) if a.parallel_sweep.is_some() => {
            let n = a.parallel_sweep.unwrap_or(1);
            parallel::sweep(a, n)
        }
        MeasureCmd::Latency(a) => latency(a),
        MeasureCmd::Exec(a) => exec_cmd(a),
        MeasureCmd::Periodicity(a) => periodicity_cmd(a),
        MeasureCmd::Budget(a) => super::budget::run(a),
        MeasureCmd::Cost(a) => cost::run(a),
        MeasureCmd::Resources(a) => resources::resources_cmd(a),
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

fn latency_config(a: &LatencyArgs) -> Result<LatencyConfig> {
    Ok(LatencyConfig {
        cpus: a.cpus.clone(),
        interval: a.interval,
        duration: a.duration,
        loops: a.loops,
        policy: policy_spec(a)?,
        relative: a.relative,
        parallel: a.parallel,
        load: a.load.request()?,
        trace: a.trace.map(|t| t.0),
    })
}

/// Exit code of a run that may have been cut short.
/// A latency comparison's two plots: the histogram and the percentile curve.
fn latency_plots(
    title: &str,
    named: &[(&str, &HistData)],
    xs: XScale,
) -> [(&'static str, String); 2] {
    [
        ("", histogram_svg(title, named, xs)),
        ("-percentiles", percentile_svg(title, named)),
    ]
}

/// Write a session's report (partial when it was interrupted) and its plots;
/// the partial reason, if any.
fn write_session_report(
    s: &Session,
    out: &OutArgs,
    kind: &str,
    body: Body,
    svgs: &[(&str, String)],
) -> Result<Option<String>> {
    let partial = s.partial();
    write_report(out, kind, &s.report(body, partial.clone()), svgs)?;
    Ok(partial)
}

fn outcome(partial: &Option<String>) -> Outcome {
    if partial.is_some() {
        Outcome::Code(130)
    } else {
        Outcome::Ok
    }
}

fn latency(a: LatencyArgs) -> Result<Outcome> {
    let cfg = latency_config(&a)?;
    experiment::latency::check(&cfg)?;
    let s = Session::open(host_from_env()?, "rtmgr measure latency")?;
    let run = experiment::latency::run(&s, &cfg, &mut Bar::new(cfg.planned()))?;
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
    let mut tails: Vec<(String, &rtmgr_lab::report::CpuResult)> = run
        .per_cpu
        .iter()
        .map(|c| (format!("cpu{}", c.cpu), c))
        .collect();
    if run.per_cpu.len() > 1 {
        tails.push(("all".into(), &run.overall));
    }
    if let Some(t) = rtmgr_lab::report::two_tails_table(&tails) {
        println!("{t}");
    }
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
            println!(
                "load ({}) {}: {:.1} ops/s (op = {})",
                l.engine, m.component, m.ops_per_s, m.op
            );
        }
    }
    if let Some(t) = &run.tail_causes {
        print!("{}", causes_text(t, 10));
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
    let svgs = latency_plots(&title, &named, xs);
    let partial = write_session_report(&s, &a.out, "latency", Body::Latency(run), &svgs)?;
    if let Some(p) = &partial {
        eprintln!("rtmgr: {p}; partial report written");
    }
    Ok(outcome(&partial))
}

fn compare(a: LatencyArgs) -> Result<Outcome> {
    let cfg = CompareConfig {
        latency: latency_config(&a)?,
        rounds: a.rounds,
    };
    experiment::compare::check(&cfg)?;
    let s = Session::open(
        host_from_env()?,
        "rtmgr measure latency --compare-cyclictest",
    )?;
    let run = experiment::compare::run(&s, &cfg, &mut Bar::new(a.duration))?;
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
    let title = format!("rtmgr probe vs cyclictest on CPU {}", run.cpu);
    let svgs = latency_plots(&title, &named, XScale::Log);
    let partial = write_session_report(&s, &a.out, "compare", Body::Compare(run), &svgs)?;
    Ok(outcome(&partial))
}

fn trace_cost(a: LatencyArgs) -> Result<Outcome> {
    let cfg = latency_config(&a)?;
    experiment::trace_cost::check(&cfg, a.rounds)?;
    let s = Session::open(host_from_env()?, "rtmgr measure latency --trace-cost")?;
    let run = experiment::trace_cost::run(&s, &cfg, a.rounds, &mut Bar::new(a.duration))?;
    println!(
        "{}",
        summary_table(&[
            ("untraced".into(), &run.untraced.summary),
            ("traced".into(), &run.traced.summary),
        ])
    );
    let (u, t) = (&run.untraced.summary, &run.traced.summary);
    let ratio = |ppm: Option<u32>| {
        let pick = |x: &rtmgr_core::stats::Summary| ppm.map_or(x.max_ns, |p| x.get(p));
        rtmgr_core::stats::ratio(pick(t), pick(u))
            .map(|r| format!("{}x", ratio_text(r)))
            .unwrap_or_else(|| "-".into())
    };
    println!(
        "traced/untraced: p50 {}, p99 {}, p99.9 {}, max {}; the tracer read {:.0} events/s ({} lost)",
        ratio(Some(500_000)),
        ratio(Some(990_000)),
        ratio(Some(999_000)),
        ratio(None),
        run.events_per_s,
        run.events_lost
    );
    let named = [
        ("untraced", &run.untraced.hist),
        ("traced", &run.traced.hist),
    ];
    let title = format!(
        "wake-up latency with and without the tracer on CPUs {}",
        run.cpus
    );
    let svgs = latency_plots(&title, &named, XScale::Log);
    let partial = write_session_report(&s, &a.out, "trace-cost", Body::TraceCost(run), &svgs)?;
    Ok(outcome(&partial))
}

fn exec_cmd(a: ExecArgs) -> Result<Outcome> {
    let cfg = ExecConfig {
        cpu: a.cpu,
        divisions: a.divisions,
        runs: a.runs,
        priority: a.task.priority,
        load: a.task.load.request()?,
    };
    experiment::exec::check(&cfg)?;
    let s = Session::open(host_from_env()?, "rtmgr measure exec")?;
    let run = experiment::exec::run(&s, &cfg, &mut experiment::Quiet)?;
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
        rtmgr_lab::report::us(run.t_min_ns),
        rtmgr_lab::report::us(run.max_over_t_min_ns),
        run.max_over_t_min_pct
            .map(|p| format!("{p:.2}%"))
            .unwrap_or("-".into())
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
    let partial = write_session_report(&s, &a.task.out, "exec", Body::Exec(run), &svgs)?;
    Ok(outcome(&partial))
}

fn periodicity_cmd(a: PeriodicityArgs) -> Result<Outcome> {
    let s = Session::open(host_from_env()?, "rtmgr measure periodicity")?;
    let cfg = PeriodicityConfig {
        cpu: a.cpu,
        period: a.period,
        duration: a.duration,
        priority: a.task.priority,
        load: a.task.load.request()?,
    };
    let out = experiment::periodicity::run(&s, &cfg, &mut experiment::Quiet)?;
    let run = out.run;
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
        run.period_ns / 1000,
        run.load
            .as_ref()
            .map(|l| format!(", {} load", l.kind))
            .unwrap_or_default()
    );
    let svgs = [
        ("", series_svg(&title, &run.series_ns, run.period_ns)),
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
    let rep = s.report(Body::Periodicity(run), partial.clone());
    write_report(&a.task.out, "periodicity", &rep, &svgs)?;
    Ok(outcome(&partial))
}
