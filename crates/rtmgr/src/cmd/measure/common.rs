//! What `rtmgr measure …` and `rtmgr evaluate` share (DESIGN.md "Measuring"):
//! argument parsing (durations, CPU lists), the Ctrl-C flag, one measured
//! segment (load up → probe → load down, with disturbance snapshots), the live
//! progress line, and writing the versioned JSON report and its plots.

use crate::cmd::bad_input;
use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use rtmgr_core::load::{merge_metrics, LoadKind, StressorMetrics};
use rtmgr_core::report::{
    Body, CpuResult, Disturbance, LatencyRun, LoadResult, ProbeSettings, Report, ThreadResult,
    SCHEMA,
};
use rtmgr_core::stats::Hist;
use rtmgr_core::CpuSet;
use rtmgr_linux::measure::load::{LoadSpec, RunningLoad};
use rtmgr_linux::measure::probe::{Prepare, Probe, ProbeConfig, Progress, ThreadOutcome};
use rtmgr_linux::measure::{disturb, MeasureError};
use rtmgr_linux::partition::{self, Applied, Role};
use rtmgr_linux::Host;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Parse "100us", "1ms", "2.5s", "1m", "250000ns"; a bare number is seconds.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("bad duration {s:?}: expected e.g. 100us, 1ms, 10s"))?;
    let ns = match unit.trim() {
        "ns" => v,
        "us" | "µs" => v * 1e3,
        "ms" => v * 1e6,
        "" | "s" => v * 1e9,
        "m" | "min" => v * 60e9,
        u => {
            return Err(format!(
                "bad duration unit {u:?} in {s:?}: use ns, us, ms, s or m"
            ))
        }
    };
    if !(ns.is_finite() && ns >= 1.0) {
        return Err(format!("duration {s:?} must be at least 1ns"));
    }
    Ok(Duration::from_nanos(ns as u64))
}

pub fn parse_cpus(s: &str) -> std::result::Result<CpuSet, String> {
    s.parse::<CpuSet>().map_err(|e| e.to_string())
}

/// SIGINT/SIGTERM set this flag instead of killing rtmgr, so every guard runs
/// and a partial report is written.
pub fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).context("install signal handler")?;
    }
    Ok(stop)
}

/// Map a measurement error: missing tools are bad input (nothing was changed).
pub fn measure_err(e: MeasureError) -> anyhow::Error {
    match e {
        MeasureError::MissingTool(..) => crate::cmd::BadInput(e.to_string()).into(),
        e => anyhow::Error::new(e),
    }
}

/// Lock memory for the probe (McKenney §2.1 Fig. 3); false when not permitted.
pub fn lock_memory() -> bool {
    match rtmgr_linux::sched::mlockall() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("rtmgr: warning: mlockall failed ({e}): page faults may add latency");
            false
        }
    }
}

/// Runs the calling (orchestrating) thread off the measured CPUs at SCHED_FIFO
/// priority 1 while alive, so that the loads it starts cannot starve the
/// start/stop of those loads and of the probe, and it never runs on the CPU
/// being measured. Restores the thread's policy and affinity on drop.
pub struct Orchestrator {
    policy: Option<rtmgr_linux::sched::Policy>,
    affinity: Option<CpuSet>,
}

impl Orchestrator {
    pub fn enter(measured: &CpuSet, online: &CpuSet) -> Orchestrator {
        use rtmgr_linux::sched;
        let policy = sched::get_policy(0).ok();
        let affinity = sched::get_affinity(0).ok();
        let others = online.difference(measured);
        if !others.is_empty() {
            if let Err(e) = sched::set_affinity(0, &others) {
                tracing::warn!("orchestrator affinity {others}: {e}");
            }
        }
        if let Err(e) = sched::set_policy(0, sched::Policy::Fifo { priority: 1 }) {
            tracing::warn!("orchestrator SCHED_FIFO 1: {e}");
        }
        Orchestrator { policy, affinity }
    }
}

impl Drop for Orchestrator {
    fn drop(&mut self) {
        if let Some(p) = self.policy {
            let _ = rtmgr_linux::sched::set_policy(0, p);
        }
        if let Some(a) = &self.affinity {
            let _ = rtmgr_linux::sched::set_affinity(0, a);
        }
    }
}

/// Validate measured CPUs against the online set.
pub fn check_cpus(what: &str, cpus: &CpuSet, online: &CpuSet) -> Result<()> {
    if cpus.is_empty() {
        return bad_input(format!("{what}: empty CPU list"));
    }
    let off = cpus.difference(online);
    if !off.is_empty() {
        return bad_input(format!(
            "{what}: CPUs {off} are not online (online: {online})"
        ));
    }
    Ok(())
}

/// How a probe thread gets onto an RT CPU of an applied partition: v1 moves the
/// one thread into the RT cpuset; v2 (whole processes only) moves rtmgr.
pub fn rt_prepare(host: &Host, applied: &Applied) -> Prepare {
    let (host, applied) = (host.clone(), applied.clone());
    Arc::new(move |tid: u32| {
        let r = match applied.layout {
            rtmgr_linux::cgroup::Layout::V1(_) => {
                rtmgr_linux::cgroup::attach(&host, &applied.layout, &applied.rt_cgroup, tid)
                    .map_err(|e| e.to_string())
            }
            rtmgr_linux::cgroup::Layout::V2(_) => {
                partition::enter(&host, &applied, Role::Rt, std::process::id())
                    .map_err(|e| e.to_string())
            }
        };
        r.map_err(|e| {
            MeasureError::Setup(format!("move probe thread {tid} into the RT cpuset: {e}"))
        })
    })
}

/// Under a user's partition, measured CPUs that are RT need the probe in the RT cpuset.
pub fn prepare_for(
    host: &Host,
    applied: Option<&Applied>,
    cpus: &CpuSet,
) -> Result<Option<Prepare>> {
    let Some(a) = applied else { return Ok(None) };
    if cpus.is_subset(&a.plan.rt) {
        Ok(Some(rt_prepare(host, a)))
    } else if cpus.is_disjoint(&a.plan.rt) {
        Ok(None)
    } else {
        bad_input(format!(
            "measured CPUs {cpus} mix RT ({}) and NRT CPUs of the applied partition: measure them separately",
            a.plan.rt
        ))
    }
}

/// One part of a load: stress-ng on `cpus`, optionally as SCHED_IDLE guests
/// inside a partition role's cpuset.
#[derive(Clone)]
pub struct LoadPart {
    pub cpus: CpuSet,
    pub sched_idle: bool,
    pub enter: Option<Role>,
}

#[derive(Clone)]
pub struct LoadPlan {
    pub kind: LoadKind,
    pub parts: Vec<LoadPart>,
}

impl LoadPlan {
    pub fn simple(kind: LoadKind, cpus: CpuSet) -> LoadPlan {
        LoadPlan {
            kind,
            parts: vec![LoadPart {
                cpus,
                sched_idle: false,
                enter: None,
            }],
        }
    }

    pub fn result(&self, metrics: Vec<StressorMetrics>) -> LoadResult {
        let (mut cpus, mut guests) = (CpuSet::new(), CpuSet::new());
        for p in &self.parts {
            if p.sched_idle {
                guests = guests.union(&p.cpus);
            } else {
                cpus = cpus.union(&p.cpus);
            }
        }
        LoadResult {
            kind: self.kind.name().into(),
            cpus,
            guest_cpus: guests,
            metrics,
        }
    }
}

/// Running loads of one plan.
pub struct Loads(Vec<RunningLoad>);

impl Loads {
    pub fn start(
        plan: &LoadPlan,
        host: &Host,
        applied: Option<&Applied>,
        max: Duration,
    ) -> Result<Loads> {
        let mut running = Vec::new();
        for part in &plan.parts {
            let enter = |pid: u32| -> rtmgr_linux::measure::Result<()> {
                match (part.enter, applied) {
                    (Some(role), Some(a)) => partition::enter(host, a, role, pid).map_err(|e| {
                        MeasureError::Setup(format!("move stress-ng into the {role:?} cpuset: {e}"))
                    }),
                    _ => Ok(()),
                }
            };
            let gated = part.enter.is_some() && applied.is_some();
            running.push(
                RunningLoad::start(LoadSpec {
                    kind: plan.kind,
                    cpus: part.cpus.clone(),
                    sched_idle: part.sched_idle,
                    max_duration: max,
                    before_run: if gated { Some(&enter) } else { None },
                })
                .map_err(measure_err)?,
            );
        }
        Ok(Loads(running))
    }

    /// Did every stress-ng survive its start-up? If not, stop them all and
    /// return the error with the dead one's last log lines.
    pub fn check_alive(mut self) -> Result<Loads> {
        if self.0.iter_mut().all(|l| l.alive()) {
            return Ok(self);
        }
        match self.stop() {
            Err(e) => Err(e.context("stress-ng exited right after starting")),
            Ok(_) => anyhow::bail!("stress-ng exited right after starting"),
        }
    }

    /// Stop all parts; their metrics summed per stressor.
    pub fn stop(self) -> Result<Vec<StressorMetrics>> {
        let mut parts = Vec::new();
        let mut first_err = None;
        for l in self.0 {
            match l.stop() {
                Ok(m) => parts.push(m),
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        match first_err {
            Some(e) => Err(measure_err(e)),
            None => Ok(merge_metrics(&parts)),
        }
    }
}

/// Sleep `d` in small steps; false if the stop flag was raised.
pub fn sleep_checked(d: Duration, stop: &AtomicBool) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(20)));
    }
    !stop.load(Ordering::Relaxed)
}

/// Time loads get to ramp up before the probe starts.
pub const WARMUP: Duration = Duration::from_millis(300);

/// The result of one measured segment.
pub struct Segment {
    pub threads: Vec<ThreadOutcome>,
    pub metrics: Vec<StressorMetrics>,
    pub disturbance: Disturbance,
    pub elapsed_ns: u64,
    pub interrupted: bool,
}

/// Load up, probe, load down. Loads are killed on every exit path (drop).
pub fn run_segment(
    host: &Host,
    probe_cfg: &ProbeConfig,
    load: Option<&LoadPlan>,
    applied: Option<&Applied>,
    prepare: Option<Prepare>,
    stop: &Arc<AtomicBool>,
    on_progress: &mut dyn FnMut(&Progress, Duration),
) -> Result<Segment> {
    let planned = probe_cfg
        .duration_ns
        .map(Duration::from_nanos)
        .unwrap_or_else(|| {
            Duration::from_nanos(probe_cfg.interval_ns * probe_cfg.loops.unwrap_or(1))
        });
    let t_seg = Instant::now();
    let loads = match load {
        Some(plan) => Some(Loads::start(
            plan,
            host,
            applied,
            planned + WARMUP + Duration::from_secs(60),
        )?),
        None => None,
    };
    let cpus: Vec<u32> = probe_cfg.cpus.iter().collect();
    let mut interrupted = !sleep_checked(
        if loads.is_some() {
            WARMUP
        } else {
            Duration::ZERO
        },
        stop,
    );
    let loads = loads.map(Loads::check_alive).transpose()?;
    tracing::debug!("segment: loads up after {:?}", t_seg.elapsed());
    let before = disturb::snapshot(host);
    let start = Instant::now();
    let mut threads = Vec::new();
    if !interrupted {
        let probe = Probe::start(probe_cfg, stop.clone(), prepare).map_err(measure_err)?;
        while !probe.finished() {
            std::thread::sleep(Duration::from_millis(100));
            on_progress(&probe.progress(), start.elapsed());
        }
        threads = probe.join();
        interrupted = stop.load(Ordering::Relaxed);
    }
    let elapsed_ns = start.elapsed().as_nanos() as u64;
    let after = disturb::snapshot(host);
    tracing::debug!("segment: probe done after {:?}", t_seg.elapsed());
    let metrics = match loads {
        Some(l) => l.stop()?,
        None => Vec::new(),
    };
    tracing::debug!("segment: loads down after {:?}", t_seg.elapsed());
    Ok(Segment {
        threads,
        metrics,
        disturbance: disturb::between(&before, &after, &cpus),
        elapsed_ns,
        interrupted,
    })
}

/// Merge histograms and missed counts of thread outcomes.
pub fn merged<'a>(outs: impl IntoIterator<Item = &'a ThreadOutcome>) -> (Hist, u64) {
    let mut h = Hist::new();
    let mut missed = 0;
    for o in outs {
        h.merge(&o.hist);
        missed += o.missed;
    }
    (h, missed)
}

pub fn cpu_result(cpu: u32, h: &Hist, missed: u64) -> CpuResult {
    CpuResult {
        cpu,
        summary: h.summary(missed),
        hist: h.to_data(),
    }
}

/// The latency report body from one or more segments' threads.
pub fn latency_run(
    settings: ProbeSettings,
    threads: &[ThreadOutcome],
    load: Option<LoadResult>,
    disturbance: Disturbance,
    elapsed_ns: u64,
) -> LatencyRun {
    let per_cpu: Vec<CpuResult> = settings
        .cpus
        .iter()
        .map(|c| {
            let (h, m) = merged(threads.iter().filter(|t| t.cpu == c));
            cpu_result(c, &h, m)
        })
        .collect();
    let (all, missed) = merged(threads);
    LatencyRun {
        threads: threads
            .iter()
            .map(|t| ThreadResult {
                cpu: t.cpu,
                index: t.index,
                summary: t.hist.summary(t.missed),
                hist: t.hist.to_data(),
                voluntary_ctxt_switches: t.voluntary_ctxt_switches,
                involuntary_ctxt_switches: t.involuntary_ctxt_switches,
                cpu_time_ns: t.cpu_time_ns,
            })
            .collect(),
        per_cpu,
        overall: cpu_result(settings.cpus.first().unwrap_or(0), &all, missed),
        settings,
        load,
        disturbance,
        elapsed_ns,
    }
}

/// Wrap a body into a report with the header filled in.
pub fn report(body: Body, online: &CpuSet, started: u64, partial: Option<String>) -> Report {
    Report {
        schema: SCHEMA.into(),
        rtmgr_version: env!("CARGO_PKG_VERSION").into(),
        command: std::env::args().collect(),
        started_unix_s: started,
        host: rtmgr_linux::measure::host_info(online),
        partial: partial.is_some(),
        partial_reason: partial,
        body,
    }
}

pub fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
}

pub fn write_json(path: &Path, report: &Report) -> Result<()> {
    write_file(path, &(serde_json::to_string_pretty(report)? + "\n"))
}

/// Path with a suffix before the extension: a.svg + "-pct" → a-pct.svg.
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    path.with_file_name(format!("{stem}{suffix}{ext}"))
}

/// A progress line on stderr (hidden when stderr is not a terminal).
pub fn progress_bar(total: Duration) -> ProgressBar {
    let pb = ProgressBar::new(total.as_millis().max(1) as u64);
    pb.set_style(
        ProgressStyle::with_template("{elapsed_precise} [{bar:30}] ETA {eta} {msg}")
            .expect("valid template")
            .progress_chars("=> "),
    );
    pb
}

pub fn progress_msg(p: &Progress) -> String {
    format!(
        "n={} p99={} µs max={} µs missed={}",
        p.samples,
        rtmgr_core::report::us(p.p99_ns),
        rtmgr_core::report::us(p.max_ns),
        p.missed
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("100us").unwrap(), Duration::from_micros(100));
        assert_eq!(parse_duration("1ms").unwrap(), Duration::from_millis(1));
        assert_eq!(parse_duration("2.5s").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("fast").is_err());
    }

    #[test]
    fn suffixes() {
        assert_eq!(
            with_suffix(Path::new("d/a.svg"), "-pct"),
            Path::new("d/a-pct.svg")
        );
        assert_eq!(with_suffix(Path::new("a"), "-x"), Path::new("a-x"));
    }
}
