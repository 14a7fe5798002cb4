//! The latency guard of `rtmgr balance` (ARTiS §2.2: RT0's latency first):
//! the probe service (`crate::probe`, one SCHED_FIFO thread per RT CPU in
//! the partition's RT cpuset), or the samples of a probe that runs anyway
//! (`SampleFeed`). A sample on a CPU with guests over core's
//! `guard_limit_ns` sends them to the NRT CPUs at once from the probe
//! thread; the policy learns of the trip at its next step. The probe thread
//! only writes atomics (`cpu.rs`); the balancer loop reads them, does the
//! percentile work and sets the limits. A CPU without guests is probed at
//! the slow rate (`IDLE_INTERVAL_NS`), at full rate again from its first lend.

mod cpu;

pub use cpu::{GUESTS_MAX, WINDOW_SAMPLES};

use super::mover::Evictor;
use crate::cgroup;
use crate::partition::Applied;
use crate::probe::{run_paced, spawn_pinned, Pace};
use crate::rt_thread::{max_fifo_priority, MeasureError, Prepare};
use crate::sched::Policy;
use crate::Host;
use cpu::{CpuGuard, NONE_NS};
use rtmgr_core::balance::{guard_limit_ns, p99_in_place};
use rtmgr_core::CpuSet;
use rtmgr_sys::time::mono_ns;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The guard's rate on an RT CPU that has no guest: nothing to evict, so a
/// sample every 100 ms keeps the guest-free figures alive at a tenth of
/// the default cost.
pub const IDLE_INTERVAL_NS: u64 = 100_000_000;

/// What one RT CPU's guard did since the loop last asked: late samples
/// that sent its guests away, the latest of them, and how many guests left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trip {
    pub cpu: u32,
    pub trips: u64,
    pub latency_ns: u64,
    pub evicted: u64,
}

/// Evicting at once on a late sample: the bound and how.
pub struct Immediate {
    pub bound_ns: u64,
    pub evictor: Evictor,
}

/// Per-window sample counts of one RT CPU (for the lending controller).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub samples: u64,
    /// Samples over the latency bound.
    pub late: u64,
}

/// The guard's state, fed one sample at a time by its own threads or by a
/// latency probe that runs anyway (`SampleFeed`).
struct State {
    cpus: Vec<CpuGuard>,
    /// Each RT CPU's probe rate (the guard's own threads).
    paces: Vec<Pace>,
    /// The immediate eviction's bound (NONE_NS: not armed) and evictor,
    /// locked only on a trip (try_lock: a trip that finds it taken waits
    /// for the policy's step).
    immediate_bound_ns: std::sync::atomic::AtomicU64,
    evictor: Mutex<Option<Evictor>>,
}

impl State {
    fn new(cpus: &CpuSet, interval_ns: u64) -> State {
        State {
            cpus: cpus.iter().map(CpuGuard::new).collect(),
            paces: cpus
                .iter()
                .map(|_| Pace::new(interval_ns, IDLE_INTERVAL_NS, false))
                .collect(),
            immediate_bound_ns: NONE_NS.into(),
            evictor: Mutex::new(None),
        }
    }

    /// One wake-up of the probe on the CPU at `index`: lock-free unless
    /// it trips.
    fn sample(&self, index: usize, at_ns: u64, late_ns: u64) {
        let c = &self.cpus[index];
        if let Some(version) = c.sample(at_ns, late_ns) {
            self.trip(c, version, late_ns);
        }
    }

    /// Send the guests of `version` away now (the cold path).
    #[cold]
    fn trip(&self, c: &CpuGuard, version: u32, late_ns: u64) {
        let mut tids = [0u32; GUESTS_MAX];
        let Some(n) = c.guests.copy(version, &mut tids) else {
            return;
        };
        let Ok(evictor) = self.evictor.try_lock() else {
            return;
        };
        let Some(evictor) = evictor.as_ref() else {
            return;
        };
        let evicted = tids[..n]
            .iter()
            .filter(|&&t| evictor.evict(t).is_ok())
            .count();
        c.record_trip(version, late_ns, evicted as u64);
    }

    fn arm(&self, opts: &mut GuardOptions) {
        for c in &self.cpus {
            c.bound_ns.store(opts.bound_ns.unwrap_or(NONE_NS), Relaxed);
        }
        let bound = opts.immediate.as_ref().map_or(NONE_NS, |i| i.bound_ns);
        self.immediate_bound_ns.store(bound, Relaxed);
        if let Ok(mut e) = self.evictor.lock() {
            *e = opts.immediate.take().map(|i| i.evictor);
        }
        self.update_limits(&mut Vec::with_capacity(WINDOW_SAMPLES));
    }

    /// Each CPU's eviction limit from its guest-free baseline (core's rule).
    fn update_limits(&self, buf: &mut Vec<u64>) {
        let bound = self.immediate_bound_ns.load(Relaxed);
        for c in &self.cpus {
            let limit = if bound == NONE_NS {
                NONE_NS
            } else {
                buf.clear();
                c.clean.latest(buf);
                guard_limit_ns(bound, p99_in_place(buf))
            };
            c.limit_ns.store(limit, Relaxed);
        }
    }

    /// A fed guard outlives its balancer run: disarm it and forget the guests.
    fn disarm(&self) {
        self.immediate_bound_ns.store(NONE_NS, Relaxed);
        if let Ok(mut e) = self.evictor.lock() {
            *e = None;
        }
        for c in &self.cpus {
            c.limit_ns.store(NONE_NS, Relaxed);
            c.guests.set(&[]);
            c.trips.store(0, Relaxed);
            c.evicted.store(0, Relaxed);
            c.trip_late_ns.store(0, Relaxed);
        }
    }
}

/// A latency probe that already samples the RT CPUs (a measurement's) feeding
/// the balancer's guard, in place of the guard's own threads. Clone it to
/// the probe; give it to the balancer in `LiveConfig::guard_feed`.
#[derive(Clone)]
pub struct SampleFeed(Arc<State>);

impl std::fmt::Debug for SampleFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SampleFeed")
    }
}

impl SampleFeed {
    pub fn new(cpus: &CpuSet) -> SampleFeed {
        SampleFeed(Arc::new(State::new(cpus, 1)))
    }

    /// One wake-up of the probe on `cpu`, `late_ns` after its release (now).
    /// Never blocks and never allocates; a CPU the guard does not watch is
    /// ignored.
    pub fn sample(&self, cpu: u32, late_ns: u64) {
        if let Some(i) = self.0.cpus.iter().position(|c| c.cpu == cpu) {
            self.0.sample(i, mono_ns(), late_ns);
        }
    }
}

/// How the guard samples and acts.
pub struct GuardOptions {
    pub interval_ns: u64,
    pub immediate: Option<Immediate>,
    pub events: Option<super::EventSink>,
    /// Samples over this count as late (the controller's evidence).
    pub bound_ns: Option<u64>,
}

/// The running guard: its own threads, or a feed.
pub struct LatencyGuard {
    stop: Arc<AtomicBool>,
    state: Arc<State>,
    handles: Vec<JoinHandle<()>>,
    /// Where the samples go on to, passed by the loop (`forward_samples`).
    events: Option<super::EventSink>,
    /// The loop's buffer for the percentile work.
    buf: Vec<u64>,
}

impl LatencyGuard {
    /// The guard over a feed: no threads of its own; the feed's probe samples.
    pub fn fed(feed: &SampleFeed, opts: GuardOptions) -> LatencyGuard {
        LatencyGuard::over(feed.0.clone(), opts, Vec::new(), Arc::default())
    }

    fn over(
        state: Arc<State>,
        mut opts: GuardOptions,
        handles: Vec<JoinHandle<()>>,
        stop: Arc<AtomicBool>,
    ) -> LatencyGuard {
        state.arm(&mut opts);
        LatencyGuard {
            stop,
            state,
            handles,
            events: opts.events,
            buf: Vec::with_capacity(WINDOW_SAMPLES),
        }
    }

    /// Start one probe thread per RT CPU, each moved into the RT cpuset
    /// first, at the slow rate until the loop lends the CPU.
    pub fn start(
        host: &Host,
        applied: &Applied,
        cpus: &CpuSet,
        opts: GuardOptions,
    ) -> Result<LatencyGuard, MeasureError> {
        let stop = Arc::new(AtomicBool::new(false));
        let state = Arc::new(State::new(cpus, opts.interval_ns));
        let policy = Policy::Fifo {
            priority: max_fifo_priority(),
        };
        let (s, st) = (state.clone(), stop.clone());
        let started = spawn_pinned(
            &cpus.iter().collect::<Vec<_>>(),
            |i| format!("rtmgr-guard{}", state.cpus[i].cpu),
            policy,
            Some(into_rt_cpuset(host, applied)),
            move |i, set_up| {
                if set_up {
                    run_paced(&s.paces[i], &st, |at, late| s.sample(i, at, late));
                }
            },
        );
        let mut g = LatencyGuard::over(state, opts, started.handles, stop);
        if let Err(e) = started.setup {
            g.stop_now();
            return Err(e);
        }
        Ok(g)
    }

    /// `cpu` is about to be lent: probe it at full rate from now on.
    pub fn lending(&self, cpu: u32) {
        if let Some(i) = self.state.cpus.iter().position(|c| c.cpu == cpu) {
            self.state.paces[i].set_fast(true);
        }
    }

    /// The guests of each RT CPU now (the guard evicts them on a late
    /// sample); a CPU left without guests is probed at the slow rate.
    pub fn set_guests(&self, guests: &BTreeMap<u32, u32>) {
        for (c, pace) in self.state.cpus.iter().zip(&self.state.paces) {
            let tids: Vec<u32> = guests
                .iter()
                .filter(|(_, &cpu)| cpu == c.cpu)
                .map(|(&t, _)| t)
                .collect();
            c.guests.set(&tids);
            pace.set_fast(!tids.is_empty());
        }
    }

    /// What the guards did since the last call, per CPU that tripped.
    pub fn take_trips(&self) -> Vec<Trip> {
        let cpus = self.state.cpus.iter();
        cpus.filter_map(|c| {
            let trips = c.trips.swap(0, Acquire);
            let t = Trip {
                cpu: c.cpu,
                trips,
                latency_ns: c.trip_late_ns.swap(0, Relaxed),
                evicted: c.evicted.swap(0, Relaxed),
            };
            (trips > 0 || t.evicted > 0).then_some(t)
        })
        .collect()
    }

    /// Recent p99 (nearest rank) per RT CPU, when there are samples; also
    /// sets each CPU's eviction limit from its guest-free baseline.
    pub fn p99(&mut self) -> BTreeMap<u32, u64> {
        self.state.update_limits(&mut self.buf);
        let mut out = BTreeMap::new();
        for c in &self.state.cpus {
            self.buf.clear();
            c.recent.latest(&mut self.buf);
            if let Some(p) = p99_in_place(&mut self.buf) {
                out.insert(c.cpu, p);
            }
        }
        out
    }

    /// Samples and late samples per RT CPU since the last call.
    pub fn take_counts(&self) -> BTreeMap<u32, Counts> {
        let cpus = self.state.cpus.iter();
        cpus.map(|c| {
            let n = Counts {
                samples: c.samples.swap(0, Relaxed),
                late: c.late.swap(0, Relaxed),
            };
            (c.cpu, n)
        })
        .collect()
    }

    /// Pass the samples taken since the last call on to the event sink
    /// (from the loop: a sink may take locks, the probe thread must not).
    pub fn forward_samples(&self) {
        let Some(ev) = &self.events else { return };
        let upto = mono_ns();
        for c in &self.state.cpus {
            let from = c.forwarded.load(Relaxed);
            let to = c
                .recent
                .read_since(from, |at, late| ev.0.guard_sample_at(c.cpu, at, late));
            c.forwarded.store(to, Relaxed);
            ev.0.guard_forwarded(c.cpu, upto);
        }
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Relaxed);
        self.state.paces.iter().for_each(Pace::wake);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// The guard's threads go into the partition's RT cpuset (v1) before
/// they pin themselves.
fn into_rt_cpuset(host: &Host, applied: &Applied) -> Prepare {
    let (h, layout, dir) = (
        host.clone(),
        applied.layout.clone(),
        applied.rt_cgroup.clone(),
    );
    Arc::new(move |tid| {
        if matches!(layout, cgroup::Layout::V1(_)) {
            cgroup::attach(&h, &layout, &dir, tid)
                .map_err(|e| MeasureError::Setup(format!("guard probe into RT cpuset: {e}")))?;
        }
        Ok(())
    })
}

impl Drop for LatencyGuard {
    fn drop(&mut self) {
        self.forward_samples();
        self.stop_now();
        self.state.disarm();
    }
}
