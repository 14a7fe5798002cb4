//! `rtmgr measure budget`: flags and output of the budget experiment
//! (budget-based RTAI §4; engine: `rtmgr_lab::budget::run`): the table,
//! and the JSON report and Fig. 6-style plot where `--out`/`--json`/`--svg` say
//! (by default a new directory under the user's state directory).

use super::output::{write_report, OutArgs};
use super::{bad_input, Outcome};
use anyhow::Context;
use rtmgr_lab::budget::budget_rates_svg;
use rtmgr_lab::budget::run::{self as budget, taskset, BudgetConfig, Experiment};
use rtmgr_lab::budget::{budget_table, BudgetRun};
use rtmgr_linux::machine_access::host_from_env;
use rtmgr_rt::periodic::SoftVariant;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct BudgetArgs {
    /// Which part of seed §4: overhead (§4.1), precision (§4.2), group (a
    /// budget shared by two runaway tasks, seed §5) or all.
    #[arg(long, default_value = "all", value_parser = ["overhead", "precision", "group", "all"])]
    experiment: String,
    /// Enforcement modes to run: soft, hard or both.
    #[arg(long, default_value = "both", value_parser = ["soft", "hard", "both"])]
    mode: String,
    /// Soft-mode variants (comma-separated): rearm, early-spin, compensate.
    #[arg(
        long,
        default_value = "rearm,early-spin,compensate",
        value_delimiter = ','
    )]
    variants: Vec<SoftVariant>,
    /// §4.2: periods of the longest-period task to record (the run lasts that long).
    #[arg(long, default_value_t = 500)]
    periods: u64,
    /// §4.1: run time per configuration, ms.
    #[arg(long, default_value_t = 2000)]
    overhead_ms: u64,
    /// §4.2 task set file (TOML, `[[task]]` tables; see docs/budget.md).
    #[arg(long)]
    taskset: Option<PathBuf>,
    /// Interleave the modes in this many rounds (the run time is split).
    #[arg(long, default_value_t = 5)]
    rounds: u64,
    /// Report (`report.json`) and the Fig. 6-style budget-rate plot (`budget.svg`).
    #[command(flatten)]
    out: OutArgs,
}

pub fn run(args: BudgetArgs) -> anyhow::Result<Outcome> {
    let taskset = match &args.taskset {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            match taskset::parse(&text) {
                Ok(set) => Some(set),
                Err(e) => return bad_input(format!("{}: {e}", p.display())),
            }
        }
        None => None,
    };
    let cfg = BudgetConfig {
        experiment: match args.experiment.as_str() {
            "overhead" => Experiment::Overhead,
            "precision" => Experiment::Precision,
            "group" => Experiment::Group,
            _ => Experiment::All,
        },
        soft: args.mode != "hard",
        hard: args.mode != "soft",
        variants: args.variants.clone(),
        periods: args.periods,
        overhead_ms: args.overhead_ms,
        taskset,
        rounds: args.rounds,
    };
    let report = budget::run(&host_from_env()?, &cfg, &mut rtmgr_lab::experiment::Quiet)?;
    print!("{}", budget_table(&report.runs));
    let prec: Vec<&BudgetRun> = report
        .runs
        .iter()
        .filter(|r| r.experiment == "precision")
        .collect();
    // The plot shows the precision runs: written when there are some, or when asked for.
    let svgs = if prec.is_empty() && args.out.svg.is_none() {
        vec![]
    } else {
        vec![("", budget_rates_svg(&prec))]
    };
    write_report(&args.out, "budget", &report, &svgs)?;
    Ok(if report.interrupted {
        Outcome::Code(130)
    } else {
        Outcome::Ok
    })
}
