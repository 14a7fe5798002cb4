//! The latency guard of `rtmgr balance`: a low-rate latency probe (one
//! SCHED_FIFO thread per RT CPU, in the partition's RT cpuset, woken every
//! `interval`). One late sample on a CPU that has guests — later than the
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

/// What the guard threads share with the balancer loop.
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

pub struct LatencyGuard {
    stop: Arc<AtomicBool>,
    recent: Vec<(u32, Arc<Mutex<VecDeque<u64>>>)>,
    shared: Arc<Mutex<Shared>>,
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

impl LatencyGuard {
    /// Start one probe thread per RT CPU, each moved into the RT cpuset first.
    pub fn start(
        host: &Host,
        applied: &Applied,
        cpus: &CpuSet,
        interval_ns: u64,
        immediate: Option<Immediate>,
        events: Option<super::EventSink>,
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
        let shared: Arc<Mutex<Shared>> = Arc::default();
        let immediate = immediate.map(Arc::new);
        let mut g = LatencyGuard {
            stop: stop.clone(),
            recent: Vec::new(),
            shared: shared.clone(),
            handles: Vec::new(),
        };
        let (tx, rx) = mpsc::channel::<Result<(), String>>();
        for cpu in cpus.iter() {
            let ring = Arc::new(Mutex::new(VecDeque::with_capacity(WINDOW_SAMPLES)));
            g.recent.push((cpu, ring.clone()));
            let (stop, tx, prepare) = (stop.clone(), tx.clone(), prepare.clone());
            let (shared, immediate, events) = (shared.clone(), immediate.clone(), events.clone());
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
                    // Samples taken while the CPU had no guest: what its own RT tasks cost.
                    let mut clean = VecDeque::with_capacity(WINDOW_SAMPLES);
                    let mut next = mono_ns() + interval_ns;
                    while !stop.load(Ordering::Relaxed) {
                        sleep_until(next);
                        let late = mono_ns().saturating_sub(next);
                        if let Some(ev) = &events {
                            ev.0.guard_sample(cpu, late);
                        }
                        if let Ok(mut r) = ring.lock() {
                            push(&mut r, late);
                        }
                        let guests: Vec<u32> = shared
                            .lock()
                            .map(|s| s.guests.get(&cpu).cloned().unwrap_or_default())
                            .unwrap_or_default();
                        match (&immediate, guests.is_empty()) {
                            (_, true) => push(&mut clean, late),
                            (Some(im), false) => {
                                let limit = p99_of(&clean)
                                    .map_or(im.bound_ns, |b| im.bound_ns.max(b + b / 4));
                                if late > limit {
                                    let evicted: Vec<u32> = guests
                                        .into_iter()
                                        .filter(|&t| im.evictor.evict(t).is_ok())
                                        .collect();
                                    if let Ok(mut s) = shared.lock() {
                                        s.guests.remove(&cpu);
                                        s.trips.push(Trip {
                                            cpu,
                                            latency_ns: late,
                                            evicted,
                                        });
                                    }
                                }
                            }
                            (None, false) => {}
                        }
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
        if let Ok(mut s) = self.shared.lock() {
            s.guests = by_cpu;
        }
    }

    /// The trips since the last call.
    pub fn take_trips(&self) -> Vec<Trip> {
        self.shared
            .lock()
            .map(|mut s| std::mem::take(&mut s.trips))
            .unwrap_or_default()
    }

    /// Recent p99 (nearest rank) per RT CPU, when there are samples.
    pub fn p99(&self) -> BTreeMap<u32, u64> {
        self.recent
            .iter()
            .filter_map(|(cpu, ring)| Some((*cpu, p99_of(&*ring.lock().ok()?)?)))
            .collect()
    }

    fn stop_now(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

impl Drop for LatencyGuard {
    fn drop(&mut self) {
        self.stop_now();
    }
}
