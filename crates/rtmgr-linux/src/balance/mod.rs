//! The live balancer (`rtmgr balance`): the ARTiS policy of rtmgr-core
//! (§2.2–2.3) run on a partitioned machine. Every T ms it samples /proc,
//! asks the policy for pushes and applies them by moving tasks between the
//! NRT cpuset and single RT CPUs (cpuset + affinity), under a latency guard.
//! Every change is kept in memory and undone when it stops (also on error).

pub mod background;
pub mod guard;
pub mod lbu;
pub mod live_lb;
pub mod observe;
pub mod procfile;
pub mod v2_lending;

use crate::cgroup::{self, Layout};
use crate::host::{Host, HostError};
use crate::measure::{mono_ns, sleep_until, thread_cpu_ns, MeasureError};
use crate::partition::Applied;
use crate::tasks;
use observe::{Observer, Scope};
use rtmgr_core::balance::{Balancer, Move, Place, PolicyConfig, Reason};
use rtmgr_core::CpuSet;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Debug, thiserror::Error)]
pub enum BalanceError {
    #[error("the partition in the journal is incomplete: run `rtmgr partition reset`, then apply it again")]
    Incomplete,
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("latency guard: {0}")]
    Guard(#[from] MeasureError),
    #[error("balancer could not restore: {0}")]
    Restore(String),
    #[error("balancer thread panicked")]
    Panicked,
}

/// How the live balancer runs.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    /// Sampling period T.
    pub period_ns: u64,
    /// Run the latency guard (one probe thread per RT CPU).
    pub guard: bool,
    pub guard_interval_ns: u64,
    /// Stop by itself after this long.
    pub duration_ns: Option<u64>,
    pub scope: Scope,
    pub policy: PolicyConfig,
    /// Full /proc scans every this many samples.
    pub scan_every: u64,
}

impl LiveConfig {
    pub fn new(applied: &Applied) -> Self {
        LiveConfig {
            period_ns: 50_000_000,
            guard: true,
            guard_interval_ns: 10_000_000,
            duration_ns: None,
            scope: Scope::All,
            policy: PolicyConfig {
                latency_bound_ns: Some(applied.plan.latency_bound_us * 1000),
                ..Default::default()
            },
            scan_every: 20,
        }
    }
}

/// What a live run did and what it cost.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LiveReport {
    pub samples: u64,
    pub moves: BTreeMap<String, u64>,
    pub refused: Vec<String>,
    pub restored: usize,
    pub restore_failures: Vec<String>,
    pub wall_s: f64,
    /// CPU time of the sampling/deciding thread (the guard's probes excluded).
    pub balancer_cpu_s: f64,
    /// balancer_cpu_s / wall_s, in percent of one CPU.
    pub overhead_percent: f64,
    pub tasks_known_max: usize,
    pub mean_task_reads_per_sample: f64,
    /// Times /proc was listed to find new tasks (only after a task was created).
    pub proc_listings: u64,
    /// Full scans that read every task's `stat` (loadavg saw an unseen runnable task).
    pub stat_sweeps: u64,
    /// Most /proc descriptors kept open at once.
    pub open_files_max: usize,
    /// Full scans skipped because no task waited for a CPU (PSI).
    pub scans_skipped_calm: u64,
    /// What the kernel offered the observer.
    pub psi: bool,
    pub schedstat: bool,
    /// Highest recent p99 the guard reported, ns, per RT CPU.
    pub guard_p99_max_ns: BTreeMap<u32, u64>,
}

struct Changed {
    start_time: u64,
    affinity: CpuSet,
    cgroup: Option<PathBuf>,
    cpu: u32,
}

/// Applies pushes and remembers how to undo them. Dropping it restores all.
pub struct Mover {
    host: Host,
    layout: Layout,
    changed: BTreeMap<u32, Changed>,
}

impl Mover {
    pub fn new(host: &Host, applied: &Applied) -> Self {
        Mover {
            host: host.clone(),
            layout: applied.layout.clone(),
            changed: BTreeMap::new(),
        }
    }

    /// tid → RT CPU of the current guests.
    pub fn guests(&self) -> BTreeMap<u32, u32> {
        self.changed.iter().map(|(&t, c)| (t, c.cpu)).collect()
    }

    /// Make `tid` a guest on RT CPU `cpu`: into a cpuset that contains the
    /// CPU (v1: the root cpuset), then pinned to it. Recorded before changing.
    pub fn to_rt(&mut self, tid: u32, cpu: u32, start_time: u64) -> Result<(), HostError> {
        if !self.changed.contains_key(&tid) {
            let affinity = self.host.get_affinity(tid)?;
            let cgroup =
                cgroup::task_cgroup(&self.host, &self.layout, tid).map(|rel| self.layout.dir(&rel));
            self.changed.insert(
                tid,
                Changed {
                    start_time,
                    affinity,
                    cgroup,
                    cpu,
                },
            );
        }
        let r = (|| {
            if let Layout::V1(mount) = &self.layout {
                cgroup::attach(&self.host, &self.layout, mount, tid)?;
            }
            self.host.set_affinity(tid, &CpuSet::single(cpu))
        })();
        match r {
            Ok(()) => {
                if let Some(c) = self.changed.get_mut(&tid) {
                    c.cpu = cpu;
                }
                Ok(())
            }
            Err(e) => {
                let _ = self.restore(tid);
                Err(e)
            }
        }
    }

    /// Undo everything done to `tid` (back to its NRT affinity and cpuset).
    pub fn restore(&mut self, tid: u32) -> Result<(), HostError> {
        let Some(c) = self.changed.remove(&tid) else {
            return Ok(());
        };
        if !tasks::same_task(&self.host, tid, c.start_time) {
            return Ok(()); // exited: nothing to give back
        }
        let aff = self.host.set_affinity(tid, &c.affinity);
        let cg = match &c.cgroup {
            Some(dir) => cgroup::attach(&self.host, &self.layout, dir, tid),
            None => Ok(()),
        };
        match aff.and(cg) {
            Err(e) if !e.is_gone() => Err(e),
            _ => Ok(()),
        }
    }

    /// Undo every change; returns how many and the failures.
    pub fn restore_all(&mut self) -> (usize, Vec<String>) {
        let tids: Vec<u32> = self.changed.keys().copied().collect();
        let mut fails = Vec::new();
        for &tid in &tids {
            if let Err(e) = self.restore(tid) {
                fails.push(format!("task {tid}: {e}"));
            }
        }
        (tids.len(), fails)
    }
}

impl Drop for Mover {
    fn drop(&mut self) {
        let (_, fails) = self.restore_all();
        for f in fails {
            tracing::error!("balance: could not restore {f}");
            eprintln!("rtmgr: balance: could not restore {f}");
        }
    }
}

fn reason_name(r: Reason) -> &'static str {
    match r {
        Reason::KernelHeavy => "kernel_heavy",
        Reason::LatencyGuard => "latency_guard",
        Reason::NotAllowed => "not_allowed",
        Reason::Rebalance => "rebalance",
        Reason::Fill => "fill",
        Reason::Rotate => "rotate",
    }
}

/// Run the live balancer on an applied partition until `stop` is set (or the
/// configured duration passes). Restores every change before returning, on
/// success and on error. `progress` is called after each sample.
pub fn run_balancer(
    host: &Host,
    applied: &Applied,
    cfg: &LiveConfig,
    stop: &AtomicBool,
    mut progress: impl FnMut(&LiveReport, &[Move]),
) -> Result<LiveReport, BalanceError> {
    if !applied.complete {
        return Err(BalanceError::Incomplete);
    }
    let plan = &applied.plan;
    let guard = if cfg.guard {
        Some(guard::LatencyGuard::start(
            host,
            applied,
            &plan.rt,
            cfg.guard_interval_ns,
        )?)
    } else {
        None
    };
    // Before the mover: dropped after it, once every guest has left.
    let _lending = v2_lending::MemberWhileLending::open(host, applied)?;
    let mut mover = Mover::new(host, applied);
    let mut observer = Observer::new(
        host.root(),
        plan.rt.clone(),
        plan.nrt.clone(),
        cfg.scope.clone(),
    );
    observer.set_scan_every(cfg.scan_every);
    observer.set_hot_ns(cfg.period_ns / 100);
    observer.set_switch_floor(cfg.policy.switch_rate_max / 4.0);
    let mut policy = Balancer::new(cfg.policy.clone());
    let mut report = LiveReport::default();
    let mut refused: BTreeSet<u64> = BTreeSet::new();
    let (t0, cpu0) = (mono_ns(), thread_cpu_ns());
    let mut next = t0;
    let mut last = t0;
    let mut reads = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let now = mono_ns();
        if cfg.duration_ns.is_some_and(|d| now - t0 >= d) {
            break;
        }
        let p99 = guard.as_ref().map(|g| g.p99()).unwrap_or_default();
        for (&c, &v) in &p99 {
            let m = report.guard_p99_max_ns.entry(c).or_insert(0);
            *m = (*m).max(v);
        }
        let guests = mover.guests();
        let mut obs = observer.sample(now - t0, (now - last).max(1), &guests, &p99);
        last = now;
        reads += observer.last.reads as u64;
        report.proc_listings += u64::from(observer.last.listed);
        report.stat_sweeps += u64::from(observer.last.swept);
        report.open_files_max = report.open_files_max.max(observer.open_files());
        report.scans_skipped_calm += u64::from(observer.last.skipped);
        report.psi = observer.has_psi();
        report.schedstat = observer.has_schedstat();
        for t in obs.tasks.iter_mut() {
            if refused.contains(&t.id) && t.place == Place::Nrt {
                t.place = Place::Fixed;
            }
        }
        let moves = policy.step(&obs);
        for m in &moves {
            let tid = m.task as u32;
            let r = match m.to {
                Place::Rt(cpu) => {
                    let st = observer.start_time(tid).unwrap_or(0);
                    mover.to_rt(tid, cpu, st)
                }
                Place::Nrt => mover.restore(tid),
                Place::Fixed => Ok(()),
            };
            match r {
                Ok(()) => {
                    *report
                        .moves
                        .entry(reason_name(m.reason).into())
                        .or_default() += 1
                }
                Err(e) if e.is_gone() => {}
                Err(e) => {
                    refused.insert(m.task);
                    report.refused.push(format!("task {tid}: {e}"));
                }
            }
        }
        report.samples += 1;
        report.tasks_known_max = report.tasks_known_max.max(observer.known_tasks());
        progress(&report, &moves);
        next += cfg.period_ns;
        sleep_until(next);
    }
    let (restored, fails) = mover.restore_all();
    drop(guard);
    report.restored = restored;
    report.restore_failures = fails;
    report.wall_s = (mono_ns() - t0) as f64 / 1e9;
    report.balancer_cpu_s = (thread_cpu_ns() - cpu0) as f64 / 1e9;
    report.overhead_percent = 100.0 * report.balancer_cpu_s / report.wall_s.max(1e-9);
    report.mean_task_reads_per_sample = reads as f64 / report.samples.max(1) as f64;
    Ok(report)
}
