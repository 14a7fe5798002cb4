//! `rtmgr lb SCENARIO`: lbµ, the load-balancer tester of ARTiS §3.3. Runs a
//! scenario of fake tasks (Fig. 4 format) under one or several balancers, in
//! the simulator (`--sim`) or live on this machine, and reports per task its
//! wall-clock time, share of time per CPU and context switches, plus an A/B
//! comparison of the balancers. JSON (`--json`) and a table.

use super::{bad_input, Outcome};
use anyhow::Context;
use rtmgr_core::balance::scenario::{self, Scenario};
use rtmgr_core::CpuSet;
use rtmgr_lab::lbu::{self, LiveLbConfig};
use rtmgr_linux::journal::DEFAULT_JOURNAL;
use rtmgr_sim::{BalancerKind, LbResult, SimConfig, SimReport};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct LbArgs {
    /// The scenario file (docs/balance.md: format, units, extensions).
    pub scenario: PathBuf,
    /// Balancer(s) to run, comma-separated or repeated; several give an A/B comparison.
    #[arg(long, value_delimiter = ',', default_value = "rtmgr")]
    pub balancer: Vec<String>,
    /// Run in the simulator instead of on this machine.
    #[arg(long, conflicts_with = "live")]
    pub sim: bool,
    /// Run on this machine (the default).
    #[arg(long)]
    pub live: bool,
    /// Simulator: seed of the interrupt arrivals.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Simulator: machine size (default: the scenario's `cpus`, else what its masks use).
    #[arg(long)]
    pub cpus: Option<u32>,
    /// Sampling period T of the rtmgr policy, ms.
    #[arg(long, default_value_t = 50)]
    pub sample_ms: u64,
    /// Simulator: stop after this many simulated seconds.
    #[arg(long, default_value_t = 3600)]
    pub max_s: u64,
    /// Simulator: a host that preempts a busy vCPU RATE times a second for
    /// SLICE_MS while BUSY vCPUs (default all) are busy (docs/lending.md).
    #[arg(long, value_name = "RATE,SLICE_MS[,BUSY]", requires = "sim")]
    pub host_preempt: Option<String>,
    /// Simulator: the host gives this VM the capacity of F CPUs: with all N
    /// vCPUs busy each runs F/N of the time (time-sliced in the
    /// --host-preempt slices, else 10 ms ones); the rtmgr policy starts
    /// from what the host test would measure there (docs/lending.md).
    #[arg(long, value_name = "F", requires = "sim")]
    pub host_capacity: Option<f64>,
    /// Simulator: the rtmgr policy without its lending controller (what blind lending costs).
    #[arg(long, requires = "sim")]
    pub no_lending_control: bool,
    /// Live: partition journal to use (default: rtmgr's).
    #[arg(long, value_name = "PATH")]
    pub journal: Option<PathBuf>,
    /// Print the JSON report instead of the table.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to this file (the table still goes to stdout).
    #[arg(long, value_name = "PATH")]
    pub save: Option<PathBuf>,
}

/// One balancer's run, as reported.
#[derive(Debug, Clone, Serialize)]
pub struct LbRun {
    pub balancer: String,
    pub mode: &'static str,
    /// Wall-clock seconds the run took on this machine.
    pub wall_s: f64,
    /// Simulator only: processed events per second of wall-clock time.
    pub events_per_s: Option<f64>,
    pub report: RunReport,
}

/// A simulated run reports what the simulator knows besides the lbµ figures
/// (seed, events, trace hash); a live run only the lbµ figures.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum RunReport {
    Sim(SimReport),
    Live(LbResult),
}

impl RunReport {
    pub fn result(&self) -> &LbResult {
        match self {
            RunReport::Sim(s) => &s.result,
            RunReport::Live(l) => l,
        }
    }
}

#[derive(Debug, Serialize)]
struct LbReport {
    schema: &'static str,
    scenario: String,
    runs: Vec<LbRun>,
}

pub fn load_scenario(path: &std::path::Path) -> anyhow::Result<Scenario> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => return bad_input(format!("{}: {e}", path.display())),
    };
    match scenario::parse(&text) {
        Ok(s) => Ok(s),
        Err(e) => bad_input(format!("{}: {e}", path.display())),
    }
}

fn balancers(names: &[String]) -> anyhow::Result<Vec<BalancerKind>> {
    let mut out = Vec::new();
    for n in names {
        match n.parse::<BalancerKind>() {
            Ok(b) => out.push(b),
            Err(e) => return bad_input(format!("--balancer: {e}")),
        }
    }
    Ok(out)
}

/// The simulator configuration for a scenario.
pub fn sim_config(sc: &Scenario, args: &LbArgs, b: BalancerKind) -> anyhow::Result<SimConfig> {
    let cpus = args.cpus.or(sc.cpus).unwrap_or_else(|| sc.cpus_needed());
    let rt: CpuSet = sc.rt_set();
    if rt.is_empty() {
        return bad_input("the scenario names no RT CPU: set rt_cpus or give an RT0 task");
    }
    let mut cfg = SimConfig::new(cpus, rt, b);
    cfg.seed = args.seed;
    cfg.sample_ns = args.sample_ms.max(1) * 1_000_000;
    cfg.max_ns = args.max_s.saturating_mul(1_000_000_000);
    if let Some(spec) = &args.host_preempt {
        match rtmgr_sim::HostModel::parse(spec) {
            Ok(h) => cfg.host = Some(h),
            Err(e) => return bad_input(format!("--host-preempt: {e}")),
        }
    }
    if let Some(f) = args.host_capacity {
        let model = match cfg.host {
            Some(h) => h.with_capacity(f),
            None => rtmgr_sim::HostModel::capacity_only(f),
        };
        match model {
            Ok(h) => {
                cfg.lending_prior = h.capacity_prior(cpus);
                cfg.host = Some(h);
            }
            Err(e) => return bad_input(format!("--host-capacity: {e}")),
        }
    }
    cfg.policy.lending.enabled = !args.no_lending_control;
    Ok(cfg)
}

pub fn run(args: LbArgs) -> anyhow::Result<Outcome> {
    let sc = load_scenario(&args.scenario)?;
    let kinds = balancers(&args.balancer)?;
    let mut runs = Vec::new();
    if args.sim {
        // Validate every configuration before running any.
        let mut plans = Vec::new();
        for &b in &kinds {
            let cfg = sim_config(&sc, &args, b)?;
            let tasks = rtmgr_sim::tasks_from_scenario(&sc, cfg.cpus);
            let sim = match rtmgr_sim::Sim::new(cfg, tasks) {
                Ok(s) => s,
                Err(e) => return bad_input(format!("{}: {e}", args.scenario.display())),
            };
            plans.push((b, sim));
        }
        for (b, mut sim) in plans {
            let t0 = Instant::now();
            sim.run();
            let wall = t0.elapsed().as_secs_f64();
            let report = sim.report();
            runs.push(LbRun {
                balancer: b.name().into(),
                mode: "sim",
                wall_s: wall,
                events_per_s: Some(report.events as f64 / wall.max(1e-9)),
                report: RunReport::Sim(report),
            });
        }
    } else {
        let cfg = LiveLbConfig {
            balancers: kinds,
            sample_ns: args.sample_ms.max(1) * 1_000_000,
            journal: args
                .journal
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_JOURNAL)),
        };
        let stop = super::balance::stop_on_signals()?;
        runs = lbu::run(&super::host()?, &sc, &cfg, &stop)
            .with_context(|| format!("live run of {}", args.scenario.display()))?
            .into_iter()
            .map(|r| LbRun {
                balancer: r.balancer.name().into(),
                mode: "live",
                wall_s: r.wall_s,
                events_per_s: None,
                report: RunReport::Live(r.result),
            })
            .collect();
    }
    let report = LbReport {
        schema: "rtmgr.lb/2",
        scenario: args.scenario.display().to_string(),
        runs,
    };
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(p) = &args.save {
        super::output::write_file(p, &json)?;
    }
    if args.json {
        println!("{json}");
    } else {
        print_tables(&report.runs);
    }
    Ok(Outcome::Ok)
}

/// The host model's line for a run, and the lending controller's state.
fn print_host(balancer: &str, h: &rtmgr_sim::HostReport, result: &LbResult) {
    let steal: Vec<String> = h
        .steal_ns
        .iter()
        .map(|s| format!("{:.0}", *s as f64 / 1e6))
        .collect();
    println!(
        "host model ({balancer}): {} stalls of {:.1} ms, steal per CPU ms {}, rt0 p99.9 {} us",
        h.stalls,
        h.model.slice_ns as f64 / 1e6,
        steal.join("/"),
        us(result.rt0_latency.get(999_000))
    );
    for l in &h.lending {
        let state = l
            .reason
            .clone()
            .unwrap_or_else(|| format!("lending on CPU {}", l.cpu));
        println!(
            "  {state} ({} lent windows, {} stalled, {} off periods)",
            l.lends,
            l.lends_stalled,
            l.off_periods.len()
        );
    }
}

fn secs(ns: Option<u64>) -> String {
    ns.map_or("-".into(), |v| format!("{:.3}", v as f64 / 1e9))
}

fn us(ns: Option<i64>) -> String {
    ns.map_or("-".into(), |v| format!("{:.1}", v as f64 / 1e3))
}

/// Per-run task tables, then the A/B summary.
pub fn print_tables(runs: &[LbRun]) {
    for r in runs {
        let rep = r.report.result();
        println!(
            "== {} ({}, {} CPUs, RT {}) ==",
            r.balancer,
            r.mode,
            rep.cpus,
            rep.rt_cpus.to_list()
        );
        let show_cpus = rep.cpus <= 16;
        let mut head = format!(
            "{:<14} {:<7} {:>10} {:>9}",
            "task", "class", "wall_s", "switches"
        );
        head.push_str(&format!(" {:>6}", "migr"));
        if show_cpus {
            for c in 0..rep.cpus {
                head.push_str(&format!(" {:>6}", format!("%cpu{c}")));
            }
        }
        println!("{head}");
        for t in &rep.tasks {
            let mut line = format!(
                "{:<14} {:<7} {:>10} {:>9} {:>6}",
                t.name,
                t.class.to_string(),
                secs(t.completion_ns),
                t.switches,
                t.migrations
            );
            if show_cpus {
                for p in &t.cpu_percent {
                    line.push_str(&format!(" {p:>6.1}"));
                }
            }
            println!("{line}");
        }
        println!();
    }
    println!("== A/B comparison ==");
    println!(
        "{:<8} {:>10} {:>10} {:>8} {:>10} {:>10} {:>10} {:>7} {:>7} {:>12}",
        "balancer",
        "min_s",
        "max_s",
        "max/min",
        "rt0_p50us",
        "rt0_p99us",
        "rt0_maxus",
        "migr",
        "pingp",
        "Mevents/s"
    );
    for r in runs {
        let rep = r.report.result();
        println!(
            "{:<8} {:>10} {:>10} {:>8} {:>10} {:>10} {:>10} {:>7} {:>7} {:>12}",
            r.balancer,
            secs(rep.completion_min_ns),
            secs(rep.completion_max_ns),
            rep.completion_spread
                .map_or("-".into(), |s| format!("{s:.3}")),
            us(rep.rt0_latency.get(500_000)),
            us(rep.rt0_latency.get(990_000)),
            us(rep.rt0_latency.max_ns),
            rep.migrations,
            rep.pingpongs,
            r.events_per_s
                .map_or("-".into(), |e| format!("{:.1}", e / 1e6)),
        );
    }
    for r in runs {
        if let RunReport::Sim(SimReport {
            host: Some(h),
            result,
            ..
        }) = &r.report
        {
            print_host(&r.balancer, h, result);
        }
    }
    let unfinished: usize = runs.iter().map(|r| r.report.result().unfinished).sum();
    if unfinished > 0 {
        println!("note: {unfinished} task(s) did not finish within the time limit");
    }
}
