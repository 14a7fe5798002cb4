//! `rtmgr measure budget`: budget-based RTAI §4 on this machine, soft and hard
//! enforcement side by side. §4.1: enforcement overhead per timer expiration
//! for the task set {(P=2 ms, W=1 ms), (P=5 ms, W=1 ms)}; §4.2: budget rate
//! (received / assigned budget) per period for three compute tasks and one
//! I/O-heavy task, violations counted, plotted like the seed's Fig. 6.

use super::{bad_input, Outcome};
use anyhow::Context;
use rtmgr_rt::periodic::{
    mono_ns, thread_cpu_ns, BudgetMode, Group, PeriodRecord, SoftVariant, Task, TaskClass,
    TaskConfig, TaskStats,
};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

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
    /// §4.2 task set file (TOML, `[[task]]` tables; see README section `budget`).
    #[arg(long)]
    taskset: Option<PathBuf>,
    /// Interleave the modes in this many rounds (the run time is split).
    #[arg(long, default_value_t = 5)]
    rounds: u64,
    /// Write the JSON report here (default: stdout).
    #[arg(long)]
    json: Option<PathBuf>,
    /// Write the Fig. 6-style budget-rate plot (SVG) here.
    #[arg(long)]
    svg: Option<PathBuf>,
}

/// One task of a task set.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskSpec {
    pub name: String,
    pub period_ms: f64,
    pub budget_ms: f64,
    /// "compute" (runs without ever calling wait_period unless `job_ms`) or
    /// "io" (reads a file in 512-byte chunks; jobs of 0.6–1.4 W).
    #[serde(default = "compute")]
    pub kind: String,
    /// compute: CPU time per job; absent = never waits (a runaway).
    #[serde(default)]
    pub job_ms: Option<f64>,
    /// Soft mode: pin to this CPU (hard mode runs unpinned).
    #[serde(default)]
    pub cpu: Option<u32>,
    /// Soft mode SCHED_FIFO priority (default: rate-monotonic from 60 down).
    #[serde(default)]
    pub priority: Option<u8>,
}

/// Online CPUs (not this process's affinity, which a partition may narrow).
fn online_cpus() -> u32 {
    // SAFETY: sysconf has no preconditions.
    (unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }).max(1) as u32
}

fn compute() -> String {
    "compute".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TaskSetFile {
    task: Vec<TaskSpec>,
}

fn spec(name: &str, p: f64, w: f64, kind: &str, cpu: Option<u32>) -> TaskSpec {
    TaskSpec {
        name: name.into(),
        period_ms: p,
        budget_ms: w,
        kind: kind.into(),
        job_ms: None,
        cpu,
        priority: None,
    }
}

/// Seed §4.1 task set, on the last CPU (CPU 0 takes most interrupts).
fn overhead_set() -> Vec<TaskSpec> {
    let last = online_cpus() - 1;
    vec![
        spec("tau1", 2.0, 1.0, "compute", Some(last)),
        spec("tau2", 5.0, 1.0, "compute", Some(last)),
    ]
}

/// Group experiment: two runaway members sharing (P=4 ms, W=1 ms), unpinned
/// (Linux spreads them over the CPUs their cpuset allows).
fn group_set() -> Vec<TaskSpec> {
    vec![
        spec("m1", 4.0, 1.0, "compute", None),
        spec("m2", 4.0, 1.0, "compute", None),
    ]
}

/// Seed §4.2 task set: three compute tasks on the last CPU, the I/O task on CPU 0.
fn precision_set() -> Vec<TaskSpec> {
    let last = online_cpus() - 1;
    vec![
        spec("tau1", 4.0, 1.0, "compute", Some(last)),
        spec("tau2", 2.0, 0.5, "compute", Some(last)),
        spec("tau3", 1.0, 0.25, "compute", Some(last)),
        spec("tau4-io", 20.0, 5.0, "io", Some(0)),
    ]
}

/// Check a task set; returns it with the periods/budgets in ns.
fn validate(set: &[TaskSpec]) -> anyhow::Result<()> {
    if set.is_empty() {
        return bad_input("task set is empty");
    }
    let cpus = online_cpus();
    for t in set {
        let ok = t.period_ms.is_finite()
            && t.budget_ms.is_finite()
            && t.period_ms > 0.0
            && t.budget_ms > 0.0
            && t.budget_ms <= t.period_ms
            && t.period_ms <= 10_000.0;
        if !ok {
            return bad_input(format!(
                "task {}: need 0 < budget_ms <= period_ms <= 10000 (got P={} W={})",
                t.name, t.period_ms, t.budget_ms
            ));
        }
        if t.kind != "compute" && t.kind != "io" {
            return bad_input(format!("task {}: kind must be compute or io", t.name));
        }
        if let Some(j) = t.job_ms {
            if !(j.is_finite() && j > 0.0) {
                return bad_input(format!("task {}: job_ms must be > 0", t.name));
            }
        }
        if t.cpu.is_some_and(|c| c >= cpus) {
            return bad_input(format!("task {}: CPU {:?} does not exist", t.name, t.cpu));
        }
        if t.priority.is_some_and(|p| !(1..=98).contains(&p)) {
            return bad_input(format!("task {}: priority must be 1..98", t.name));
        }
    }
    Ok(())
}

fn ns(ms: f64) -> u64 {
    (ms * 1e6).round() as u64
}

/// Allowed deviation of the budget rate (issue goals): ±2 % for W ≥ 1 ms,
/// ±10 % below.
fn tolerance_pct(budget_ns: u64) -> f64 {
    if budget_ns >= 1_000_000 {
        2.0
    } else {
        10.0
    }
}

#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
enum Mode {
    Soft(SoftVariant),
    Hard,
    /// Members of one group budget (soft mode).
    Group,
}

impl Mode {
    fn label(&self) -> String {
        match self {
            Mode::Soft(v) => format!(
                "soft/{}",
                serde_json::to_value(v).unwrap().as_str().unwrap_or("?")
            ),
            Mode::Hard => "hard".into(),
            Mode::Group => "soft/group".into(),
        }
    }
}

#[derive(Debug, Serialize)]
struct TaskResult {
    name: String,
    kind: String,
    period_ns: u64,
    budget_ns: u64,
    cpu: Option<u32>,
    periods: usize,
    /// Periods dropped at the start (learning / start-up).
    warmup: usize,
    tolerance_pct: f64,
    within_tolerance_pct: f64,
    violations: usize,
    /// Violations above the tolerance (the task got more than its budget).
    over_budget: usize,
    /// Violations below it (a task that wanted its budget did not get it:
    /// preemption, hypervisor or kernel interference; not enforcement).
    under_budget: usize,
    rate_min_pct: f64,
    rate_mean_pct: f64,
    rate_max_pct: f64,
    exhaustions: u64,
    ignored_waits: u64,
    missed: u64,
    kernel_overruns: u64,
    expirations: u64,
    handler_cpu_avg_ns: f64,
    handler_cpu_max_ns: u64,
    signal_late_avg_ns: f64,
    signal_late_max_ns: u64,
    overhead_per_period_ns: f64,
    release_latency_avg_ns: f64,
    release_latency_max_ns: u64,
    /// Budget rate per period in % (after warm-up, at most 500).
    rates: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct RunResult {
    experiment: String,
    mode: String,
    duration_ms: u64,
    tasks: Vec<TaskResult>,
    errors: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    schema: &'static str,
    command: String,
    interrupted: bool,
    runs: Vec<RunResult>,
}

const WARMUP: usize = 5;

/// One task's raw results, possibly merged over several rounds.
#[derive(Debug, Default)]
struct Raw {
    /// Records after each round's warm-up.
    records: Vec<PeriodRecord>,
    warmup: usize,
    stats: TaskStats,
    cpu: Option<u32>,
}

impl Raw {
    fn merge(&mut self, b: Raw) {
        self.records.extend(b.records);
        self.warmup += b.warmup;
        self.cpu = b.cpu;
        let (x, y) = (&mut self.stats, b.stats);
        x.periods += y.periods;
        x.exhaustions += y.exhaustions;
        x.ignored_waits += y.ignored_waits;
        x.missed += y.missed;
        x.if_wait = y.if_wait;
        x.if_wait_saturated += y.if_wait_saturated;
        x.kernel_overruns += y.kernel_overruns;
        x.expirations += y.expirations;
        x.handler_cpu_sum += y.handler_cpu_sum;
        x.handler_cpu_max = x.handler_cpu_max.max(y.handler_cpu_max);
        x.spin_cpu_sum += y.spin_cpu_sum;
        x.signal_late_sum += y.signal_late_sum;
        x.signal_late_max = x.signal_late_max.max(y.signal_late_max);
        x.margin = y.margin;
    }
}

fn summarise(t: &TaskSpec, raw: &Raw) -> TaskResult {
    let (s, cpu) = (&raw.stats, raw.cpu);
    let w = ns(t.budget_ms);
    let tol = tolerance_pct(w);
    let used: Vec<&PeriodRecord> = raw.records.iter().collect();
    let rates: Vec<f64> = used
        .iter()
        .map(|r| r.received_ns as f64 * 100.0 / w as f64)
        .collect();
    let unbounded = t.kind == "compute" && t.job_ms.is_none();
    let violations = used
        .iter()
        .zip(&rates)
        .filter(|(r, &rate)| {
            if unbounded || r.exhausted {
                (rate - 100.0).abs() > tol
            } else {
                rate > 100.0 + tol
            }
        })
        .count();
    let over_budget = rates.iter().filter(|&&r| r > 100.0 + tol).count();
    let n = rates.len().max(1) as f64;
    let lats: Vec<u64> = used.iter().filter_map(|r| r.latency_ns).collect();
    let exp = s.expirations.max(1) as f64;
    TaskResult {
        name: t.name.clone(),
        kind: t.kind.clone(),
        period_ns: ns(t.period_ms),
        budget_ns: w,
        cpu,
        periods: rates.len(),
        warmup: raw.warmup,
        tolerance_pct: tol,
        within_tolerance_pct: 100.0 * (rates.len() - violations) as f64 / n,
        violations,
        over_budget,
        under_budget: violations - over_budget,
        rate_min_pct: rates.iter().copied().fold(f64::INFINITY, f64::min).min(1e9),
        rate_mean_pct: rates.iter().sum::<f64>() / n,
        rate_max_pct: rates.iter().copied().fold(0.0, f64::max),
        exhaustions: s.exhaustions,
        ignored_waits: s.ignored_waits,
        missed: s.missed,
        kernel_overruns: s.kernel_overruns,
        expirations: s.expirations,
        handler_cpu_avg_ns: s.handler_cpu_sum as f64 / exp,
        handler_cpu_max_ns: s.handler_cpu_max,
        signal_late_avg_ns: s.signal_late_sum as f64 / exp,
        signal_late_max_ns: s.signal_late_max,
        overhead_per_period_ns: s.handler_cpu_sum as f64 / s.periods.max(1) as f64,
        release_latency_avg_ns: lats.iter().sum::<u64>() as f64 / lats.len().max(1) as f64,
        release_latency_max_ns: lats.iter().copied().max().unwrap_or(0),
        rates: rates.into_iter().take(500).collect(),
    }
}

/// A file the I/O task reads (removed on drop).
struct IoFile {
    path: PathBuf,
    file: std::fs::File,
    len: u64,
}

impl IoFile {
    fn create() -> anyhow::Result<Self> {
        let path = std::env::temp_dir().join(format!("rtmgr-budget-io-{}.dat", std::process::id()));
        let data: Vec<u8> = (0..4u32 << 20)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        std::fs::write(&path, &data).with_context(|| format!("writing {}", path.display()))?;
        let file = std::fs::File::open(&path)?;
        Ok(Self {
            path,
            file,
            len: data.len() as u64,
        })
    }
}

impl Drop for IoFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Burn `ns` of this thread's CPU time (or until `stop`/`end`).
fn burn(ns: u64, end: u64, stop: &AtomicBool) {
    let t0 = thread_cpu_ns();
    while thread_cpu_ns() - t0 < ns && mono_ns() < end && !stop.load(Ordering::Relaxed) {
        std::hint::spin_loop();
    }
}

/// The I/O job: read 512-byte chunks (many system calls) and checksum them
/// until `demand` ns of CPU time are used, like the seed's MPEG player.
fn io_job(f: &IoFile, pos: &mut u64, demand: u64, end: u64, stop: &AtomicBool) -> u64 {
    let t0 = thread_cpu_ns();
    let mut buf = [0u8; 512];
    let mut sum = 0u64;
    while thread_cpu_ns() - t0 < demand && mono_ns() < end && !stop.load(Ordering::Relaxed) {
        let n = f.file.read_at(&mut buf, *pos).unwrap_or(0);
        sum = buf[..n]
            .iter()
            .fold(sum, |a, &b| a.rotate_left(5) ^ b as u64);
        *pos = (*pos + 512) % (f.len - 512);
    }
    sum
}

#[allow(clippy::too_many_arguments)]
fn task_thread(
    t: TaskSpec,
    priority: u8,
    mode: Mode,
    start: u64,
    end: u64,
    stop: Arc<AtomicBool>,
    io: Arc<IoFile>,
    group: Option<Arc<Group>>,
) -> Result<Raw, String> {
    let p = ns(t.period_ms);
    let w = ns(t.budget_ms);
    let (class, cpu, bmode) = match mode {
        Mode::Soft(v) => (
            TaskClass::Rt1 { priority },
            t.cpu,
            BudgetMode::Soft {
                signal: None,
                variant: v,
            },
        ),
        Mode::Hard => (TaskClass::Linux, None, BudgetMode::hard()),
        // The budget comes from `group` (make_periodic_group below).
        Mode::Group => (TaskClass::Rt1 { priority }, t.cpu, BudgetMode::soft()),
    };
    let mut cfg = TaskConfig::new(t.name.clone(), class);
    cfg.cpu = cpu;
    cfg.lock_memory = false;
    cfg.ring_capacity = ((end - start) / p + 64) as usize;
    let err = |e: rtmgr_rt::periodic::TaskError| format!("{}: {e}", t.name);
    let mut task = Task::init(cfg).map_err(err)?;
    match &group {
        Some(g) => task.make_periodic_group(g, None),
        None => task.make_periodic_budget(start, p, w, bmode),
    }
    .map_err(err)?;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ p;
    let mut pos = 0u64;
    let mut sink = 0u64;
    while mono_ns() < end && !stop.load(Ordering::Relaxed) {
        match (t.kind.as_str(), t.job_ms) {
            ("io", _) => {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let demand = w * 6 / 10 + (seed >> 33) % (w * 8 / 10);
                sink ^= io_job(&io, &mut pos, demand, end, &stop);
            }
            (_, Some(job)) => burn(ns(job), end, &stop),
            (_, None) => {
                burn(u64::MAX, end, &stop);
                continue;
            }
        }
        task.wait_period().map_err(err)?;
    }
    std::hint::black_box(sink);
    let records = task.records();
    let stats = task.stats();
    task.delete().map_err(err)?;
    Ok(Raw {
        warmup: records.len().min(WARMUP),
        records: records.into_iter().skip(WARMUP).collect(),
        stats,
        cpu,
    })
}

/// Run one task set in one mode for `duration_ns`: per task, its raw results.
fn run_set(
    set: &[TaskSpec],
    mode: Mode,
    duration_ns: u64,
    stop: &Arc<AtomicBool>,
    io: &Arc<IoFile>,
) -> Vec<Result<Raw, String>> {
    let start = mono_ns() + 50_000_000;
    let end = start + duration_ns;
    let group = match mode {
        Mode::Group => match Group::new(start, ns(set[0].period_ms), ns(set[0].budget_ms)) {
            Ok(g) => Some(g),
            Err(e) => return vec![Err(format!("group: {e}"))],
        },
        _ => None,
    };
    // Rate-monotonic priorities: shorter period, higher priority.
    let mut order: Vec<usize> = (0..set.len()).collect();
    order.sort_by(|&a, &b| set[a].period_ms.total_cmp(&set[b].period_ms));
    let mut prio = vec![0u8; set.len()];
    for (rank, &i) in order.iter().enumerate() {
        prio[i] = set[i]
            .priority
            .unwrap_or(60u8.saturating_sub(rank as u8).max(1));
    }
    let handles: Vec<_> = set
        .iter()
        .cloned()
        .zip(prio)
        .map(|(t, pr)| {
            let (stop, io, group) = (stop.clone(), io.clone(), group.clone());
            std::thread::Builder::new()
                .name(format!("budget-{}", t.name))
                .spawn(move || task_thread(t, pr, mode, start, end, stop, io, group))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| match h {
            Ok(h) => h
                .join()
                .unwrap_or_else(|_| Err("task thread panicked".into())),
            Err(e) => Err(format!("spawn: {e}")),
        })
        .collect()
}

/// Group mode: the members' records summed per period into one "group" record
/// (the members share the group's windows).
fn group_members_to_one(raws: &mut Vec<Raw>) {
    let mut by_index: std::collections::BTreeMap<u64, PeriodRecord> = Default::default();
    let mut all = Raw::default();
    for r in raws.drain(..) {
        for rec in &r.records {
            let e = by_index.entry(rec.index).or_insert(PeriodRecord {
                latency_ns: None,
                received_ns: 0,
                ..*rec
            });
            e.received_ns += rec.received_ns;
            e.exhausted |= rec.exhausted;
        }
        let warmup = r.warmup;
        all.merge(Raw {
            records: vec![],
            ..r
        });
        all.warmup = warmup;
    }
    all.cpu = None;
    all.records = by_index.into_values().collect();
    raws.push(all);
}

/// The task list to report: the set, or one "group" task in group mode.
fn group_spec(set: &[TaskSpec], mode: Mode) -> Vec<TaskSpec> {
    match mode {
        Mode::Group => vec![spec(
            "group",
            set[0].period_ms,
            set[0].budget_ms,
            "compute",
            None,
        )],
        _ => set.to_vec(),
    }
}

/// Run every mode in `rounds` interleaved rounds (the mode order rotates each
/// round) and merge each mode's rounds.
#[allow(clippy::too_many_arguments)]
fn run_experiment(
    experiment: &str,
    set: &[TaskSpec],
    modes: &[Mode],
    duration_ns: u64,
    rounds: u64,
    stop: &Arc<AtomicBool>,
    io: &Arc<IoFile>,
    progress: &mut dyn FnMut(&str),
) -> Vec<RunResult> {
    let mut acc: Vec<(Vec<Raw>, Vec<String>, u64)> = modes
        .iter()
        .map(|_| ((0..set.len()).map(|_| Raw::default()).collect(), vec![], 0))
        .collect();
    let chunk = duration_ns / rounds;
    'rounds: for round in 0..rounds {
        for k in 0..modes.len() {
            if stop.load(Ordering::Relaxed) {
                break 'rounds;
            }
            let m = (k + round as usize) % modes.len();
            progress(&format!(
                "{experiment} {} round {}/{rounds} ({:.1} s)",
                modes[m].label(),
                round + 1,
                chunk as f64 / 1e9
            ));
            let (raws, errors, ran) = &mut acc[m];
            *ran += chunk;
            let mut ok = vec![];
            for (i, r) in run_set(set, modes[m], chunk, stop, io)
                .into_iter()
                .enumerate()
            {
                match r {
                    Ok(raw) => ok.push((i, raw)),
                    Err(e) => errors.push(e),
                }
            }
            if modes[m] == Mode::Group {
                let mut members: Vec<Raw> = ok.into_iter().map(|(_, r)| r).collect();
                group_members_to_one(&mut members);
                ok = members.into_iter().map(|r| (0, r)).collect();
            }
            for (i, raw) in ok {
                raws[i].merge(raw);
            }
        }
    }
    modes
        .iter()
        .zip(acc)
        .map(|(m, (raws, errors, ran))| RunResult {
            experiment: experiment.into(),
            mode: m.label(),
            duration_ms: ran / 1_000_000,
            tasks: group_spec(set, *m)
                .iter()
                .zip(&raws)
                .filter(|(_, r)| r.stats.periods > 0)
                .map(|(t, r)| summarise(t, r))
                .collect(),
            errors,
        })
        .collect()
}

fn table(runs: &[RunResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<10} {:<17} {:<8} {:>6} {:>6} {:>6} {:>8} {:>11} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9}",
        "experiment", "mode", "task", "P(ms)", "W(ms)", "n", "within%", "over/under", "rate min", "mean", "max",
        "hdl avg", "hdl max", "sig late", "ovh/per"
    );
    for r in runs {
        for t in &r.tasks {
            let _ = writeln!(
                s,
                "{:<10} {:<17} {:<8} {:>6.2} {:>6.2} {:>6} {:>8.2} {:>11} {:>8.1} {:>8.2} {:>8.1} {:>7.1}µs {:>7.1}µs {:>7.1}µs {:>7.2}µs",
                r.experiment,
                r.mode,
                t.name,
                t.period_ns as f64 / 1e6,
                t.budget_ns as f64 / 1e6,
                t.periods,
                t.within_tolerance_pct,
                format!("{}/{}", t.over_budget, t.under_budget),
                t.rate_min_pct,
                t.rate_mean_pct,
                t.rate_max_pct,
                t.handler_cpu_avg_ns / 1e3,
                t.handler_cpu_max_ns as f64 / 1e3,
                t.signal_late_avg_ns / 1e3,
                t.overhead_per_period_ns / 1e3,
            );
        }
        for e in &r.errors {
            let _ = writeln!(s, "{:<10} {:<17} error: {e}", r.experiment, r.mode);
        }
    }
    s
}

/// Seed Fig. 6: budget rate (%) per period, one panel per task (rows) and
/// enforcement mode (columns); the grey band is the tolerance.
fn svg(runs: &[&RunResult]) -> String {
    let (pw, ph, ml, mt) = (300.0, 130.0, 45.0, 30.0);
    let rows = runs.iter().map(|r| r.tasks.len()).max().unwrap_or(0);
    let (w, h) = (
        ml + pw * runs.len() as f64 + 10.0,
        mt + ph * rows as f64 + 20.0,
    );
    let mut s = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="10"><rect width="{w}" height="{h}" fill="white"/>"#
    );
    let (lo, hi) = (80.0, 120.0);
    for (c, r) in runs.iter().enumerate() {
        let x0 = ml + pw * c as f64;
        let _ = write!(
            s,
            r#"<text x="{}" y="14" text-anchor="middle" font-size="12">{}</text>"#,
            x0 + pw / 2.0,
            r.mode
        );
        for (k, t) in r.tasks.iter().enumerate() {
            let y0 = mt + ph * k as f64;
            let (iw, ih) = (pw - 15.0, ph - 25.0);
            let y = |v: f64| y0 + ih * (1.0 - (v.clamp(lo, hi) - lo) / (hi - lo));
            let tol = t.tolerance_pct;
            let _ = write!(
                s,
                r##"<rect x="{x0}" y="{}" width="{iw}" height="{}" fill="#eee"/><rect x="{x0}" y="{y0}" width="{iw}" height="{ih}" fill="none" stroke="black"/>"##,
                y(100.0 + tol),
                y(100.0 - tol) - y(100.0 + tol)
            );
            let _ = write!(
                s,
                r#"<text x="{}" y="{}">{} P={}ms W={}ms: {} viol/{}</text>"#,
                x0 + 3.0,
                y0 + ih + 12.0,
                t.name,
                t.period_ns as f64 / 1e6,
                t.budget_ns as f64 / 1e6,
                t.violations,
                t.periods
            );
            if c == 0 {
                for v in [lo, 100.0, hi] {
                    let _ = write!(
                        s,
                        r#"<text x="{}" y="{}" text-anchor="end">{v}%</text>"#,
                        x0 - 3.0,
                        y(v) + 3.0
                    );
                }
            }
            let n = t.rates.len().max(2) as f64 - 1.0;
            let pts: String = t
                .rates
                .iter()
                .enumerate()
                .map(|(i, &v)| format!("{:.1},{:.1} ", x0 + iw * i as f64 / n, y(v)))
                .collect();
            let _ = write!(
                s,
                r##"<polyline points="{pts}" fill="none" stroke="#1f77b4" stroke-width="0.8"/>"##
            );
        }
    }
    s.push_str("</svg>\n");
    s
}

pub fn run(args: BudgetArgs) -> anyhow::Result<Outcome> {
    let precision = match &args.taskset {
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            match toml::from_str::<TaskSetFile>(&text) {
                Ok(f) => f.task,
                Err(e) => return bad_input(format!("{}: {e}", p.display())),
            }
        }
        None => precision_set(),
    };
    validate(&precision)?;
    if args.periods == 0 || args.overhead_ms == 0 || args.rounds == 0 {
        return bad_input("--periods, --overhead-ms and --rounds must be > 0");
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return bad_input("rtmgr measure budget needs root (SCHED_FIFO / SCHED_DEADLINE tasks)");
    }
    let mut modes: Vec<Mode> = vec![];
    if args.mode != "hard" {
        modes.extend(args.variants.iter().map(|&v| Mode::Soft(v)));
    }
    if args.mode != "soft" {
        modes.push(Mode::Hard);
    }
    let mut plan: Vec<(&str, Vec<TaskSpec>, u64, Vec<Mode>)> = vec![];
    let all = args.experiment == "all";
    if all || args.experiment == "overhead" {
        plan.push((
            "overhead",
            overhead_set(),
            args.overhead_ms * 1_000_000,
            modes.clone(),
        ));
    }
    if all || args.experiment == "precision" {
        let pmax = precision.iter().map(|t| t.period_ms).fold(0.0, f64::max);
        plan.push((
            "precision",
            precision,
            ns(pmax) * (args.periods + WARMUP as u64 * args.rounds),
            modes.clone(),
        ));
    }
    if (all || args.experiment == "group") && args.mode != "hard" {
        let dur = ns(4.0) * (args.periods + WARMUP as u64 * args.rounds);
        plan.push(("group", group_set(), dur, vec![Mode::Group]));
    }
    let lock_path = std::path::Path::new(rtmgr_linux::lock::DEFAULT_LOCK_PATH);
    let _lock = match rtmgr_linux::lock::MachineLock::try_acquire(lock_path)? {
        Some(l) => l,
        None => {
            eprintln!(
                "waiting for the machine lock {} (another measurement or test runs)",
                lock_path.display()
            );
            rtmgr_linux::lock::MachineLock::acquire(lock_path).context("taking the machine lock")?
        }
    };
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone())?;
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone())?;
    let io = Arc::new(IoFile::create()?);
    let total: u64 = plan.iter().map(|p| p.3.len() as u64 * args.rounds).sum();
    let mut runs = vec![];
    let mut k = 0;
    let mut progress = |what: &str| {
        k += 1;
        eprintln!("[{k}/{total}] {what}");
    };
    for (exp, set, dur, modes) in &plan {
        runs.extend(run_experiment(
            exp,
            set,
            modes,
            *dur,
            args.rounds,
            &stop,
            &io,
            &mut progress,
        ));
    }
    let interrupted = stop.load(Ordering::Relaxed);
    eprint!("{}", table(&runs));
    let report = Report {
        schema: "rtmgr.budget/1",
        command: std::env::args().collect::<Vec<_>>().join(" "),
        interrupted,
        runs,
    };
    let json = serde_json::to_string_pretty(&report)?;
    match &args.json {
        Some(p) => std::fs::write(p, json).with_context(|| format!("writing {}", p.display()))?,
        None => println!("{json}"),
    }
    if let Some(p) = &args.svg {
        let prec: Vec<&RunResult> = report
            .runs
            .iter()
            .filter(|r| r.experiment == "precision")
            .collect();
        std::fs::write(p, svg(&prec)).with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(if interrupted {
        Outcome::Code(130)
    } else {
        Outcome::Ok
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_sets_are_valid_and_file_parses() {
        validate(&overhead_set()).unwrap();
        validate(&precision_set()).unwrap();
        let f: TaskSetFile = toml::from_str(
            "[[task]]\nname = \"a\"\nperiod_ms = 4.0\nbudget_ms = 1.0\n\n[[task]]\nname = \"b\"\nperiod_ms = 20\nbudget_ms = 5\nkind = \"io\"\n",
        )
        .unwrap();
        validate(&f.task).unwrap();
        let mut bad = f.task.clone();
        bad[0].budget_ms = 5.0;
        assert!(validate(&bad).is_err());
        bad[0].budget_ms = 1.0;
        bad[0].kind = "gpu".into();
        assert!(validate(&bad).is_err());
        assert!(toml::from_str::<TaskSetFile>(
            "[[task]]\nname=\"x\"\nperiod_ms=1\nbudget_ms=1\nbogus=1\n"
        )
        .is_err());
    }

    #[test]
    fn group_records_are_summed_per_period() {
        let rec = |index, received_ns, exhausted| PeriodRecord {
            index,
            budget_ns: 1_000_000,
            received_ns,
            exhausted,
            ..Default::default()
        };
        let a = Raw {
            records: vec![rec(5, 400_000, false), rec(6, 700_000, true)],
            warmup: 5,
            ..Default::default()
        };
        let b = Raw {
            records: vec![rec(5, 600_000, true), rec(7, 1_000_000, true)],
            warmup: 5,
            ..Default::default()
        };
        let mut v = vec![a, b];
        group_members_to_one(&mut v);
        assert_eq!(v.len(), 1);
        let got: Vec<(u64, u64, bool)> = v[0]
            .records
            .iter()
            .map(|r| (r.index, r.received_ns, r.exhausted))
            .collect();
        assert_eq!(
            got,
            vec![
                (5, 1_000_000, true),
                (6, 700_000, true),
                (7, 1_000_000, true)
            ]
        );
        assert_eq!(v[0].warmup, 5);
    }

    #[test]
    fn summary_counts_violations() {
        let t = spec("t", 4.0, 1.0, "compute", None);
        let recs: Vec<PeriodRecord> = (0..100u64)
            .map(|i| PeriodRecord {
                index: i,
                budget_ns: 1_000_000,
                received_ns: if i == 50 { 1_100_000 } else { 1_005_000 },
                exhausted: true,
                ..Default::default()
            })
            .collect();
        let mut raw = Raw::default();
        raw.merge(Raw {
            records: recs,
            warmup: 5,
            ..Default::default()
        });
        let r = summarise(&t, &raw);
        assert_eq!(r.warmup, 5);
        assert_eq!(r.periods, 100);
        assert_eq!(r.violations, 1);
        assert!((r.within_tolerance_pct - 99.0).abs() < 1e-9);
        assert!(svg(&[&RunResult {
            experiment: "precision".into(),
            mode: "soft".into(),
            duration_ms: 1,
            tasks: vec![r],
            errors: vec![],
        }])
        .contains("polyline"));
    }
}
