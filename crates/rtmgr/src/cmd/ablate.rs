//! `rtmgr evaluate --ablate` (issue 14): flags glue and output of the
//! ablation engine `rtmgr_lab::ablation::run` — which knob buys what —
//! with the exit-code gates for CI pipelines (exit 3 when a gate fails).

use super::flags::parse_duration;
use super::output::{write_file, write_json};
use super::progress::Bar;
use super::{output, Outcome};
use anyhow::Result;
use clap::Args;
use rtmgr_lab::ablation::run::{self as ablate, AblateConfig};
use rtmgr_lab::ablation::{ablation_table, Gate, FULL};
use rtmgr_lab::experiment::evaluate::EvaluateConfig;
use rtmgr_lab::plot::percentile_svg;
use rtmgr_lab::report::us;
use rtmgr_linux::machine_access::host_from_env;
use std::time::Duration;

/// `rtmgr evaluate`'s ablation flags (flattened into its arguments).
#[derive(Args, Debug, Clone)]
pub struct AblationFlags {
    /// Which knob buys what: stock and one configuration per cumulative
    /// isolation step of the partition (cpusets, + IRQs, + workqueues, + each
    /// run-time knob, + the balancer), with 95 % intervals (docs/evaluate.md).
    #[arg(long, conflicts_with = "trace")]
    pub ablate: bool,
    /// Gate (with --ablate): exit 3 when the gated step's p99 exceeds this.
    #[arg(long, requires = "ablate", value_parser = parse_duration)]
    pub max_p99: Option<Duration>,
    /// Gate (with --ablate): exit 3 when the gated step's p99.9 exceeds this.
    #[arg(long = "max-p99.9", requires = "ablate", value_parser = parse_duration)]
    pub max_p999: Option<Duration>,
    /// Gate (with --ablate): exit 3 when the gated step's maximum exceeds this.
    #[arg(long, requires = "ablate", value_parser = parse_duration)]
    pub max_latency: Option<Duration>,
    /// The step the gates check (the start of its name; default: full).
    #[arg(long, requires = "ablate")]
    pub gate_config: Option<String>,
}

/// The exit code of a run whose gate failed.
pub const GATE_FAILED: u8 = 3;

/// The gates the flags ask for.
pub fn gates(args: &AblationFlags) -> Vec<Gate> {
    let ns = |d: std::time::Duration| d.as_nanos() as i64;
    let mut g = Vec::new();
    if let Some(d) = args.max_p99 {
        g.push(Gate {
            ppm: Some(990_000),
            limit_ns: ns(d),
        });
    }
    if let Some(d) = args.max_p999 {
        g.push(Gate {
            ppm: Some(999_000),
            limit_ns: ns(d),
        });
    }
    if let Some(d) = args.max_latency {
        g.push(Gate {
            ppm: None,
            limit_ns: ns(d),
        });
    }
    g
}

pub fn run(
    args: &AblationFlags,
    out: Option<std::path::PathBuf>,
    evaluate: EvaluateConfig,
) -> Result<Outcome> {
    let cfg = AblateConfig {
        evaluate,
        gates: gates(args),
        gate_config: args.gate_config.clone().unwrap_or_else(|| FULL.into()),
    };
    let outcome = {
        let mut bar = Bar::new(cfg.evaluate.total);
        ablate::run(&host_from_env()?, &cfg, &mut bar)?
    };
    let r = &outcome.report;
    println!(
        "which knob buys what: RT CPU {} latency under the {} load, {} of {} rounds, {:.1} s per configuration per round\n",
        r.rt_cpus,
        r.load,
        r.rounds_done,
        r.rounds_planned,
        r.segment_ns as f64 / 1e9
    );
    print!("{}", ablation_table(&r.configs));
    let rows: Vec<(String, &rtmgr_lab::report::CpuResult)> = r
        .configs
        .iter()
        .map(|c| (c.name.clone(), &c.result))
        .collect();
    if let Some(t) = rtmgr_lab::report::two_tails_table(&rows) {
        print!("{t}");
    }
    for g in &r.gates {
        println!(
            "gate {} of {} ≤ {} µs: {} ({} µs)",
            g.what,
            g.config,
            us(Some(g.limit_ns)),
            if g.passed { "passed" } else { "FAILED" },
            us(g.value_ns)
        );
    }
    let dir = out.unwrap_or_else(|| output::default_dir("ablate"));
    write_json(&dir.join("report.json"), r)?;
    let named: Vec<(&str, &rtmgr_core::stats::HistData)> = r
        .configs
        .iter()
        .filter(|c| c.result.hist.n > 0)
        .map(|c| (c.name.as_str(), &c.result.hist))
        .collect();
    write_file(
        &dir.join("ablation-percentiles.svg"),
        &percentile_svg("RT CPU wake-up latency per isolation step", &named),
    )?;
    eprintln!("report: {}/report.json", dir.display());
    if let Some(e) = outcome.failure {
        return Err(
            anyhow::Error::new(e).context("--ablate stopped early (partial report written)")
        );
    }
    if let Some(p) = &r.header.partial_reason {
        eprintln!("rtmgr: {p}; partial report written");
        return Ok(Outcome::Code(130));
    }
    if r.gates.iter().any(|g| !g.passed) {
        return Ok(Outcome::Code(GATE_FAILED));
    }
    Ok(Outcome::Ok)
}
