//! `rtmgr measure cost` (issue 14; DROPS §5.1–5.2, McKenney §2.2 Table 1):
//! flags and output of the cost engine `rtmgr_lab::cost::run` — the
//! tables, the JSON report (`rtmgr.cost/1`) and the Fig. 4 / Fig. 5 plots;
//! and the hidden `__cost` worker it starts.

use crate::cmd::flags::parse_duration;
use crate::cmd::output::{write_report, OutArgs};
use crate::cmd::progress::Bar;
use crate::cmd::Outcome;
use anyhow::{Context, Result};
use rtmgr_lab::cost::run::{self as cost, CostConfig, Parts};
use rtmgr_lab::cost::{build_table, micro_table, slowdown_svg, sweep_svg, sweep_table, CostReport};
use rtmgr_linux::machine_access::host_from_env;
use std::time::Duration;

#[derive(clap::Args)]
pub struct CostArgs {
    /// Rounds; each runs every configuration once, the order reversed every
    /// other round (at least 4 for the slowdowns' 95 % intervals).
    #[arg(long, default_value_t = 4)]
    pub rounds: u32,
    /// The RT CPU of the shield and balanced configurations (default: the one
    /// the kernel leaves most alone).
    #[arg(long)]
    pub rt_cpu: Option<u32>,
    /// Parts to run, comma-separated: micro, build, sweep.
    #[arg(long, value_delimiter = ',', default_value = "micro,build,sweep", value_parser = ["micro", "build", "sweep"])]
    pub only: Vec<String>,
    /// Run time of each micro-benchmark per configuration and round.
    #[arg(long, default_value = "225ms", value_parser = parse_duration)]
    pub micro_time: Duration,
    /// Run time of each load-sweep point per configuration and round.
    #[arg(long, default_value = "1500ms", value_parser = parse_duration)]
    pub sweep_time: Duration,
    /// Most concurrent jobs of the load sweep (default: 4 × online CPUs).
    #[arg(long)]
    pub sweep_max: Option<u32>,
    /// The code base built from clean: a crate unpacked in Cargo's registry
    /// sources, `name` or `name@version`.
    #[arg(long, default_value = "regex-syntax")]
    pub build_crate: String,
    #[command(flatten)]
    pub out: OutArgs,
}

/// A rough length of the run, for the progress bar.
fn planned(cfg: &CostConfig, cpus: usize) -> Duration {
    let per_config = cfg.micro_time * 7 * u32::from(cfg.parts.micro)
        + cfg.sweep_time
            * rtmgr_lab::cost::sweep_levels(cpus, cfg.sweep_max).len() as u32
            * u32::from(cfg.parts.sweep)
        + Duration::from_secs(15) * u32::from(cfg.parts.build);
    per_config * 3 * cfg.rounds
}

pub fn run(a: CostArgs) -> Result<Outcome> {
    let worker = std::env::current_exe().context("find the rtmgr binary (the cost worker)")?;
    let has = |p: &str| a.only.iter().any(|x| x == p);
    let cfg = CostConfig {
        parts: Parts {
            micro: has("micro"),
            build: has("build"),
            sweep: has("sweep"),
        },
        rounds: a.rounds,
        rt_cpu: a.rt_cpu,
        micro_time: a.micro_time,
        sweep_time: a.sweep_time,
        sweep_max: a.sweep_max,
        build_crate: a.build_crate.clone(),
        ..CostConfig::new(worker)
    };
    let cpus = std::thread::available_parallelism().map_or(2, |n| n.get());
    let outcome = {
        let mut bar = Bar::new(planned(&cfg, cpus));
        cost::run(&host_from_env()?, &cfg, &mut bar)?
    };
    let rep = &outcome.report;
    print_report(rep);
    let mut svgs = Vec::new();
    if !rep.micro.is_empty() {
        let title =
            "micro-benchmarks on the CPUs left to Linux tasks, against stock (DROPS Fig. 4)";
        svgs.push(("", slowdown_svg(title, &rep.micro)));
    }
    if let Some(s) = &rep.sweep {
        let title = "jobs per minute against concurrent jobs (DROPS Fig. 5)";
        svgs.push(("-sweep", sweep_svg(title, s)));
    }
    write_report(&a.out, "cost", rep, &svgs)?;
    if let Some(e) = outcome.failure {
        return Err(
            anyhow::Error::new(e).context("measure cost stopped early (partial report written)")
        );
    }
    if let Some(p) = &rep.header.partial_reason {
        eprintln!("rtmgr: {p}; partial report written");
        return Ok(Outcome::Code(130));
    }
    Ok(Outcome::Ok)
}

fn print_report(r: &CostReport) {
    println!(
        "the cost of real time for ordinary work: RT CPU {}, NRT CPUs {}, {} of {} rounds\n",
        r.rt_cpus, r.nrt_cpus, r.rounds_done, r.rounds_planned
    );
    for c in &r.configs {
        println!(
            "{:9} work on CPUs {}: {}",
            c.name, c.work_cpus, c.description
        );
    }
    for s in &r.skipped {
        println!("skipped: {s}");
    }
    println!();
    if !r.micro.is_empty() {
        print!("{}", micro_table(&r.micro));
        println!();
    }
    if let Some(b) = &r.build {
        print!("{}", build_table(b));
        println!();
    }
    if let Some(s) = &r.sweep {
        print!("{}", sweep_table(s));
    }
}

/// `rtmgr __cost …` (hidden): one piece of the offered work.
#[derive(clap::Args)]
pub struct CostWorkerArgs {
    /// The request, as `rtmgr_lab::cost::micro::WorkerRequest` writes it.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

pub fn worker(a: CostWorkerArgs) -> Result<Outcome> {
    rtmgr_lab::cost::micro::main(&a.args).map_err(anyhow::Error::msg)?;
    Ok(Outcome::Ok)
}
