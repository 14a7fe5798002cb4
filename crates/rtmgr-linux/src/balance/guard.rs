//! The latency guard of `rtmgr balance`: a low-rate latency probe (one
//! SCHED_FIFO thread per RT CPU, in the partition's RT cpuset, woken every
//! `interval`) whose recent p99 tells the ARTiS policy (§2.2) when guests
//! must leave an RT CPU at once. Reuses the measurement layer's thread set-up.

use crate::cgroup;
use crate::measure::probe::{max_fifo_priority, setup_rt_thread, Prepare};
use crate::measure::{mono_ns, sleep_until, MeasureError};
use crate::partition::Applied;
use crate::sched::Policy;
use crate::Host;
use rtmgr_core::CpuSet;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;

/// Samples kept per CPU for the "recent" p99.
pub const WINDOW_SAMPLES: usize = 200;

pub struct LatencyGuard {
    stop: Arc<AtomicBool>,
    recent: Vec<(u32, Arc<Mutex<VecDeque<u64>>>)>,
    handles: Vec<JoinHandle<()>>,
}

impl LatencyGuard {
    /// Start one probe thread per RT CPU, each moved into the RT cpuset first.
    pub fn start(
        host: &Host,
        applied: &Applied,
        cpus: &CpuSet,
        interval_ns: u64,
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
        let mut g = LatencyGuard {
            stop: stop.clone(),
            recent: Vec::new(),
            handles: Vec::new(),
        };
        let (tx, rx) = mpsc::channel::<Result<(), String>>();
        for cpu in cpus.iter() {
            let ring = Arc::new(Mutex::new(VecDeque::with_capacity(WINDOW_SAMPLES)));
            g.recent.push((cpu, ring.clone()));
            let (stop, tx, prepare) = (stop.clone(), tx.clone(), prepare.clone());
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
                        let late = mono_ns().saturating_sub(next);
                        if let Ok(mut r) = ring.lock() {
                            if r.len() == WINDOW_SAMPLES {
                                r.pop_front();
                            }
                            r.push_back(late);
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

    /// Recent p99 (nearest rank) per RT CPU, when there are samples.
    pub fn p99(&self) -> BTreeMap<u32, u64> {
        let mut out = BTreeMap::new();
        for (cpu, ring) in &self.recent {
            let mut v: Vec<u64> = match ring.lock() {
                Ok(r) => r.iter().copied().collect(),
                Err(_) => continue,
            };
            if v.is_empty() {
                continue;
            }
            v.sort_unstable();
            let k = (v.len() * 99).div_ceil(100).max(1) - 1;
            out.insert(*cpu, v[k]);
        }
        out
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
