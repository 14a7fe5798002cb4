//! `rtmgr balance`: the live ARTiS balancer (§2.2–2.3) on a partitioned
//! machine — samples /proc every T ms, pushes tasks between the NRT set and
//! the RT CPUs, evicts guests on kernel-heavy behaviour or when the latency
//! guard trips, and undoes every change when it stops (SIGTERM, Ctrl-C,
//! error).

use super::{bad_input, host, machine_lock, require_root, Outcome};
use anyhow::Context;
use rtmgr_core::balance::PolicyConfig;
use rtmgr_linux::balance::{run_balancer, LiveConfig, LiveReport};
use rtmgr_linux::journal::DEFAULT_JOURNAL;
use rtmgr_linux::partition::{self, Applied};
use rtmgr_linux::Host;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[derive(clap::Args)]
pub struct BalanceArgs {
    /// Sampling period T in ms.
    #[arg(long, default_value_t = 50)]
    pub period_ms: u64,
    /// Stop by itself after this many seconds (default: until SIGTERM/Ctrl-C).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Do not run the latency guard.
    #[arg(long)]
    pub no_guard: bool,
    /// Period of the guard's probe on each RT CPU, ms.
    #[arg(long, default_value_t = 10)]
    pub guard_interval_ms: u64,
    /// Full /proc scan every this many samples (hot tasks are read every sample).
    #[arg(long, default_value_t = 20)]
    pub scan_every: u64,
    /// The partition journal.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_JOURNAL)]
    pub journal: PathBuf,
    /// Print the final report as JSON.
    #[arg(long)]
    pub json: bool,
    /// The policy's tunables as TOML (PolicyConfig's fields, `[lending]` for
    /// the lending controller; docs/balance.md); missing keys keep their defaults
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Start lending on whatever the cached host-preemption test (`rtmgr
    /// status --host-test`) found; the lending controller still learns from
    /// the lends themselves
    #[arg(long)]
    pub ignore_host_test: bool,
}

/// SIGINT/SIGTERM/SIGHUP set the returned flag (the loop then restores and exits).
pub fn stop_on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    Ok(rtmgr_lab::experiment::session::stop_flag(&[
        SIGINT, SIGTERM, SIGHUP,
    ])?)
}

fn applied_partition(host: &Host, journal: &std::path::Path) -> anyhow::Result<Option<Applied>> {
    partition::current(host, journal).context("reading the partition journal")
}

pub fn run(args: BalanceArgs) -> anyhow::Result<Outcome> {
    let host = host()?;
    if args.period_ms == 0 || args.guard_interval_ms == 0 {
        return bad_input("--period-ms and --guard-interval-ms must be > 0");
    }
    let policy = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()));
            match text.map(|t| PolicyConfig::from_toml(&t).map_err(|e| (path, e))) {
                Ok(Ok(p)) => Some(p),
                Ok(Err((path, e))) => return bad_input(format!("{}: {e}", path.display())),
                Err(e) => return bad_input(e.to_string()),
            }
        }
        None => None,
    };
    require_root(&host, "rtmgr balance")?;
    let _lock = machine_lock(&host)?;
    let Some(applied) = applied_partition(&host, &args.journal)? else {
        return bad_input(format!(
            "no partition is applied (journal {}): run `rtmgr partition apply --rt-cpus LIST` first",
            args.journal.display()
        ));
    };
    let stop = stop_on_signals()?;
    let mut cfg = LiveConfig::new(&applied);
    if let Some(p) = policy {
        // The partition's latency bound unless the file sets one.
        let bound = p.latency_bound_ns.or(cfg.policy.latency_bound_ns);
        cfg.policy = PolicyConfig {
            latency_bound_ns: bound,
            ..p
        };
    }
    cfg.period_ns = args.period_ms * 1_000_000;
    cfg.guard = !args.no_guard;
    cfg.guard_interval_ns = args.guard_interval_ms * 1_000_000;
    cfg.duration_ns = args.duration_s.map(|s| (s * 1e9) as u64);
    cfg.scan_every = args.scan_every;
    cfg.read_host_cache = !args.ignore_host_test;
    eprintln!(
        "rtmgr balance: RT {} NRT {}, T = {} ms, latency bound {} µs{}; Ctrl-C or SIGTERM stops and restores",
        applied.plan.rt.to_list(),
        applied.plan.nrt.to_list(),
        args.period_ms,
        applied.plan.latency_bound_us,
        if cfg.guard { "" } else { " (guard off)" }
    );
    let report = run_balancer(&host, &applied, &cfg, &stop, |r, moves| {
        for m in moves {
            tracing::info!(
                "sample {}: task {} {:?} -> {:?} ({:?})",
                r.samples,
                m.task,
                m.from,
                m.to,
                m.reason
            );
        }
    })?;
    print_live(&report, args.json)?;
    if !report.restore_failures.is_empty() {
        anyhow::bail!("could not restore: {}", report.restore_failures.join("; "));
    }
    Ok(Outcome::Ok)
}

fn print_live(r: &LiveReport, json: bool) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(r)?);
        return Ok(());
    }
    println!("samples            {}", r.samples);
    println!("moves              {:?}", r.moves);
    println!("restored           {} task(s)", r.restored);
    println!("wall               {:.2} s", r.wall_s);
    println!(
        "balancer CPU       {:.4} s = {:.3} % of one CPU",
        r.balancer_cpu_s, r.overhead_percent
    );
    println!("tasks known (max)  {}", r.tasks_known_max);
    println!("task reads/sample  {:.1}", r.mean_task_reads_per_sample);
    println!(
        "full scans         {} skipped (no CPU pressure), /proc listed {} times, {} stat sweeps, {} files kept open",
        r.scans_skipped_calm, r.proc_listings, r.stat_sweeps, r.open_files_max
    );
    if !r.psi {
        println!("note: no /proc/pressure/cpu (PSI off): every full scan reads every task");
    }
    if !r.schedstat {
        println!("note: no per-task schedstat (CONFIG_SCHED_INFO off): tasks are checked through stat, which costs more");
    }
    println!(
        "lends              {} ({} sent away at a kernel entry{}; user-mode prediction held {})",
        r.lends,
        r.kernel_entry_evictions,
        if r.entry_syscalls.is_empty() {
            String::new()
        } else {
            let v: Vec<String> = r
                .entry_syscalls
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            format!(": {}", v.join(", "))
        },
        r.prediction_hit_rate
            .map(|h| format!("{:.0} %", 100.0 * h))
            .unwrap_or_else(|| "-".into())
    );
    if let (Some(mean), Some(max)) = (r.entry_evict_delay_mean_ns, r.entry_evict_delay_max_ns) {
        println!(
            "entry → eviction   mean {:.1} µs, max {:.1} µs",
            mean as f64 / 1e3,
            max as f64 / 1e3
        );
    }
    println!(
        "guard trips        {} ({} guests sent away at once)",
        r.guard_trips, r.guard_evictions
    );
    if !r.entry_watch {
        println!("note: kernel entries of guests not watched (no tracefs): guests leave at the next sample");
    }
    for n in &r.notes {
        println!("note: {n}");
    }
    for l in &r.lending {
        match &l.reason {
            Some(why) => println!("{why}"),
            None => println!(
                "lending on on CPU {}: {} lent windows judged, {} stalled by the host, {} late",
                l.cpu, l.lends, l.lends_stalled, l.lends_late
            ),
        }
    }
    if r.idle_steps > 0 {
        println!(
            "idle steps         {} (lending off everywhere: looked once a second)",
            r.idle_steps
        );
    }
    for (c, v) in &r.guard_p99_max_ns {
        println!(
            "guard CPU {c}: highest recent p99 {:.1} µs",
            *v as f64 / 1e3
        );
    }
    for f in &r.refused {
        println!("refused: {f}");
    }
    Ok(())
}
