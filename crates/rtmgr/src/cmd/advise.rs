//! `rtmgr advise` (issue 14; McKenney §5 Fig. 9): real time or real fast?
//! Flags and a workload file describe the work (what only the user knows);
//! `rtmgr_lab::advice::run` gathers the machine's facts and earlier
//! reports; `rtmgr_lab::advice` decides. Prints the answer with every reason,
//! or the versioned JSON (`rtmgr.advice/1`) with `--json`.

use super::flags::parse_duration;
use super::output::{write_file, write_json};
use super::{bad_input, Outcome};
use anyhow::{Context, Result};
use rtmgr_lab::advice::curves::{crossovers_text, delay_curves, DelayCurves};
use rtmgr_lab::advice::delay_svg;
use rtmgr_lab::advice::run::{gather, FactsConfig};
use rtmgr_lab::advice::{advice_text, advise, parse_workload, Workload};
use rtmgr_linux::machine_access::host_from_env;
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct AdviseArgs {
    /// Only throughput matters (no work item has to complete in time).
    #[arg(long)]
    pub throughput_only: bool,
    /// Processing time of one work item: 100us, 2ms, …
    #[arg(long, value_parser = parse_duration)]
    pub work: Option<Duration>,
    /// Deadline of a work item, from its release to its completion.
    #[arg(long, value_parser = parse_duration)]
    pub deadline: Option<Duration>,
    /// Period of the work items (periodic work gets a daemon reservation W every P).
    #[arg(long, value_parser = parse_duration)]
    pub period: Option<Duration>,
    /// Peak CPU utilisation of the real-time work per RT CPU, 0..1.
    #[arg(long)]
    pub utilization: Option<f64>,
    /// Memory the real-time work must lock: 512M, 2G, …
    #[arg(long, value_parser = parse_size)]
    pub memory: Option<u64>,
    /// Share of the work spent in system calls and kernel services, 0..1.
    #[arg(long)]
    pub kernel_share: Option<f64>,
    /// A workload file (TOML: throughput_only, work_us, deadline_us, period_us,
    /// utilization, memory_mib, kernel_share); flags override it.
    #[arg(long)]
    pub workload: Option<PathBuf>,
    /// Earlier reports to answer from: `rtmgr evaluate`'s (the tail per
    /// configuration) and `rtmgr measure cost`'s (the slowdowns). Repeatable.
    #[arg(long)]
    pub from: Vec<PathBuf>,
    /// The latency percentile taken from an evaluate report.
    #[arg(long, default_value = "p99.9", value_parser = parse_percentile)]
    pub percentile: u32,
    /// How long to watch steal time, with every CPU kept busy by SCHED_IDLE
    /// spinners (not needed when --from has an evaluate report, whose `stock`
    /// steal is used, or when `rtmgr status --host-test` cached a result).
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub steal_window: Duration,
    /// Print the advice as JSON (schema rtmgr.advice/1) instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also write McKenney Figs. 5–7 from the `--from` reports (an evaluate
    /// and a cost report): total delay against work duration, delay.json
    /// (rtmgr.delay/1) and delay-{user,build,kernel}.svg, into DIR.
    #[arg(long, value_name = "DIR")]
    pub curves: Option<PathBuf>,
}

/// "512M", "2G", "1.5GiB", "4096" (bytes).
pub fn parse_size(s: &str) -> std::result::Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("bad size {s:?}: expected e.g. 512M, 2G"))?;
    let mult = match unit.trim().trim_end_matches("iB").trim_end_matches('B') {
        "" => 1u64,
        "K" | "k" => 1 << 10,
        "M" | "m" => 1 << 20,
        "G" | "g" => 1 << 30,
        "T" | "t" => 1 << 40,
        u => return Err(format!("bad size unit {u:?} in {s:?}: use K, M, G or T")),
    };
    Ok((v * mult as f64) as u64)
}

/// "p99.9" → 999000 ppm.
pub fn parse_percentile(s: &str) -> std::result::Result<u32, String> {
    let v: f64 = s
        .trim()
        .trim_start_matches('p')
        .parse()
        .map_err(|_| format!("bad percentile {s:?}: expected e.g. p99, p99.9"))?;
    if !(0.0..100.0).contains(&v) {
        return Err(format!("percentile {s:?} must be below p100"));
    }
    Ok((v * 10_000.0).round() as u32)
}

fn fraction(name: &str, v: Option<f64>) -> Result<Option<f64>> {
    match v {
        Some(x) if !(0.0..=1.0).contains(&x) => bad_input(format!("--{name} {x}: expected 0..1")),
        _ => Ok(v),
    }
}

/// The workload: the file, then the flags over it.
fn workload(a: &AdviseArgs) -> Result<Workload> {
    let mut w = match &a.workload {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?;
            match parse_workload(&text) {
                Ok(w) => w,
                Err(e) => return bad_input(format!("{}: {e}", p.display())),
            }
        }
        None => Workload::default(),
    };
    let us = |d: Duration| d.as_nanos() as f64 / 1e3;
    if a.throughput_only {
        w.throughput_only = Some(true);
    }
    w.work_us = a.work.map(us).or(w.work_us);
    w.deadline_us = a.deadline.map(us).or(w.deadline_us);
    w.period_us = a.period.map(us).or(w.period_us);
    w.utilization = fraction("utilization", a.utilization)?.or(w.utilization);
    w.kernel_share = fraction("kernel-share", a.kernel_share)?.or(w.kernel_share);
    w.memory_mib = a
        .memory
        .map(|b| b as f64 / (1u64 << 20) as f64)
        .or(w.memory_mib);
    // A deadline means completion times matter.
    if w.throughput_only.is_none() && w.deadline_us.is_some() {
        w.throughput_only = Some(false);
    }
    Ok(w)
}

pub fn run(a: AdviseArgs) -> Result<Outcome> {
    let w = workload(&a)?;
    let cfg = FactsConfig {
        steal_window: a.steal_window,
        from: a.from.clone(),
        percentile_ppm: a.percentile,
    };
    let facts = gather(&host_from_env()?, &cfg)?;
    let curves = match (&a.curves, &facts.tail, &facts.cost) {
        (None, _, _) => None,
        (Some(dir), Some(t), Some(c)) => Some((dir, delay_curves(t, c))),
        (Some(_), _, _) => {
            return bad_input(
                "--curves needs an evaluate report and a cost report in --from (the tail and the slowdowns)",
            )
        }
    };
    let advice = advise(&w, &facts);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&advice)?);
    } else {
        print!("{}", advice_text(&advice));
    }
    if let Some((dir, d)) = curves {
        write_curves(dir, &d)?;
        if !a.json {
            println!(
                "\ntotal delay = {} latency + work x slowdown (McKenney Figs. 5-7):",
                d.percentile
            );
            print!("{}", crossovers_text(&d));
        }
    }
    Ok(Outcome::Ok)
}

/// delay.json and one SVG per kind of work.
fn write_curves(dir: &std::path::Path, d: &DelayCurves) -> Result<()> {
    write_json(&dir.join("delay.json"), d)?;
    for k in &d.kinds {
        let title = format!("total delay at {}: {}", d.percentile, k.what);
        let path = dir.join(format!("delay-{}.svg", k.kind));
        write_file(&path, &delay_svg(&title, k))?;
    }
    eprintln!("delay curves: {}/delay.json and delay-*.svg", dir.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_percentiles() {
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("1.5K"), Ok(1536));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("2X").is_err());
        assert_eq!(parse_percentile("p99.9"), Ok(999_000));
        assert_eq!(parse_percentile("99"), Ok(990_000));
        assert!(parse_percentile("p100").is_err());
    }
}
