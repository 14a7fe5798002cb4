//! One measured segment (docs/architecture.md "Measuring"; ARTiS §3.1 loads): load up →
//! probe → load down, with disturbance snapshots around the probe. Also what
//! runs a segment needs: the orchestrating thread kept off the measured CPUs,
//! loads placed by partition role, and the latency report body.

use super::host_split::{label_threads, HostSplit};
use super::load::{LoadProgram, LoadSpec, RunningLoad};
use super::probe::{Prepare, Probe, ProbeConfig, Progress, ThreadOutcome};
use super::steal::{StealSampler, StealSeries};
use super::{disturb, MeasureError, Result};
use crate::load::{merge_metrics, ComponentMetrics, LoadEngine, LoadKind};
use crate::report::{CpuResult, Disturbance, LatencyRun, LoadResult, ProbeSettings, ThreadResult};
use crate::trace::{TailTrace, TailTracer};
use rtmgr_core::stats::Hist;
use rtmgr_core::CpuSet;
use rtmgr_linux::balance::guard::SampleFeed;
use rtmgr_linux::partition::{self, Applied, Role};
use rtmgr_linux::sched;
use rtmgr_linux::Host;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Runs the calling (orchestrating) thread off the measured CPUs at SCHED_FIFO
/// priority 1 while alive, so that the loads it starts cannot starve the
/// start/stop of those loads and of the probe, and it never runs on the CPU
/// being measured. Restores the thread's policy and affinity on drop.
pub struct Orchestrator {
    policy: Option<sched::Policy>,
    affinity: Option<CpuSet>,
}

impl Orchestrator {
    pub fn enter(measured: &CpuSet, online: &CpuSet) -> Orchestrator {
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
            let _ = sched::set_policy(0, p);
        }
        if let Some(a) = &self.affinity {
            let _ = sched::set_affinity(0, a);
        }
    }
}

/// How a probe thread gets onto an RT CPU of an applied partition: v1 moves the
/// one thread into the RT cpuset; v2 (whole processes only) moves rtmgr.
pub fn rt_prepare(host: &Host, applied: &Applied) -> Prepare {
    let (host, applied) = (host.clone(), applied.clone());
    Arc::new(move |tid: u32| {
        partition::enter_thread(&host, &applied, Role::Rt, tid).map_err(|e| {
            MeasureError::Setup(format!("move probe thread {tid} into the RT cpuset: {e}"))
        })
    })
}

/// Under a user's partition, measured CPUs that are RT need the probe in the RT
/// cpuset. Err(message) when they mix RT and NRT CPUs (bad input).
pub fn prepare_for(
    host: &Host,
    applied: Option<&Applied>,
    cpus: &CpuSet,
) -> std::result::Result<Option<Prepare>, String> {
    let Some(a) = applied else { return Ok(None) };
    if cpus.is_subset(&a.plan.rt) {
        Ok(Some(rt_prepare(host, a)))
    } else if cpus.is_disjoint(&a.plan.rt) {
        Ok(None)
    } else {
        Err(format!(
            "measured CPUs {cpus} mix RT ({}) and NRT CPUs of the applied partition: measure them separately",
            a.plan.rt
        ))
    }
}

/// One part of a load: a load process on `cpus`, optionally as SCHED_IDLE
/// guests inside a partition role's cpuset.
#[derive(Clone)]
pub struct LoadPart {
    pub cpus: CpuSet,
    pub sched_idle: bool,
    pub enter: Option<Role>,
    /// Workers per load component (None: one per CPU of `cpus`).
    pub instances: Option<usize>,
}

#[derive(Clone)]
pub struct LoadPlan {
    pub kind: LoadKind,
    /// The engine that runs every part.
    pub program: LoadProgram,
    pub parts: Vec<LoadPart>,
}

impl LoadPlan {
    pub fn simple(kind: LoadKind, program: LoadProgram, cpus: CpuSet) -> LoadPlan {
        LoadPlan {
            kind,
            program,
            parts: vec![LoadPart {
                cpus,
                sched_idle: false,
                enter: None,
                instances: None,
            }],
        }
    }

    pub fn result(&self, metrics: Vec<ComponentMetrics>) -> LoadResult {
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
            engine: self.program.engine(),
            cpus,
            guest_cpus: guests,
            metrics,
        }
    }
}

/// Running loads of one plan.
pub struct Loads {
    running: Vec<RunningLoad>,
    engine: LoadEngine,
}

impl Loads {
    pub fn start(
        plan: &LoadPlan,
        host: &Host,
        applied: Option<&Applied>,
        max: Duration,
    ) -> Result<Loads> {
        let mut running = Vec::new();
        for part in &plan.parts {
            let enter = |pid: u32| -> Result<()> {
                match (part.enter, applied) {
                    (Some(role), Some(a)) => partition::enter(host, a, role, pid).map_err(|e| {
                        MeasureError::Setup(format!("move the load into the {role:?} cpuset: {e}"))
                    }),
                    _ => Ok(()),
                }
            };
            let gated = part.enter.is_some() && applied.is_some();
            running.push(RunningLoad::start(LoadSpec {
                kind: plan.kind,
                program: &plan.program,
                cpus: part.cpus.clone(),
                instances: part.instances,
                sched_idle: part.sched_idle,
                max_duration: max,
                before_run: if gated { Some(&enter) } else { None },
            })?);
        }
        Ok(Loads {
            running,
            engine: plan.program.engine(),
        })
    }

    /// Start, let the loads ramp up for `WARMUP` (unless stopped), and check
    /// that every one survived its start-up.
    pub fn start_warm(
        plan: &LoadPlan,
        host: &Host,
        applied: Option<&Applied>,
        max: Duration,
        stop: &AtomicBool,
    ) -> Result<Loads> {
        let loads = Loads::start(plan, host, applied, max)?;
        sleep_checked(WARMUP, stop);
        loads.check_alive()
    }

    /// Did every load process survive its start-up? If not, stop them all
    /// and return the error with the dead one's last log lines.
    pub fn check_alive(mut self) -> Result<Loads> {
        if self.running.iter_mut().all(|l| l.alive()) {
            return Ok(self);
        }
        let why = format!("the {} load exited right after starting", self.engine);
        match self.stop() {
            Err(e) => Err(MeasureError::Load(format!("{why}: {e}"))),
            Ok(_) => Err(MeasureError::Load(why)),
        }
    }

    /// Stop all parts; their metrics summed per load component.
    pub fn stop(self) -> Result<Vec<ComponentMetrics>> {
        let mut parts = Vec::new();
        let mut first_err = None;
        for l in self.running {
            match l.stop() {
                Ok(m) => parts.push(m),
                Err(e) => first_err = first_err.or(Some(e)),
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(merge_metrics(&parts)),
        }
    }
}

/// Stop optional loads; no loads, no metrics.
pub fn stop_loads(loads: Option<Loads>) -> Result<Vec<ComponentMetrics>> {
    loads
        .map(Loads::stop)
        .transpose()
        .map(Option::unwrap_or_default)
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
    pub metrics: Vec<ComponentMetrics>,
    pub disturbance: Disturbance,
    pub elapsed_ns: u64,
    pub interrupted: bool,
    /// What the tail tracer explained, when the segment was traced.
    pub tail: Option<TailTrace>,
    /// The measured CPUs' steal counters read during the probe (the
    /// threads' late wake-ups are labelled with them).
    pub steal: StealSeries,
}

/// What one segment runs.
pub struct SegmentPlan<'a> {
    pub probe: &'a ProbeConfig,
    pub load: Option<&'a LoadPlan>,
    /// The partition the load enters (None: no partition, or the user's own).
    pub applied: Option<&'a Applied>,
    pub prepare: Option<Prepare>,
    /// Trace the measured CPUs and explain late samples: samples at or above
    /// `Some(floor)`, or (None inside) above each thread's running p99.
    pub trace: Option<Option<u64>>,
    /// The live balancer's guard, fed by the probe (evaluate's "balanced").
    pub guard_feed: Option<SampleFeed>,
}

/// Load up, probe (traced if asked), load down. Loads are killed on every
/// exit path (drop), the trace instance is removed on every exit path.
pub fn run_segment(
    host: &Host,
    plan: SegmentPlan<'_>,
    stop: &Arc<AtomicBool>,
    on_progress: &mut dyn FnMut(&Progress, Duration),
) -> Result<Segment> {
    let probe_cfg = plan.probe;
    let planned = probe_cfg
        .duration_ns
        .map(Duration::from_nanos)
        .unwrap_or_else(|| {
            Duration::from_nanos(probe_cfg.interval_ns * probe_cfg.loops.unwrap_or(1))
        });
    let t_seg = Instant::now();
    let loads = match plan.load {
        Some(l) => Some(Loads::start(
            l,
            host,
            plan.applied,
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
    let threads_n = probe_cfg.cpus.len() * probe_cfg.parallel as usize;
    let (tracer, late) = match plan.trace {
        Some(floor) => {
            let (t, late) = TailTracer::start(&probe_cfg.cpus, threads_n, floor)
                .map_err(|e| MeasureError::Setup(format!("tracer: {e}")))?;
            (Some(t), late)
        }
        None => (None, Vec::new()),
    };
    let before = disturb::snapshot(host);
    let steal = StealSampler::start(host, &probe_cfg.cpus, planned)
        .map_err(|e| MeasureError::io("start the steal sampler", e))?;
    let start = Instant::now();
    let mut threads = Vec::new();
    if !interrupted {
        let probe =
            Probe::start_feeding(probe_cfg, stop.clone(), plan.prepare, late, plan.guard_feed)?;
        while !probe.finished() {
            std::thread::sleep(Duration::from_millis(100));
            on_progress(&probe.progress(), start.elapsed());
        }
        threads = probe.join();
        interrupted = stop.load(Ordering::Relaxed);
    }
    let elapsed_ns = start.elapsed().as_nanos() as u64;
    let tick_ns = crate::trace::tail::tick_ns();
    let steal = steal.finish(tick_ns);
    let after = disturb::snapshot(host);
    tracing::debug!("segment: probe done after {:?}", t_seg.elapsed());
    let mut tail = tracer
        .map(|t| t.finish())
        .transpose()
        .map_err(|e| MeasureError::Setup(format!("tracer: {e}")))?;
    let attributions = tail
        .as_mut()
        .map_or(&mut [][..], |t| &mut t.attributions[..]);
    label_threads(&mut threads, &steal, attributions, tick_ns);
    let metrics = stop_loads(loads)?;
    tracing::debug!("segment: loads down after {:?}", t_seg.elapsed());
    Ok(Segment {
        threads,
        metrics,
        disturbance: disturb::between(&before, &after, &cpus),
        elapsed_ns,
        interrupted,
        tail,
        steal,
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

/// Merge the wake-up histograms (the late releases left out) of thread outcomes.
pub fn merged_wakeups<'a>(outs: impl IntoIterator<Item = &'a ThreadOutcome>) -> Hist {
    let mut h = Hist::new();
    for o in outs {
        h.merge(&o.wakeups);
    }
    h
}

/// A result of all samples (no host labelling: not the latency probe's).
pub fn cpu_result(cpu: u32, h: &Hist, missed: u64) -> CpuResult {
    CpuResult {
        cpu,
        summary: h.summary(missed),
        hist: h.to_data(),
        guest_summary: None,
        host_stalled_samples: 0,
        host_stalled_ns: 0,
    }
}

/// A latency probe's result: all samples, and the two tails (`split`).
pub fn probe_result(cpu: u32, h: &Hist, missed: u64, split: &HostSplit) -> CpuResult {
    CpuResult {
        guest_summary: Some(split.guest.summary(split.guest_missed)),
        host_stalled_samples: split.host_samples,
        host_stalled_ns: split.host_ns,
        ..cpu_result(cpu, h, missed)
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
        .probe
        .cpus
        .iter()
        .map(|c| {
            let on_c = || threads.iter().filter(move |t| t.cpu == c);
            let (h, m) = merged(on_c());
            probe_result(c, &h, m, &HostSplit::of(on_c()))
        })
        .collect();
    let (all, missed) = merged(threads);
    let split = HostSplit::of(threads);
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
        overall: probe_result(
            settings.probe.cpus.first().unwrap_or(0),
            &all,
            missed,
            &split,
        ),
        settings,
        load,
        disturbance,
        elapsed_ns,
        tail_causes: None,
    }
}
