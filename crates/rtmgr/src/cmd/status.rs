//! `rtmgr status [--json]`: is this machine fit for real time? Each item with
//! a verdict and why it matters (McKenney §2.1; ARTiS §2.1). Read-only, except
//! `--host-test`, which first runs the host-preemption test (issue 20; it loads
//! every CPU for a few seconds) and caches its result for status, advise and
//! the balancer.

use super::flags::parse_duration;
use super::{host, Outcome};
use rtmgr_core::CpuSet;
use rtmgr_lab::experiment::session::Session;
use rtmgr_lab::host_test::{default_cpus, measure_host_preemption, HostTestConfig};
use rtmgr_linux::host_preemption::{write_host_preemption, CACHE_PATH};
use rtmgr_linux::journal::DEFAULT_JOURNAL;
use rtmgr_linux::status::{self, Verdict};
use std::path::PathBuf;
use std::time::Duration;

#[derive(clap::Args)]
pub struct StatusArgs {
    /// Machine-readable output (schema rtmgr.status/1).
    #[arg(long)]
    pub json: bool,
    /// List every IRQ and the pinned kernel threads of each CPU.
    #[arg(long, short)]
    pub verbose: bool,
    /// The partition journal (where `partition apply` wrote the applied partition).
    #[arg(long, default_value = DEFAULT_JOURNAL, value_name = "PATH")]
    pub journal: PathBuf,
    /// First run the host-preemption test (root; it loads every CPU for
    /// --host-test-duration, so it is refused while RT tasks run in an applied
    /// partition) and cache its result in /run/rtmgr/host-preemption.json.
    #[arg(long)]
    pub host_test: bool,
    /// The CPUs to test (default: the applied partition's RT CPUs, else the
    /// one `--rt-cpus auto` would choose).
    #[arg(long, value_name = "LIST", requires = "host_test")]
    pub host_test_cpus: Option<CpuSet>,
    /// How long the host test runs in all (short phases, alternately with and
    /// without a spinner beside the probe).
    #[arg(long, default_value = "4s", value_parser = parse_duration, requires = "host_test")]
    pub host_test_duration: Duration,
    /// Then how long the capacity measurement runs (1…N spinners, one per
    /// CPU, in interleaved phases; status item `cpu_capacity`); 0 skips it.
    #[arg(long, default_value = "2s", value_parser = parse_duration, requires = "host_test")]
    pub host_test_capacity_duration: Duration,
}

/// Run the host test and cache a complete result (an interrupted one is only
/// shown; then false).
fn host_test(a: &StatusArgs) -> anyhow::Result<bool> {
    let s = Session::open(host()?, "rtmgr status --host-test")?;
    let cpus = match &a.host_test_cpus {
        Some(c) => c.clone(),
        None => default_cpus(&s)?,
    };
    let mut cfg = HostTestConfig::new(cpus.clone());
    cfg.duration = a.host_test_duration;
    cfg.capacity_duration = a.host_test_capacity_duration;
    eprintln!(
        "rtmgr: host test on CPU {cpus}: every other CPU busy for {:.1} s, then 1…N spinners for {:.1} s",
        cfg.duration.as_secs_f64(),
        cfg.capacity_duration.as_secs_f64()
    );
    let r = measure_host_preemption(&s, &cfg)?;
    if let Some(why) = &r.setup.partial {
        eprintln!("rtmgr: host test {why}; not cached: {}", r.verdict);
        return Ok(false);
    }
    write_host_preemption(&s.host, &r).map_err(|e| anyhow::anyhow!("write {CACHE_PATH}: {e}"))?;
    Ok(true)
}

pub fn run(a: StatusArgs) -> anyhow::Result<Outcome> {
    if a.host_test && !host_test(&a)? {
        return Ok(Outcome::Code(130));
    }
    let r = status::collect(&host()?, &a.journal);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(Outcome::Ok);
    }
    for i in &r.items {
        let tag = match i.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "WARN",
        };
        println!("{tag} {:<17} {}", i.name, i.value);
        if i.verdict == Verdict::Warn && !i.why.is_empty() {
            println!("     {:<17} ↳ {}", "", i.why);
        }
    }
    if a.verbose {
        println!("\nIRQ   affinity  effective  movable                      count  name");
        for q in &r.irqs {
            println!(
                "{:<5} {:<9} {:<10} {:<28} {:>6}  {}",
                q.irq,
                q.affinity,
                q.effective.clone().unwrap_or_else(|| "-".into()),
                q.movable,
                q.total,
                q.name
            );
        }
        println!("\npinned per-CPU kernel threads:");
        for (cpu, names) in &r.pinned_kthreads {
            println!("  cpu{cpu}: {}", names.join(" "));
        }
    } else {
        println!("(--verbose lists every IRQ and pinned kernel thread; --json for scripts)");
    }
    Ok(Outcome::Ok)
}
