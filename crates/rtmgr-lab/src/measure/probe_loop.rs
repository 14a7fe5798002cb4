//! One lab probe thread's loop (docs/architecture.md "Measuring"; McKenney
//! §2.1: wake-up − intended release, every release recorded, none skipped):
//! what it keeps, preallocated before the loop, and what it shares with the
//! progress line and the tracer — atomics and a `SampleRing`, no lock and
//! no allocation (`tests/probe_loop_no_alloc.rs`); the percentile work is
//! the reader's (`probe::Probe::progress`).

use super::{gettid, mono_ns, sleep_until};
use crate::report::{ProbeMode, ProbeSpec};
use crate::trace::{LateTx, Sample};
use rtmgr_core::host_stall::{HostLabel, LateWake, LATE_FLOOR_NS};
use rtmgr_core::stats::Hist;
use rtmgr_linux::balance::guard::SampleFeed;
use rtmgr_linux::probe::SampleRing;
use rtmgr_sys::time::{diff_ns, sleep_for};
use rtmgr_sys::Nanos;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering::*};

/// How often a thread publishes its counts and takes the tracer's new floor.
pub const PUBLISH_NS: i64 = 100_000_000;
/// Histograms are pre-sized to this value so the loop never allocates.
const PRESIZE_NS: i64 = 10_000_000_000;
/// Late wake-ups kept one by one per thread, at most (beyond: in `base`, the guest's).
const LATE_CAPACITY: u64 = 65_536;
/// No running p99 yet (`Slot::running_p99`).
const NO_P99: i64 = i64::MIN;

/// What one probe thread shares: written by it, read by the progress line.
pub struct Slot {
    /// Every latency the thread records (its bits: relative mode's jitter
    /// may be negative), with its wake-up time.
    pub ring: SampleRing,
    /// The thread's p99 so far, as the reader last computed it.
    running_p99: AtomicI64,
    pub samples: AtomicU64,
    pub missed: AtomicU64,
    pub max: AtomicI64,
    pub done: AtomicBool,
}

impl Slot {
    /// A slot whose ring holds several publications' worth of samples at
    /// `interval_ns` (the reader copies it out every 100 ms).
    pub fn new(interval_ns: u64) -> Slot {
        let per_read = (PUBLISH_NS as u64 / interval_ns.max(1)) as usize;
        Slot {
            ring: SampleRing::new((4 * per_read).clamp(1024, 1 << 18)),
            running_p99: AtomicI64::new(NO_P99),
            samples: AtomicU64::new(0),
            missed: AtomicU64::new(0),
            max: AtomicI64::new(i64::MIN),
            done: AtomicBool::new(false),
        }
    }

    /// The reader's new figure of the thread's p99.
    pub fn set_running_p99(&self, p99_ns: Option<i64>) {
        self.running_p99.store(p99_ns.unwrap_or(NO_P99), Relaxed);
    }

    fn running_p99(&self) -> Option<i64> {
        Some(self.running_p99.load(Relaxed)).filter(|&p| p != NO_P99)
    }
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

/// How many late wake-ups a thread can keep: one per `LATE_FLOOR_NS` of the
/// run (or one per sample), at most `LATE_CAPACITY`.
fn late_capacity(cfg: &ProbeSpec) -> usize {
    let by_time = cfg.duration_ns.map_or(u64::MAX, |d| d / LATE_FLOOR_NS + 1);
    let by_loops = cfg.loops.unwrap_or(u64::MAX);
    by_time.min(by_loops).min(LATE_CAPACITY) as usize
}

/// One probe thread's loop state: what it recorded, preallocated so that
/// the loop never allocates.
pub struct Recorder<'a> {
    cfg: &'a ProbeSpec,
    me: &'a Slot,
    cpu: u32,
    tid: u32,
    pub out: ThreadOutcome,
    late: Option<LateTx>,
    late_capacity: usize,
    guard_feed: Option<SampleFeed>,
    pub next: Nanos,
    pub last_pub: Nanos,
    pub samples: u64,
    max: i64,
}

impl<'a> Recorder<'a> {
    pub fn new(
        cfg: &'a ProbeSpec,
        me: &'a Slot,
        (cpu, index): (u32, u32),
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
        for h in [&mut out.hist, &mut out.wakeups, &mut out.base] {
            h.record(PRESIZE_NS);
            h.clear();
        }
        Recorder {
            cfg,
            me,
            cpu,
            tid: gettid(),
            out,
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
    pub fn wake(&self) -> (i64, Nanos) {
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
    pub fn record(&mut self, lat: i64, now: Nanos, loops: u64, end: Option<Nanos>) {
        let absolute = self.cfg.mode == ProbeMode::Absolute;
        self.out.hist.record(lat);
        self.out.wakeups.record(lat);
        if let Some(f) = &self.guard_feed {
            f.sample(self.cpu, lat.max(0) as u64);
        }
        self.me.ring.push(now, lat as u64);
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
            self.me.ring.push(now, lat as u64);
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

    /// The counts for the progress line, and the tracer's floor from the
    /// running p99 the reader computed.
    pub fn publish(&mut self, now: Nanos) {
        if let Some(l) = self.late.as_mut() {
            l.set_running_p99(self.me.running_p99());
        }
        self.last_pub = now;
        self.store_counts();
    }

    pub fn store_counts(&self) {
        self.me.samples.store(self.samples, Relaxed);
        self.me.missed.store(self.out.missed, Relaxed);
        self.me.max.store(self.max, Relaxed);
    }
}
