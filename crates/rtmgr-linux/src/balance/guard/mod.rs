//! The latency guard of `rtmgr balance`: a low-rate latency probe (one
//! SCHED_FIFO thread per RT CPU, in the partition's RT cpuset, woken every
//! `interval`), or the samples of a probe that runs anyway (`GuardFeed`). One late sample on a CPU that has guests — later than the
//! bound and than what the CPU shows without guests — sends its guests to the
//! NRT CPUs at once from the probe thread (ARTiS §2.2: RT0's latency first),
//! and the policy learns of the trip at its next step. Its recent p99 also
//! goes to the policy. Reuses the measurement layer's thread set-up.

use super::mover::Evictor;
use crate::cgroup;
use crate::partition::Applied;
use crate::rt_thread::{max_fifo_priority, setup_rt_thread, MeasureError, Prepare};
use crate::sched::Policy;
use crate::Host;
use rtmgr_core::CpuSet;
use rtmgr_sys::time::{mono_ns, sleep_until};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

/// Samples kept per CPU for the "recent" p99 and for the guest-free baseline.
pub const WINDOW_SAMPLES: usize = 200;

/// A trip of one CPU's guard: the late sample and the guests it sent away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trip {
    pub cpu: u32,
    pub latency_ns: u64,
    pub evicted: Vec<u32>,
}

/// What the guard's samplers share with the balancer loop.
#[derive(Default)]
struct Shared {
    /// RT CPU → its guests now (set by the loop).
    guests: BTreeMap<u32, Vec<u32>>,
    trips: Vec<Trip>,
}

/// Evicting at once on a late sample: the bound and how.
pub struct Immediate {
    pub bound_ns: u64,
    pub evictor: Evictor,
}

/// One RT CPU's recent samples.
struct CpuWindow {
    cpu: u32,
    /// The last `WINDOW_SAMPLES` samples (the "recent" p99).
    recent: VecDeque<u64>,
    /// Samples taken while the CPU had no guest: what its own RT tasks cost.
    clean: VecDeque<u64>,
    /// Since the loop last took them: samples, and those over the bound.
    samples: u64,
    late: u64,
}

/// Per-window sample counts of one RT CPU (for the lending controller).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub samples: u64,
    /// Samples over the latency bound.
    pub late: u64,
}

/// The guard's state, fed one sample at a time by its own threads or by a
/// latency probe that runs anyway (`GuardFeed`: evaluate's probe, so that no
/// second SCHED_FIFO thread shares the RT CPU with it).
struct State {
    windows: Vec<Mutex<CpuWindow>>,
    shared: Mutex<Shared>,
    immediate: Mutex<Option<Arc<Immediate>>>,
    /// Samples over this count as late (None: no bound).
    bound_ns: Mutex<Option<u64>>,
    events: Mutex<Option<super::EventSink>>,
}

impl State {
    fn new(cpus: &CpuSet) -> State {
        State {
            windows: cpus
                .iter()
                .map(|cpu| {
                    Mutex::new(CpuWindow {
                        cpu,
                        recent: VecDeque::with_capacity(WINDOW_SAMPLES),
                        clean: VecDeque::with_capacity(WINDOW_SAMPLES),
                        samples: 0,
                        late: 0,
                    })
                })
                .collect(),
            shared: Mutex::default(),
            immediate: Mutex::new(None),
            bound_ns: Mutex::new(None),
            events: Mutex::new(None),
        }
    }

    /// One wake-up `late` ns after its release on `cpu`. `blocking`: the
    /// guard's own thread may wait for the locks; a probe that measures
    /// must not (a sample that finds a lock taken is left out).
    fn sample(&self, cpu: u32, late: u64, blocking: bool) {
        let Some(mut w) = self.windows.iter().find_map(|m| {
            let w = if blocking {
                m.lock().ok()
            } else {
                m.try_lock().ok()
            };
            w.filter(|w| w.cpu == cpu)
        }) else {
            return;
        };
        if let Some(ev) = self.events.try_lock().ok().and_then(|e| e.clone()) {
            ev.0.guard_sample(cpu, late);
        }
        push(&mut w.recent, late);
        w.samples += 1;
        if self
            .bound_ns
            .try_lock()
            .ok()
            .and_then(|b| *b)
            .is_some_and(|b| late > b)
        {
            w.late += 1;
        }
        let shared = if blocking {
            self.shared.lock().ok()
        } else {
            self.shared.try_lock().ok()
        };
        let Some(mut shared) = shared else { return };
        let guests = shared.guests.get(&cpu).cloned().unwrap_or_default();
        if guests.is_empty() {
            push(&mut w.clean, late);
            return;
        }
        let Some(im) = self.immediate.try_lock().ok().and_then(|i| i.clone()) else {
            return;
        };
        let limit = p99_of(&w.clean).map_or(im.bound_ns, |b| im.bound_ns.max(b + b / 4));
        if late > limit {
            let evicted: Vec<u32> = guests
                .into_iter()
                .filter(|&t| im.evictor.evict(t).is_ok())
                .collect();
            shared.guests.remove(&cpu);
            shared.trips.push(Trip {
                cpu,
                latency_ns: late,
                evicted,
            });
        }
    }
}

/// A latency probe that already samples the RT CPUs (evaluate's) feeding
/// the balancer's guard, in place of the guard's own threads. Clone it to
/// the probe; give it to the balancer in `LiveConfig::guard_feed`.
#[derive(Clone)]
pub struct GuardFeed(Arc<State>);

impl std::fmt::Debug for GuardFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GuardFeed")
    }
}

impl GuardFeed {
    pub fn new(cpus: &CpuSet) -> GuardFeed {
        GuardFeed(Arc::new(State::new(cpus)))
    }

    /// One wake-up of the probe on `cpu`, `late_ns` after its release. Never
    /// blocks: a sample that finds the guard busy is left out of it.
    pub fn sample(&self, cpu: u32, late_ns: u64) {
        self.0.sample(cpu, late_ns, false);
    }
}

/// The running guard: its own threads, or a feed.
pub struct LatencyGuard {
    stop: Arc<AtomicBool>,
    state: Arc<State>,
    handles: Vec<JoinHandle<()>>,
}

/// Nearest-rank p99 of a sample ring.
fn p99_of(ring: &VecDeque<u64>) -> Option<u64> {
    if ring.is_empty() {
        return None;
    }
    let mut v: Vec<u64> = ring.iter().copied().collect();
    v.sort_unstable();
    let k = (v.len() * 99).div_ceil(100).max(1) - 1;
    Some(v[k])
}

fn push(ring: &mut VecDeque<u64>, v: u64) {
    if ring.len() == WINDOW_SAMPLES {
        ring.pop_front();
    }
    ring.push_back(v);
}

/// How the guard samples and acts.
pub struct GuardOptions {
    pub interval_ns: u64,
    pub immediate: Option<Immediate>,
    pub events: Option<super::EventSink>,
    /// Samples over this count as late (the controller's evidence).
    pub bound_ns: Option<u64>,
}

impl LatencyGuard {
    /// The guard over a feed: no threads of its own; the feed's probe samples.
    pub fn fed(feed: &GuardFeed, opts: GuardOptions) -> LatencyGuard {
        let state = feed.0.clone();
        state.arm(opts);
        LatencyGuard {
            stop: Arc::new(AtomicBool::new(false)),
            state,
            handles: Vec::new(),
        }
    }

    /// Start one probe thread per RT CPU, each moved into the RT cpuset first.
    pub fn start(
        host: &Host,
        applied: &Applied,
        cpus: &CpuSet,
        opts: GuardOptions,
    ) -> Result<LatencyGuard, MeasureError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (h, layout, dir) = (
            host.clone(),
            applied.layout.clone(),
            applied.rt_cgroup.clone(),
        );
        let prepare: Prepare = Arc::new(move |tid| {
            if matches!(layout, cgroup::Layout::V1(_)) {
                cgroup::attach(&h, &layout, &dir, tid)
                    .map_err(|e| MeasureError::Setup(format!("guard probe into RT cpuset: {e}")))?;
            }
            Ok(())
        });
        let policy = Policy::Fifo {
            priority: max_fifo_priority(),
        };
        let interval_ns = opts.interval_ns;
        let state = Arc::new(State::new(cpus));
        state.arm(opts);
        let mut g = LatencyGuard {
            stop: stop.clone(),
            state: state.clone(),
            handles: Vec::new(),
        };
        let (tx, rx) = mpsc::channel::<Result<(), String>>();
        for cpu in cpus.iter() {
            let (stop, tx, prepare, state) =
                (stop.clone(), tx.clone(), prepare.clone(), state.clone());
            let h = std::thread::Builder::new()
                .name(format!("rtmgr-guard{cpu}"))
                .spawn(move || {
                    let ok = setup_rt_thread(cpu, policy, Some(&prepare));
                    let failed = ok.is_err();
                    let _ = tx.send(ok.map_err(|e| e.to_string()));
                    drop(tx);
                    if failed {
                        return;
                    }
                    let mut next = mono_ns() + interval_ns;
                    while !stop.load(Ordering::Relaxed) {
                        sleep_until(next);
                        state.sample(cpu, mono_ns().saturating_sub(next), true);
                        next += interval_ns;
                        // Missed releases are recorded late, not skipped.
                    }
                })
                .map_err(|e| MeasureError::io("spawn guard thread", e))?;
            g.handles.push(h);
        }
        drop(tx);
        // One message per thread (each drops its sender right after).
        let errors: Vec<String> = rx.iter().filter_map(|r| r.err()).collect();
        if !errors.is_empty() {
            g.stop_now();
            return Err(MeasureError::Setup(errors.join("; ")));
        }
        Ok(g)
    }

    /// The guests of each RT CPU now (the guard evicts them on a late sample).
    pub fn set_guests(&self, guests: &BTreeMap<u32, u32>) {
        let mut by_cpu: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
        for (&tid, &cpu) in guests {
            by_cpu.entry(cpu).or_default().push(tid);
        }
        if let Ok(mut s) = self.state.shared.lock() {
            s.guests = by_cpu;
        }
    }

    /// The trips since the last call.
    pub fn take_trips(&self) -> Vec<Trip> {
        self.state
            .shared
            .lock()
            .map(|mut s| std::mem::take(&mut s.trips))
            .unwrap_or_default()
    }

    /// Recent p99 (nearest rank) per RT CPU, when there are samples.
    pub fn p99(&self) -> BTreeMap<u32, u64> {
        self.state
            .windows
            .iter()
            .filter_map(|m| {
                let w = m.lock().ok()?;
                Some((w.cpu, p99_of(&w.recent)?))
            })
            .collect()
    }

    /// Samples and late samples per RT CPU since the last call.
    pub fn take_counts(&self) -> BTreeMap<u32, Counts> {
        self.state
            .windows
            .iter()
            .filter_map(|m| {
                let mut w = m.lock().ok()?;
                let c = Counts {
                    samples: std::mem::take(&mut w.samples),
                    late: std::mem::take(&mut w.late),
                };
                Some((w.cpu, c))
            })
            .collect()
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

impl State {
    fn arm(&self, opts: GuardOptions) {
        if let Ok(mut i) = self.immediate.lock() {
            *i = opts.immediate.map(Arc::new);
        }
        if let Ok(mut b) = self.bound_ns.lock() {
            *b = opts.bound_ns;
        }
        if let Ok(mut e) = self.events.lock() {
            *e = opts.events;
        }
    }

    /// A fed guard outlives its balancer run: disarm it and forget the guests.
    fn disarm(&self) {
        if let Ok(mut i) = self.immediate.lock() {
            *i = None;
        }
        if let Ok(mut s) = self.shared.lock() {
            s.guests.clear();
            s.trips.clear();
        }
    }
}

impl Drop for LatencyGuard {
    fn drop(&mut self) {
        self.stop_now();
        self.state.disarm();
    }
}
