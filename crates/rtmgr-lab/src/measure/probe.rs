//! The latency probe (docs/architecture.md "Measuring"; McKenney §2.1 Figs. 1–3, §3 Fig. 8):
//! one thread per measured CPU (or K with --parallel), memory locked by the
//! caller, SCHED_FIFO at the top priority by default, sleeping with
//! clock_nanosleep(TIMER_ABSTIME) on CLOCK_MONOTONIC to t0 + k·interval.
//! Latency = wake-up − intended release. A release that passes while the thread
//! is still late for an earlier one is recorded against its own release time
//! (never skipped: no coordinated omission) and counted as missed. McKenney's
//! relative mode sleeps for a duration instead and records signed jitter.

use super::probe_loop::{Recorder, Slot, PUBLISH_NS};
use super::{mono_ns, thread_cpu_ns, thread_switches, MeasureError, Result};
use crate::report::PolicySpec;
use crate::trace::LateTx;
use rtmgr_core::stats::Hist;
use rtmgr_linux::balance::guard::SampleFeed;
use rtmgr_linux::probe::spawn_pinned;
use rtmgr_linux::sched::Policy;
use rtmgr_sys::time::diff_ns;
use rtmgr_sys::Nanos;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub use super::probe_loop::ThreadOutcome;

/// What the probe runs (the report's `ProbeSpec`).
pub type ProbeConfig = crate::report::ProbeSpec;

/// `Shared::start_at` before the threads may start, and when they must not.
const START_WAIT: Nanos = 0;
const START_ABORT: Nanos = Nanos::MAX;

struct Shared {
    stop: Arc<AtomicBool>,
    /// START_WAIT, START_ABORT, else t0 in CLOCK_MONOTONIC ns.
    start_at: AtomicU64,
    slots: Vec<Slot>,
}

/// Running probe threads.
pub struct Probe {
    shared: Arc<Shared>,
    handles: Vec<JoinHandle<ThreadOutcome>>,
    /// The progress line's copy of each thread's samples (off the probe
    /// threads: they only fill their rings).
    reader: Mutex<Reader>,
    pub t0_ns: Nanos,
}

/// Each thread's samples read so far: its ring's cursor and histogram.
struct Reader {
    cursors: Vec<u64>,
    hists: Vec<Hist>,
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
                .map(|_| Slot::new(cfg.interval_ns))
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
        let n = placements.len();
        Ok(Probe {
            shared,
            handles,
            reader: Mutex::new(Reader {
                cursors: vec![0; n],
                hists: (0..n).map(|_| Hist::new()).collect(),
            }),
            t0_ns: t0,
        })
    }

    /// Each thread's samples so far (copied out of its ring here, on the
    /// caller's thread), and each thread's running p99 handed back to it
    /// for its tracer's floor. Called every 100 ms by the segment.
    pub fn progress(&self) -> Progress {
        let mut p = Progress::default();
        let mut all = Hist::new();
        let mut reader = self.reader.lock().unwrap_or_else(|e| e.into_inner());
        let Reader { cursors, hists } = &mut *reader;
        for ((s, cursor), h) in self.shared.slots.iter().zip(cursors).zip(hists) {
            *cursor = s.ring.read_since(*cursor, |_, l| h.record(l as i64));
            s.set_running_p99(h.percentile(990_000));
            all.merge(h);
            p.samples += s.samples.load(Relaxed);
            p.missed += s.missed.load(Relaxed);
            let m = s.max.load(Relaxed);
            if m != i64::MIN {
                p.max_ns = Some(p.max_ns.map_or(m, |x: i64| x.max(m)));
            }
        }
        p.p99_ns = all.percentile(990_000);
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
    let mut rec = Recorder::new(cfg, me, (cpu, index), late, guard_feed);
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
            rec.publish(now);
        }
    }
    let (v1, i1) = thread_switches();
    rec.out.cpu_time_ns = thread_cpu_ns().saturating_sub(c0);
    rec.out.voluntary_ctxt_switches = v1 - v0;
    rec.out.involuntary_ctxt_switches = i1 - i0;
    rec.store_counts();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::ProbeMode;
    use rtmgr_core::host_stall::LATE_FLOOR_NS;
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
