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
use rtmgr_linux::balance::guard::SampleFeed;
use rtmgr_linux::probe::spawn_pinned;
use rtmgr_linux::sched::Policy;
use rtmgr_sys::time::{diff_ns, sleep_for};
use rtmgr_sys::Nanos;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
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
        guard_feed: Option<SampleFeed>,
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
        // Each thread takes its tracer once, before its loop.
        let late: Mutex<Vec<Option<LateTx>>> = Mutex::new(late.into_iter().map(Some).collect());
        let (sh, c, cpus) = (shared.clone(), cfg.clone(), placements.clone());
        let started = spawn_pinned(
            &placements.iter().map(|&(cpu, _)| cpu).collect::<Vec<_>>(),
            |i| format!("rtmgr-probe{}.{}", placements[i].0, placements[i].1),
            to_policy(cfg.policy),
            prepare,
            move |slot, set_up| {
                let late = late
                    .lock()
                    .ok()
                    .and_then(|mut l| l.get_mut(slot).and_then(Option::take));
                let feed = guard_feed.clone();
                run_thread(&c, &sh, slot, cpus[slot], !set_up, late, feed)
            },
        );
        let handles = started.handles;
        if let Err(e) = started.setup {
            shared.start_at.store(START_ABORT, SeqCst);
            for h in handles {
                let _ = h.join();
            }
            return Err(e);
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
    late: Option<LateTx>,
    guard_feed: Option<SampleFeed>,
) -> ThreadOutcome {
    let me = &shared.slots[slot];
    let mut rec = Recorder::new(cfg, cpu, index, late, guard_feed);
    let Some(t0) = wait_for_start(shared, failed) else {
        me.done.store(true, Release);
        return rec.out;
    };
    let end = cfg.duration_ns.map(|d| t0 + d);
    let loops = cfg.loops.unwrap_or(u64::MAX);
    let (v0, i0) = thread_switches();
    let c0 = thread_cpu_ns();
    rec.next = t0 + cfg.interval_ns;
    rec.last_pub = t0;
    while rec.samples < loops && !shared.stop.load(Relaxed) && end.is_none_or(|e| rec.next <= e) {
        let (lat, now) = rec.wake();
        rec.record(lat, now, loops, end);
        if diff_ns(now, rec.last_pub) >= PUBLISH_NS {
            rec.publish(me, now);
        }
    }
    let (v1, i1) = thread_switches();
    rec.out.cpu_time_ns = thread_cpu_ns().saturating_sub(c0);
    rec.out.voluntary_ctxt_switches = v1 - v0;
    rec.out.involuntary_ctxt_switches = i1 - i0;
    if let Ok(mut l) = me.live.lock() {
        l.merge(&rec.delta);
    }
    rec.store_counts(me);
    me.done.store(true, Release);
    rec.out
}

/// Wait until `start` gives t0; None when the probe is aborted (or this
/// thread's set-up failed).
fn wait_for_start(shared: &Shared, failed: bool) -> Option<Nanos> {
    loop {
        match shared.start_at.load(SeqCst) {
            START_WAIT if !failed => std::thread::sleep(std::time::Duration::from_millis(1)),
            t if t != START_ABORT && !failed => return Some(t),
            _ => return None,
        }
    }
}

/// One probe thread's loop state: what it recorded, preallocated so that
/// the loop never allocates.
struct Recorder<'a> {
    cfg: &'a ProbeConfig,
    cpu: u32,
    tid: u32,
    out: ThreadOutcome,
    /// Samples since the last publication (for the progress line).
    delta: Hist,
    late: Option<LateTx>,
    late_capacity: usize,
    guard_feed: Option<SampleFeed>,
    next: Nanos,
    last_pub: Nanos,
    samples: u64,
    max: i64,
}

impl<'a> Recorder<'a> {
    fn new(
        cfg: &'a ProbeConfig,
        cpu: u32,
        index: u32,
        late: Option<LateTx>,
        guard_feed: Option<SampleFeed>,
    ) -> Self {
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
        Recorder {
            cfg,
            cpu,
            tid: gettid(),
            out,
            delta,
            late,
            late_capacity,
            guard_feed,
            next: 0,
            last_pub: 0,
            samples: 0,
            max: i64::MIN,
        }
    }

    /// Sleep to the next release (or for one interval, relative mode):
    /// (latency, wake-up time).
    fn wake(&self) -> (i64, Nanos) {
        match self.cfg.mode {
            ProbeMode::Absolute => {
                sleep_until(self.next);
                let now = mono_ns();
                (diff_ns(now, self.next), now)
            }
            ProbeMode::Relative => {
                let t1 = mono_ns();
                // A signal ends the sleep early: it shows as negative jitter.
                sleep_for(self.cfg.interval_ns);
                let now = mono_ns();
                (diff_ns(now, t1) - self.cfg.interval_ns as i64, now)
            }
        }
    }

    /// Record one wake-up `lat` late at `now`, and the releases it missed.
    fn record(&mut self, lat: i64, now: Nanos, loops: u64, end: Option<Nanos>) {
        let absolute = self.cfg.mode == ProbeMode::Absolute;
        self.out.hist.record(lat);
        self.out.wakeups.record(lat);
        if let Some(f) = &self.guard_feed {
            f.sample(self.cpu, lat.max(0) as u64);
        }
        self.delta.record(lat);
        let kept =
            absolute && lat >= LATE_FLOOR_NS as i64 && self.out.late.len() < self.late_capacity;
        if !kept {
            self.out.base.record(lat);
        }
        self.samples += 1;
        self.max = self.max.max(lat);
        if !absolute {
            self.next = now + self.cfg.interval_ns;
            return;
        }
        if let Some(l) = self.late.as_mut() {
            l.offer(Sample {
                cpu: self.cpu,
                tid: self.tid,
                release_ns: self.next,
                wake_ns: now,
            });
        }
        let missed = self.serve_missed(now, kept, loops, end);
        if kept {
            self.out.late.push(LateWake {
                release_ns: self.next,
                wake_ns: now,
                missed,
            });
        }
        self.next += self.cfg.interval_ns * (u64::from(missed) + 1);
    }

    /// Releases that passed while the thread was late: served now, each at
    /// its own release (no coordinated omission). Returns how many.
    fn serve_missed(&mut self, now: Nanos, kept: bool, loops: u64, end: Option<Nanos>) -> u32 {
        let mut rel = self.next + self.cfg.interval_ns;
        let mut missed = 0u32;
        while rel <= now && self.samples < loops && end.is_none_or(|e| rel <= e) {
            let lat = (now - rel) as i64;
            self.out.hist.record(lat);
            self.delta.record(lat);
            if !kept {
                self.out.base.record(lat);
            }
            self.out.missed += 1;
            self.samples += 1;
            missed += 1;
            rel += self.cfg.interval_ns;
        }
        missed
    }

    /// The progress line's figures; the histogram only if nobody reads it now.
    fn publish(&mut self, me: &Slot, now: Nanos) {
        if let Some(l) = self.late.as_mut() {
            l.set_running_p99(self.out.hist.percentile(990_000));
        }
        if let Ok(mut l) = me.live.try_lock() {
            l.merge(&self.delta);
            self.delta.clear();
            self.last_pub = now;
        }
        self.store_counts(me);
    }

    fn store_counts(&self, me: &Slot) {
        me.samples.store(self.samples, Relaxed);
        me.missed.store(self.out.missed, Relaxed);
        me.max.store(self.max, Relaxed);
    }
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
