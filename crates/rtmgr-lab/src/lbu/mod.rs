//! lbµ on this machine (ARTiS §3.3): a scenario's fake tasks run under each
//! balancer in turn — Linux as it is, the static shield, and the live rtmgr
//! balancer — and each run reports the same lbµ figures as the simulator.
//! ARTiS itself needs its kernel patch: that balancer is the simulator's alone.

pub mod fake_tasks;

use crate::experiment::{bad_input, Context, Error, Result};
use fake_tasks::{FakeResult, FakeTask};
use rtmgr_core::balance::lbu::{BalancerKind, LbResult, TaskReport};
use rtmgr_core::balance::scenario::Scenario;
use rtmgr_core::class::TaskClass;
use rtmgr_core::partition::{validate, PartitionConfig};
use rtmgr_core::stats::Hist;
use rtmgr_core::CpuSet;
use rtmgr_linux::balance::check_restored;
use rtmgr_linux::balance::observe::Scope;
use rtmgr_linux::balance::{run_balancer, BalanceError, LiveConfig};
use rtmgr_linux::machine_access::{machine_lock, require_root};
use rtmgr_linux::partition::{self, Applied, ApplyOptions, PartitionGuard};
use rtmgr_linux::{cgroup, cpus, Host};
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// How the live runs go.
#[derive(Debug, Clone)]
pub struct LiveLbConfig {
    pub balancers: Vec<BalancerKind>,
    /// Sampling period T of the rtmgr balancer.
    pub sample_ns: u64,
    /// The partition journal: an applied partition is used as it is, else a
    /// temporary one is applied (and reset) for each partitioned run.
    pub journal: PathBuf,
}

/// One balancer's live run.
#[derive(Debug, Clone)]
pub struct LiveRun {
    pub balancer: BalancerKind,
    /// Wall-clock seconds the run took.
    pub wall_s: f64,
    pub result: LbResult,
}

/// Run the scenario under each balancer, one after the other.
pub fn run(
    host: &Host,
    sc: &Scenario,
    cfg: &LiveLbConfig,
    stop: &Arc<AtomicBool>,
) -> Result<Vec<LiveRun>> {
    let online = cpus::online(host).context("reading online CPUs")?;
    if cfg.balancers.contains(&BalancerKind::Artis) {
        return bad_input("the ARTiS balancer needs the ARTiS kernel patch: use --sim for it");
    }
    let tasks = fake_tasks::fake_tasks(sc, &online);
    let needs_root = cfg.balancers.iter().any(|&k| k != BalancerKind::Linux)
        || tasks.iter().any(|t| t.policy.is_some());
    if needs_root {
        require_root(host, "a live lb run with RT tasks or a partition")?;
    }
    let rt = sc.rt_set();
    let plan = validate(
        &PartitionConfig {
            rt_cpus: Some(rt.clone()),
            ..Default::default()
        },
        None,
        &online,
    )
    .or_else(|e| bad_input(format!("scenario RT CPUs {}: {e}", rt.to_list())))?;
    let _lock = if needs_root {
        machine_lock(host)?
    } else {
        None
    };
    let mut runs = Vec::new();
    for &kind in &cfg.balancers {
        let t0 = std::time::Instant::now();
        let (results, rt_cpus) = match kind {
            BalancerKind::Linux => (
                fake_tasks::run(&tasks, online.len(), None, |_| {}, stop.clone())?,
                CpuSet::new(),
            ),
            _ => {
                // An applied partition is used as is; else a temporary one.
                let existing = partition::current(host, &cfg.journal)
                    .context("reading the partition journal")?;
                let _temp;
                let applied = match existing {
                    Some(a) => a,
                    None => {
                        let opts = ApplyOptions {
                            journal: cfg.journal.clone(),
                            replace: false,
                        };
                        let g = PartitionGuard::apply(host, &plan, &opts)
                            .context("applying a temporary partition for the run")?;
                        let a = g.applied().clone();
                        _temp = g;
                        a
                    }
                };
                let r = run_partitioned(host, &applied, &tasks, &online, kind, cfg, stop)?;
                (r, applied.plan.rt.clone())
            }
        };
        if stop.load(Ordering::Relaxed) {
            return Err(Error::Failed("interrupted".into()));
        }
        runs.push(LiveRun {
            balancer: kind,
            wall_s: t0.elapsed().as_secs_f64(),
            result: lb_result(&online, rt_cpus, &results),
        });
    }
    Ok(runs)
}

/// The fake tasks on a partitioned machine: RT0 tasks in the RT cpuset,
/// the others confined to the NRT CPUs — and, for `rtmgr`, the live balancer
/// (over the fake tasks only) lending them the RT CPUs.
fn run_partitioned(
    host: &Host,
    applied: &Applied,
    tasks: &[FakeTask],
    online: &CpuSet,
    kind: BalancerKind,
    cfg: &LiveLbConfig,
    stop: &Arc<AtomicBool>,
) -> Result<Vec<FakeResult>> {
    let nrt = applied.plan.nrt.clone();
    let mut tasks = tasks.to_vec();
    for t in tasks.iter_mut().filter(|t| t.class != TaskClass::Rt0) {
        // The partition confines ordinary tasks to the NRT CPUs.
        t.mask = nrt.clone();
    }
    let classes: Vec<TaskClass> = tasks.iter().map(|t| t.class).collect();
    let (h, a) = (host.clone(), applied.clone());
    let prepare: fake_tasks::Prepare = Arc::new(move |i, tid| {
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
    std::thread::scope(|s| -> Result<Vec<FakeResult>> {
        let mut bal = None;
        let res = fake_tasks::run(
            &tasks,
            online.len(),
            Some(prepare),
            |tids| {
                if kind == BalancerKind::Rtmgr {
                    // RT0 tasks are observed too (fixed: their time is the RT load).
                    let scope: BTreeSet<u32> = tids.iter().copied().collect();
                    let mut live = LiveConfig::new(applied);
                    live.period_ns = cfg.sample_ns.max(1_000_000);
                    live.scope = Scope::Tids(scope);
                    let bal_stop = bal_stop.clone();
                    bal =
                        Some(s.spawn(move || {
                            run_balancer(host, applied, &live, &bal_stop, |_, _| {})
                        }));
                }
            },
            stop.clone(),
        );
        bal_stop.store(true, Ordering::Relaxed);
        if let Some(b) = bal {
            let rep = b.join().map_err(|_| BalanceError::Panicked)??;
            eprintln!(
                "rtmgr lb: live balancer moves {:?}, guard's highest recent p99 {:?} ns",
                rep.moves, rep.guard_p99_max_ns
            );
            check_restored(&rep)?;
        }
        Ok(res?)
    })
}

/// The lbµ figures of the fake tasks' results.
fn lb_result(online: &CpuSet, rt: CpuSet, results: &[FakeResult]) -> LbResult {
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
    LbResult::new(online.len() as u32, rt, tasks, lat.summary(0))
}
