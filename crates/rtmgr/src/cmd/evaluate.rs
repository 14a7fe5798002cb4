//! `rtmgr evaluate`: flags and output of the main job (the engine is
//! `rtmgr_lab::experiment::evaluate`): the table with ratios and verdicts,
//! report.json, report.html and the SVG plots in the output directory.

use super::ablate::AblationFlags;
use super::flags::{engine_choice, parse_duration, parse_trace, TraceThreshold};
use super::output::{write_file, write_json};
use super::progress::Bar;
use super::{output, Outcome};
use anyhow::{Context, Result};
use rtmgr_lab::experiment::evaluate::{self, EvaluateConfig};
use rtmgr_lab::load::{LoadEngine, LoadKind};
use rtmgr_lab::plot::{histogram_svg, percentile_svg, XScale};
use rtmgr_lab::report::{disturbance_text, evaluate_html, evaluate_table, EvaluateRun, Report};
use rtmgr_lab::trace::causes_text;
use rtmgr_linux::machine_access::host_from_env;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(clap::Args)]
pub struct EvaluateArgs {
    /// About 25 s instead of about 60 s (CI, smoke tests).
    #[arg(long)]
    pub quick: bool,
    /// Total measuring time, spread over all rounds and configurations
    /// (default 36s, or 8s with --quick; with --ablate 48s, or 12s; each
    /// segment's load start and the partition's set-up add about a third).
    #[arg(long, value_parser = parse_duration)]
    pub duration: Option<Duration>,
    /// Rounds (each runs every configuration once; default 8, or 4 with
    /// --quick; with --ablate 4, or 2). The intervals resample rounds: fewer
    /// than 4 give none.
    #[arg(long)]
    pub rounds: Option<u32>,
    /// Skip the A/A control (the shield measured twice per round as `shield`
    /// and `shield-twin`, this run's noise floor): longer segments, but the
    /// verdicts then test against 1 only.
    #[arg(long)]
    pub no_control: bool,
    /// The RT CPU (default: the CPU with the least unmovable work — kernel-managed
    /// interrupts by rate, per-CPU kernel threads, CPU 0's housekeeping — as
    /// `partition apply --rt-cpus auto` chooses it; the reason is printed and recorded).
    #[arg(long)]
    pub rt_cpu: Option<u32>,
    /// The load (default: all five ARTiS loads).
    #[arg(long, default_value = "all")]
    pub load: LoadKind,
    /// What runs the load: builtin or stress-ng (default: stress-ng when installed, else builtin).
    #[arg(long, value_name = "ENGINE")]
    pub load_engine: Option<LoadEngine>,
    /// Probe release period.
    #[arg(long, default_value = "250us", value_parser = parse_duration)]
    pub interval: Duration,
    /// Directory for report.json, report.html and the SVG plots (default: a new
    /// directory under $XDG_STATE_HOME/rtmgr/reports, printed at the end).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Explain each configuration's tail (samples above THRESHOLD, default its
    /// p99.9) from a private tracefs instance on the RT CPU.
    #[arg(long, value_name = "THRESHOLD", num_args = 0..=1, default_missing_value = "p99.9", value_parser = parse_trace)]
    pub trace: Option<TraceThreshold>,
    #[command(flatten)]
    pub ablation: AblationFlags,
}

pub fn run(args: EvaluateArgs) -> Result<Outcome> {
    let engine = engine_choice(args.load_engine)?;
    let defaults = if args.ablation.ablate {
        EvaluateConfig::ablation(args.quick, engine)
    } else {
        EvaluateConfig::new(args.quick, engine)
    };
    let cfg = EvaluateConfig {
        total: args.duration.unwrap_or(defaults.total),
        rounds: args.rounds.unwrap_or(defaults.rounds),
        rt_cpu: args.rt_cpu,
        load: args.load,
        interval: args.interval,
        trace: args.trace.map(|t| t.0),
        control: !args.no_control,
        ..defaults
    };
    if args.ablation.ablate {
        return super::ablate::run(&args.ablation, args.out.clone(), cfg);
    }
    let dir = args
        .out
        .clone()
        .unwrap_or_else(|| output::default_dir("evaluate"));
    // Long runs write the report so far every minute (a valid partial report).
    let cfg = EvaluateConfig {
        checkpoint: Some(dir.join("report.json")),
        ..cfg
    };
    let outcome = {
        let mut bar = Bar::new(cfg.total);
        evaluate::run(&host_from_env()?, &cfg, &mut bar)?
    };
    print_run(outcome.run(), outcome.mlocked, outcome.dma_held);
    write_outputs(&dir, &outcome.report)?;
    if let Some(e) = outcome.failure {
        return Err(
            anyhow::Error::new(e).context("evaluate stopped early (partial report written)")
        );
    }
    if let Some(p) = &outcome.report.header.partial_reason {
        eprintln!("rtmgr: {p}; partial report written");
        return Ok(Outcome::Code(130));
    }
    Ok(Outcome::Ok)
}

fn print_run(run: &EvaluateRun, mlocked: bool, dma: bool) {
    println!(
        "RT CPU {} latency under the {} load ({} engine; {} of {} rounds, {:.2} s per configuration per round, probe every {} µs{}{}):\n",
        run.rt_cpus,
        run.load,
        run.load_engine,
        run.rounds_done,
        run.rounds_planned,
        run.segment_ns as f64 / 1e9,
        run.interval_ns / 1000,
        if mlocked { "" } else { ", memory NOT locked" },
        if dma { "" } else { ", cpu_dma_latency unavailable" },
    );
    if let Some(why) = &run.rt_choice {
        println!("RT CPU {} chosen automatically: {why}\n", run.rt_cpus);
    }
    for s in &run.skipped {
        println!("skipped: {s}\n");
    }
    print!("{}", evaluate_table(run));
    if let Some(t) = rtmgr_lab::report::evaluate_tails(run) {
        print!("{t}");
    }
    if let Some(iv) = &run.intervals {
        println!();
        print!("{}", rtmgr_lab::report::intervals_table(iv));
    }
    println!();
    for v in &run.verdicts {
        println!("- {v}");
    }
    println!();
    for c in &run.configs {
        if let Some(t) = &c.tail_causes {
            println!("{}:", c.name);
            print!("{}", causes_text(t, 6));
        }
    }
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

fn write_outputs(dir: &Path, rep: &Report) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    write_json(&dir.join("report.json"), rep)?;
    let rtmgr_lab::report::Body::Evaluate(e) = &rep.body else {
        unreachable!("an evaluate report")
    };
    let named: Vec<(&str, &rtmgr_core::stats::HistData)> = e
        .configs
        .iter()
        .filter(|c| c.result.hist.n > 0)
        .map(|c| (c.name.as_str(), &c.result.hist))
        .collect();
    let hist = histogram_svg(
        "RT CPU wake-up latency per configuration",
        &named,
        XScale::Log,
    );
    let pct = percentile_svg("RT CPU wake-up latency percentiles", &named);
    write_file(&dir.join("latency-histogram.svg"), &hist)?;
    write_file(&dir.join("latency-percentiles.svg"), &pct)?;
    write_file(
        &dir.join("report.html"),
        &evaluate_html(rep, e, &hist, &pct),
    )?;
    eprintln!(
        "report: {}/report.json, {}/report.html",
        dir.display(),
        dir.display()
    );
    Ok(())
}
