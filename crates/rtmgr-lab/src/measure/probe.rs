//! The latency probe (docs/architecture.md "Measuring"; McKenney §2.1 Figs. 1–3, §3 Fig. 8):
//! one thread per measured CPU (or K with --parallel), memory locked by the
//! caller, SCHED_FIFO at the top priority by default, sleeping with
//! clock_nanosleep(TIMER_ABSTIME) on CLOCK_MONOTONIC to t0 + k·interval.
//! Latency = wake-up − intended release. A release that passes while the thread
//! is still late for an earlier one is recorded against its own release time
//! (never skipped: no coordinated omission) and counted as missed. McKenney's
//! relative mode sleeps for a duration instead and records signed jitter.

use super::{gettid, mono_ns, sleep_until, thread_cpu_ns, thread_switches, MeasureError, Result};
use crate::report::{PolicySpec, ProbeMode};
use crate::trace::LateTx;
use crate::trace::Sample;
use rtmgr_core::host_stall::{HostLabel, LateWake, LATE_FLOOR_NS};
use rtmgr_core::stats::Hist;
use rtmgr_linux::balance::guard::GuardFeed;
use rtmgr_linux::sched::Policy;
use rtmgr_sys::time::{diff_ns, sleep_for};
use rtmgr_sys::Nanos;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::*};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

/// What the probe runs (the report's `ProbeSpec`).
pub type ProbeConfig = crate::report::ProbeSpec;

/// How often a thread publishes its new samples for the progress line.
const PUBLISH_NS: i64 = 100_000_000;
/// Histograms are pre-sized to this value so the loop never allocates.
const PRESIZE_NS: i64 = 10_000_000_000;
/// Late wake-ups kept one by one per thread, at most (beyond: in `base`, the guest's).
const LATE_CAPACITY: u64 = 65_536;
/// `Shared::start_at` before the threads may start, and when they must not.
const START_WAIT: Nanos = 0;
const START_ABORT: Nanos = Nanos::MAX;

struct Slot {
    live: Mutex<Hist>,
    samples: AtomicU64,
    missed: AtomicU64,
    max: AtomicI64,
    done: AtomicBool,
}

struct Shared {
    stop: Arc<AtomicBool>,
    /// START_WAIT, START_ABORT, else t0 in CLOCK_MONOTONIC ns.
    start_at: AtomicU64,
    slots: Vec<Slot>,
}

/// One thread's result.
pub struct ThreadOutcome {
    pub cpu: u32,
    pub index: u32,
    pub hist: Hist,
    /// The wake-ups alone (`hist` also holds the releases they missed).
    pub wakeups: Hist,
    pub missed: u64,
    pub voluntary_ctxt_switches: u64,
    pub involuntary_ctxt_switches: u64,
    pub cpu_time_ns: u64,
    /// The release period (to rebuild the missed releases' latencies).
    pub interval_ns: u64,
    /// Wake-ups at least `LATE_FLOOR_NS` late, each with the releases it missed.
    pub late: Vec<LateWake>,
    /// Every sample not in `late` (`hist` = `base` + `late`'s samples).
    pub base: Hist,
    /// One per `late` wake-up once the segment labelled them (empty: not labelled).
    pub labels: Vec<HostLabel>,
}

/// Running probe threads.
pub struct Probe {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<ThreadOutcome>>,
    pub t0_ns: Nanos,
}

/// Snapshot for the live progress line.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    pub samples: u64,
    pub missed: u64,
    pub max_ns: Option<i64>,
    pub p99_ns: Option<i64>,
}

pub fn to_policy(p: PolicySpec) -> Policy {
    match p {
        PolicySpec::Fifo { priority } => Policy::Fifo { priority },
        PolicySpec::Rr { priority } => Policy::Rr { priority },
        PolicySpec::Deadline {
            runtime_ns,
            period_ns,
        } => Policy::Deadline {
            runtime: runtime_ns,
            deadline: period_ns,
            period: period_ns,
        },
    }
}

pub use rtmgr_linux::rt_thread::{max_fifo_priority, setup_rt_thread, Prepare};

impl Probe {
    pub fn start(
        cfg: &ProbeConfig,
        stop: Arc<AtomicBool>,
        prepare: Option<Prepare>,
    ) -> Result<Probe> {
        Self::start_traced(cfg, stop, prepare, Vec::new())
    }

    /// Start, handing each thread's late samples to a tracer: `late` has one
    /// entry per thread (CPUs in order, `parallel` per CPU), or is empty.
    pub fn start_traced(
        cfg: &ProbeConfig,
        stop: Arc<AtomicBool>,
        prepare: Option<Prepare>,
        late: Vec<LateTx>,
    ) -> Result<Probe> {
        Self::start_feeding(cfg, stop, prepare, late, None)
    }

    /// `start_traced`, also feeding every wake-up to the live balancer's
    /// latency guard (evaluate's "balanced": the probe is the guard).
    pub fn start_feeding(
        cfg: &ProbeConfig,
        stop: Arc<AtomicBool>,
        prepare: Option<Prepare>,
        late: Vec<LateTx>,
        guard_feed: Option<GuardFeed>,
    ) -> Result<Probe> {
        if cfg.interval_ns == 0 || cfg.cpus.is_empty() || cfg.parallel == 0 {
            return Err(MeasureError::Setup(
                "probe needs an interval > 0, at least one CPU and --parallel ≥ 1".into(),
            ));
        }
        let placements: Vec<(u32, u32)> = cfg
            .cpus
            .iter()
            .flat_map(|c| (0..cfg.parallel).map(move |i| (c, i)))
            .collect();
        let shared = Arc::new(Shared {
            stop,
            start_at: AtomicU64::new(START_WAIT),
            slots: placements
                .iter()
                .map(|_| Slot {
                    live: Mutex::new(Hist::new()),
                    samples: AtomicU64::new(0),
                    missed: AtomicU64::new(0),
                    max: AtomicI64::new(i64::MIN),
                    done: AtomicBool::new(false),
                })
                .collect(),
        });
        let (tx, rx) = mpsc::channel::<std::result::Result<(), String>>();
        let mut handles = Vec::new();
        let mut late = late.into_iter();
        for (slot, &(cpu, index)) in placements.iter().enumerate() {
            let (shared, tx, prepare, cfg, feed) = (
                shared.clone(),
                tx.clone(),
                prepare.clone(),
                cfg.clone(),
                guard_feed.clone(),
            );
            let late = late.next();
            let h = std::thread::Builder::new()
                .name(format!("rtmgr-probe{cpu}.{index}"))
                .spawn(move || {
                    let ok = setup_rt_thread(cpu, to_policy(cfg.policy), prepare.as_ref());
                    let failed = ok.is_err();
                    let _ = tx.send(ok.map_err(|e| e.to_string()));
                    drop(tx);
                    run_thread(&cfg, &shared, slot, (cpu, index), failed, late, feed)
                })
                .map_err(|e| MeasureError::io("spawn probe thread", e))?;
            handles.push(h);
        }
        drop(tx);
        let mut errors = Vec::new();
        for _ in 0..handles.len() {
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => errors.push(e),
                Err(_) => errors.push("probe thread died during setup".into()),
            }
        }
        if !errors.is_empty() {
            errors.sort();
            errors.dedup();
            shared.start_at.store(START_ABORT, SeqCst);
            for h in handles {
                let _ = h.join();
            }
            return Err(MeasureError::Setup(errors.join("; ")));
        }
        let t0 = mono_ns() + 1_000_000;
        shared.start_at.store(t0, SeqCst);
        Ok(Probe {
            shared,
            handles,
            t0_ns: t0,
        })
    }

    pub fn progress(&self) -> Progress {
        let mut h = Hist::new();
        let mut p = Progress::default();
        for s in &self.shared.slots {
            if let Ok(l) = s.live.lock() {
                h.merge(&l);
            }
            p.samples += s.samples.load(Relaxed);
            p.missed += s.missed.load(Relaxed);
            let m = s.max.load(Relaxed);
            if m != i64::MIN {
                p.max_ns = Some(p.max_ns.map_or(m, |x: i64| x.max(m)));
            }
        }
        p.p99_ns = h.percentile(990_000);
        p
    }

    pub fn finished(&self) -> bool {
        self.shared.slots.iter().all(|s| s.done.load(Acquire))
    }

    /// Wait for all threads (set the stop flag first to end early).
    pub fn join(self) -> Vec<ThreadOutcome> {
        self.handles
            .into_iter()
            .filter_map(|h| h.join().ok())
            .collect()
    }
}

/// How many late wake-ups a thread can keep: one per `LATE_FLOOR_NS` of the
/// run (or one per sample), at most `LATE_CAPACITY`.
fn late_capacity(cfg: &ProbeConfig) -> usize {
    let by_time = cfg.duration_ns.map_or(u64::MAX, |d| d / LATE_FLOOR_NS + 1);
    let by_loops = cfg.loops.unwrap_or(u64::MAX);
    by_time.min(by_loops).min(LATE_CAPACITY) as usize
}

fn run_thread(
    cfg: &ProbeConfig,
    shared: &Shared,
    slot: usize,
    (cpu, index): (u32, u32),
    failed: bool,
    mut late: Option<LateTx>,
    guard_feed: Option<GuardFeed>,
) -> ThreadOutcome {
    let tid = gettid();
    let me = &shared.slots[slot];
    let mut out = ThreadOutcome {
        cpu,
        index,
        hist: Hist::new(),
        wakeups: Hist::new(),
        missed: 0,
        voluntary_ctxt_switches: 0,
        involuntary_ctxt_switches: 0,
        cpu_time_ns: 0,
        interval_ns: cfg.interval_ns,
        late: Vec::new(),
        base: Hist::new(),
        labels: Vec::new(),
    };
    let late_capacity = late_capacity(cfg);
    // Touch the pages now so that keeping a late wake-up never faults or allocates.
    out.late.resize(late_capacity, LateWake::default());
    out.late.clear();
    let mut delta = Hist::new();
    for h in [&mut out.hist, &mut out.wakeups, &mut out.base, &mut delta] {
        h.record(PRESIZE_NS);
        h.clear();
    }
    let t0 = loop {
        match shared.start_at.load(SeqCst) {
            START_WAIT if !failed => std::thread::sleep(std::time::Duration::from_millis(1)),
            t if t != START_ABORT && !failed => break t,
            _ => {
                me.done.store(true, Release);
                return out;
            }
        }
    };
    let interval = cfg.interval_ns;
    let end = cfg.duration_ns.map(|d| t0 + d);
    let loops = cfg.loops.unwrap_or(u64::MAX);
    let (v0, i0) = thread_switches();
    let c0 = thread_cpu_ns();
    let mut next = t0 + interval;
    let mut last_pub = t0;
    let mut samples = 0u64;
    let mut max = i64::MIN;
    while samples < loops && !shared.stop.load(Relaxed) && end.is_none_or(|e| next <= e) {
        let (lat, now) = match cfg.mode {
            ProbeMode::Absolute => {
                sleep_until(next);
                let now = mono_ns();
                (diff_ns(now, next), now)
            }
            ProbeMode::Relative => {
                let t1 = mono_ns();
                // A signal ends the sleep early: it shows as negative jitter.
                sleep_for(interval);
                let now = mono_ns();
                (diff_ns(now, t1) - interval as i64, now)
            }
        };
        out.hist.record(lat);
        out.wakeups.record(lat);
        if let Some(f) = &guard_feed {
            f.sample(cpu, lat.max(0) as u64);
        }
        delta.record(lat);
        let kept = cfg.mode == ProbeMode::Absolute
            && lat >= LATE_FLOOR_NS as i64
            && out.late.len() < late_capacity;
        if !kept {
            out.base.record(lat);
        }
        let missed_before = out.missed;
        samples += 1;
        max = max.max(lat);
        if let (Some(l), ProbeMode::Absolute) = (late.as_mut(), cfg.mode) {
            l.offer(Sample {
                cpu,
                tid,
                release_ns: next,
                wake_ns: now,
            });
        }
        if cfg.mode == ProbeMode::Absolute {
            // Releases that passed while we were late: served now, at their own release.
            let mut rel = next + interval;
            while rel <= now && samples < loops && end.is_none_or(|e| rel <= e) {
                out.hist.record((now - rel) as i64);
                delta.record((now - rel) as i64);
                if !kept {
                    out.base.record((now - rel) as i64);
                }
                out.missed += 1;
                samples += 1;
                rel += interval;
            }
            if kept {
                out.late.push(LateWake {
                    release_ns: next,
                    wake_ns: now,
                    missed: (out.missed - missed_before) as u32,
                });
            }
            next = rel;
        } else {
            next = now + interval;
        }
        if diff_ns(now, last_pub) >= PUBLISH_NS {
            if let Some(l) = late.as_mut() {
                l.set_running_p99(out.hist.percentile(990_000));
            }
            if let Ok(mut l) = me.live.try_lock() {
                l.merge(&delta);
                delta.clear();
                last_pub = now;
            }
            me.samples.store(samples, Relaxed);
            me.missed.store(out.missed, Relaxed);
            me.max.store(max, Relaxed);
        }
    }
    let (v1, i1) = thread_switches();
    out.cpu_time_ns = thread_cpu_ns().saturating_sub(c0);
    out.voluntary_ctxt_switches = v1 - v0;
    out.involuntary_ctxt_switches = i1 - i0;
    if let Ok(mut l) = me.live.lock() {
        l.merge(&delta);
    }
    me.samples.store(samples, Relaxed);
    me.missed.store(out.missed, Relaxed);
    me.max.store(max, Relaxed);
    me.done.store(true, Release);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtmgr_core::CpuSet;
    use rtmgr_linux::sched;

    fn cfg(mode: ProbeMode, policy: PolicySpec) -> ProbeConfig {
        ProbeConfig {
            mode,
            cpus: CpuSet::single(0),
            interval_ns: 200_000,
            duration_ns: None,
            loops: Some(500),
            policy,
            parallel: 2,
        }
    }

    #[test]
    fn counts_add_up_with_loops() {
        if !sched::is_root() {
            eprintln!("skip: SCHED_FIFO needs root");
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let c = cfg(ProbeMode::Absolute, PolicySpec::Fifo { priority: 50 });
        let p = Probe::start(&c, stop, None).unwrap();
        let out = p.join();
        assert_eq!(out.len(), 2);
        for o in &out {
            assert_eq!(
                o.hist.len(),
                500,
                "every release recorded, missed ones included"
            );
            assert!(o.hist.min().unwrap() >= 0);
            assert!(o.missed < 500);
            let in_late: u64 = o.late.iter().map(|w| w.samples()).sum();
            assert_eq!(o.base.len() + in_late, 500, "base + late wake-ups = all");
            assert!(o.late.iter().all(|w| w.latency_ns() >= LATE_FLOOR_NS));
        }
    }

    #[test]
    fn relative_mode_and_stop_flag() {
        if !sched::is_root() {
            eprintln!("skip: SCHED_RR needs root");
            return;
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut c = cfg(ProbeMode::Relative, PolicySpec::Rr { priority: 50 });
        c.loops = None;
        c.duration_ns = Some(60_000_000_000);
        let p = Probe::start(&c, stop.clone(), None).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        stop.store(true, SeqCst);
        let out = p.join();
        assert!(out.iter().all(|o| !o.hist.is_empty() && o.missed == 0));
    }

    #[test]
    fn setup_failure_is_reported_and_threads_end() {
        let stop = Arc::new(AtomicBool::new(false));
        let mut c = cfg(ProbeMode::Absolute, PolicySpec::Fifo { priority: 50 });
        c.cpus = CpuSet::single(1000); // not a CPU
        assert!(Probe::start(&c, stop, None).is_err());
    }
}
