//! `rtmgr balance`: the live ARTiS balancer (§2.2–2.3) on a partitioned
//! machine — samples /proc every T ms, pushes tasks between the NRT set and
//! the RT CPUs, evicts guests on kernel-heavy behaviour or when the latency
//! guard trips, and undoes every change when it stops (SIGTERM, Ctrl-C,
//! error). Also the live half of `rtmgr lb` (lbµ, §3.3).

use super::lb::{LbArgs, LbRun};
use super::{bad_input, host, machine_lock, require_root, Outcome};
use anyhow::Context;
use rtmgr_core::balance::scenario::Scenario;
use rtmgr_core::class::TaskClass;
use rtmgr_core::partition::{validate, PartitionConfig};
use rtmgr_core::stats::Hist;
use rtmgr_core::CpuSet;
use rtmgr_linux::balance::lbu::{self, FakeResult};
use rtmgr_linux::balance::observe::Scope;
use rtmgr_linux::balance::{run_balancer, LiveConfig, LiveReport};
use rtmgr_linux::journal::DEFAULT_JOURNAL;
use rtmgr_linux::partition::{self, Applied, ApplyOptions, PartitionGuard};
use rtmgr_linux::{cgroup, cpus, Host};
use rtmgr_sim::{BalancerKind, SimReport, TaskReport};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
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
}

/// SIGINT/SIGTERM/SIGHUP set the returned flag (the loop then restores and exits).
fn stop_on_signals() -> anyhow::Result<Arc<AtomicBool>> {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    Ok(rtmgr_linux::experiment::session::stop_flag(&[
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
    cfg.period_ns = args.period_ms * 1_000_000;
    cfg.guard = !args.no_guard;
    cfg.guard_interval_ns = args.guard_interval_ms * 1_000_000;
    cfg.duration_ns = args.duration_s.map(|s| (s * 1e9) as u64);
    cfg.scan_every = args.scan_every;
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

/// Live lbµ: run the scenario's fake tasks on this machine under each balancer.
pub fn live_lb(sc: &Scenario, kinds: &[BalancerKind], args: &LbArgs) -> anyhow::Result<Vec<LbRun>> {
    let host = host()?;
    let online = cpus::online(&host).context("reading online CPUs")?;
    if kinds.contains(&BalancerKind::Artis) {
        return bad_input("the ARTiS balancer needs the ARTiS kernel patch: use --sim for it");
    }
    let tasks = lbu::fake_tasks(sc, &online);
    let needs_root =
        kinds.iter().any(|&k| k != BalancerKind::Linux) || tasks.iter().any(|t| t.policy.is_some());
    if needs_root {
        require_root(&host, "a live lb run with RT tasks or a partition")?;
    }
    let journal = args
        .journal
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_JOURNAL));
    let rt = sc.rt_set();
    let plan = validate(
        &PartitionConfig {
            rt_cpus: Some(rt.clone()),
            ..Default::default()
        },
        None,
        &online,
    );
    let plan = match plan {
        Ok(p) => p,
        Err(e) => return bad_input(format!("scenario RT CPUs {}: {e}", rt.to_list())),
    };
    let _lock = if needs_root {
        machine_lock(&host)?
    } else {
        None
    };
    let stop = stop_on_signals()?;
    let mut runs = Vec::new();
    for &kind in kinds {
        let t0 = std::time::Instant::now();
        let (results, rt_cpus) = match kind {
            BalancerKind::Linux => {
                let r = lbu::run(&tasks, online.len(), None, |_| {}, stop.clone())?;
                (r, CpuSet::new())
            }
            _ => {
                // An applied partition is used as is; else a temporary one.
                let existing = applied_partition(&host, &journal)?;
                let _temp;
                let applied = match existing {
                    Some(a) => a,
                    None => {
                        let g = PartitionGuard::apply(
                            &host,
                            &plan,
                            &ApplyOptions {
                                journal: journal.clone(),
                                replace: false,
                            },
                        )
                        .context("applying a temporary partition for the run")?;
                        let a = g.applied().clone();
                        _temp = g;
                        a
                    }
                };
                let r = run_partitioned(&host, &applied, &tasks, &online, kind, args, &stop)?;
                (r, applied.plan.rt.clone())
            }
        };
        if stop.load(Ordering::Relaxed) {
            anyhow::bail!("interrupted");
        }
        runs.push(LbRun {
            balancer: kind.name().into(),
            mode: "live",
            wall_s: t0.elapsed().as_secs_f64(),
            events_per_s: None,
            report: live_report(kind, &online, rt_cpus, &results),
        });
    }
    Ok(runs)
}

#[allow(clippy::too_many_arguments)]
fn run_partitioned(
    host: &Host,
    applied: &Applied,
    tasks: &[lbu::FakeTask],
    online: &CpuSet,
    kind: BalancerKind,
    args: &LbArgs,
    stop: &Arc<AtomicBool>,
) -> anyhow::Result<Vec<FakeResult>> {
    let nrt = applied.plan.nrt.clone();
    let mut tasks = tasks.to_vec();
    for t in tasks.iter_mut().filter(|t| t.class != TaskClass::Rt0) {
        // The partition confines ordinary tasks to the NRT CPUs.
        t.mask = nrt.clone();
    }
    let classes: Vec<TaskClass> = tasks.iter().map(|t| t.class).collect();
    let (h, a) = (host.clone(), applied.clone());
    let prepare: lbu::Prepare = Arc::new(move |i, tid| {
        let dir = match (classes[i], &a.nrt_cgroup) {
            (TaskClass::Rt0, _) => Some(a.rt_cgroup.clone()),
            (_, Some(n)) => Some(n.clone()),
            (_, None) => None,
        };
        match (dir, &a.layout) {
            (Some(d), cgroup::Layout::V1(_)) => {
                cgroup::attach(&h, &a.layout, &d, tid).map_err(|e| e.to_string())
            }
            _ => Ok(()),
        }
    });
    let bal_stop = Arc::new(AtomicBool::new(false));
    std::thread::scope(|s| -> anyhow::Result<Vec<FakeResult>> {
        let mut bal = None;
        let res = lbu::run(
            &tasks,
            online.len(),
            Some(prepare),
            |tids| {
                if kind == BalancerKind::Rtmgr {
                    // RT0 tasks are observed too (fixed: their time is the RT load).
                    let scope: std::collections::BTreeSet<u32> = tids.iter().copied().collect();
                    let mut cfg = LiveConfig::new(applied);
                    cfg.period_ns = args.sample_ms.max(1) * 1_000_000;
                    cfg.scope = Scope::Tids(scope);
                    let bal_stop = bal_stop.clone();
                    bal =
                        Some(s.spawn(move || {
                            run_balancer(host, applied, &cfg, &bal_stop, |_, _| {})
                        }));
                }
            },
            stop.clone(),
        );
        bal_stop.store(true, Ordering::Relaxed);
        if let Some(b) = bal {
            let rep = b
                .join()
                .map_err(|_| anyhow::anyhow!("balancer thread panicked"))??;
            eprintln!(
                "rtmgr lb: live balancer moves {:?}, guard's highest recent p99 {:?} ns",
                rep.moves, rep.guard_p99_max_ns
            );
            if !rep.restore_failures.is_empty() {
                anyhow::bail!(
                    "balancer could not restore: {}",
                    rep.restore_failures.join("; ")
                );
            }
        }
        Ok(res?)
    })
}

fn live_report(
    kind: BalancerKind,
    online: &CpuSet,
    rt: CpuSet,
    results: &[FakeResult],
) -> SimReport {
    let mut lat = Hist::new();
    let tasks: Vec<TaskReport> = results
        .iter()
        .map(|r| {
            let total: u64 = r.cpu_ns.iter().sum();
            if r.class == Some(TaskClass::Rt0) {
                for &l in &r.wake_latency_ns {
                    lat.record(l as i64);
                }
            }
            TaskReport {
                name: r.name.clone(),
                class: r.class.unwrap_or(TaskClass::Linux),
                completion_ns: Some(r.wall_ns),
                cpu_ns: total,
                kernel_ns: r.kernel_ns,
                cpu_percent: r
                    .cpu_ns
                    .iter()
                    .map(|&x| 100.0 * x as f64 / total.max(1) as f64)
                    .collect(),
                switches: r.switches,
                migrations: r.migrations,
                pingpongs: 0,
            }
        })
        .collect();
    let (min, max, spread) = rtmgr_sim::completion(&tasks);
    SimReport {
        balancer: kind,
        seed: 0,
        cpus: online.len() as u32,
        rt_cpus: rt,
        sim_ns: max.unwrap_or(0),
        events: 0,
        trace_hash: 0,
        migrations: tasks.iter().map(|t| t.migrations).sum(),
        pingpongs: 0,
        unfinished: 0,
        rt0_latency: lat.summary(0),
        cpu_busy_percent: Vec::new(),
        completion_min_ns: min,
        completion_max_ns: max,
        completion_spread: spread,
        tasks,
    }
}
