//! `rtmgr top --probe`'s engine: wake-up latency on the RT CPUs when no
//! daemon's guard measures it (issue 23; McKenney §2.1, as the guard does).
//! One probe thread per RT CPU at a fixed rate fills a ring; each reading
//! passes the new samples to a `LiveFigures`, off the probe threads. The
//! one change it makes: its own threads' policy, gone when it is dropped.

use super::{run_paced, spawn_pinned, Pace, SampleRing};
use crate::balance::LiveEvents;
use crate::daemon::live::LiveFigures;
use crate::partition::Applied;
use crate::rt_thread::{MeasureError, Prepare};
use crate::sched::Policy;
use crate::Host;
use rtmgr_core::protocol::LiveCpu;
use rtmgr_core::CpuSet;
use rtmgr_sys::time::mono_ns;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

/// How often each probe thread wakes (the daemon's guard interval).
pub const INTERVAL_NS: u64 = 10_000_000;
/// Samples kept per CPU between two readings: 40 s at `INTERVAL_NS`.
const RING: usize = 4096;

struct Cpu {
    cpu: u32,
    ring: SampleRing,
    /// How far the readings have passed the ring on.
    read: AtomicU64,
}

/// Running probe threads and what they measured.
pub struct LiveProbe {
    priority: u8,
    cpus: Arc<Vec<Cpu>>,
    figures: LiveFigures,
    stop: Arc<AtomicBool>,
    pace: Arc<Pace>,
    threads: Vec<JoinHandle<()>>,
}

impl LiveProbe {
    /// One probe thread per CPU of `rt` at SCHED_FIFO `priority`, moved into
    /// the RT cpuset of a v1 partition first (`applied`: the one in place).
    pub fn start(
        host: &Host,
        applied: Option<Applied>,
        rt: &CpuSet,
        priority: u8,
    ) -> Result<LiveProbe, MeasureError> {
        let cpus: Arc<Vec<Cpu>> = Arc::new(
            rt.iter()
                .map(|cpu| Cpu {
                    cpu,
                    ring: SampleRing::new(RING),
                    read: AtomicU64::new(0),
                })
                .collect(),
        );
        let (stop, pace) = (Arc::default(), Arc::new(Pace::fixed(INTERVAL_NS)));
        let (c, s, p) = (cpus.clone(), Arc::clone(&stop), pace.clone());
        let started = spawn_pinned(
            &rt.iter().collect::<Vec<_>>(),
            |i| format!("rtmgr-top-probe{}", cpus[i].cpu),
            Policy::Fifo { priority },
            Some(into_rt_cpuset(host, applied)),
            move |i, set_up| {
                if set_up {
                    run_paced(&p, &s, |at, late| c[i].ring.push(at, late));
                }
            },
        );
        let probe = LiveProbe {
            priority,
            cpus,
            figures: LiveFigures::new(rt, None),
            stop,
            pace,
            threads: started.handles,
        };
        started.setup.map(|()| probe)
    }

    /// What the probe is, for the screen and the JSON.
    pub fn describe(&self) -> String {
        format!(
            "SCHED_FIFO {}, every {} ms",
            self.priority,
            INTERVAL_NS / 1_000_000
        )
    }

    /// The figures now, with the samples taken since the last reading.
    pub fn live(&self, host: &Host) -> Vec<LiveCpu> {
        for c in self.cpus.iter() {
            let from = c.read.load(Ordering::Relaxed);
            let to = c.ring.read_since(from, |at, late| {
                self.figures.guard_sample_at(c.cpu, at, late)
            });
            c.read.store(to, Ordering::Relaxed);
        }
        self.figures.snapshot(host, mono_ns()).cpus
    }
}

/// A v1 partition's RT cpuset takes the probe threads first.
fn into_rt_cpuset(host: &Host, applied: Option<Applied>) -> Prepare {
    let h = host.clone();
    Arc::new(move |tid| {
        if let Some(a) = applied
            .as_ref()
            .filter(|a| matches!(a.layout, crate::cgroup::Layout::V1(_)))
        {
            crate::cgroup::attach(&h, &a.layout, &a.rt_cgroup, tid)
                .map_err(|e| MeasureError::Setup(format!("probe into RT cpuset: {e}")))?;
        }
        Ok(())
    })
}

impl Drop for LiveProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.pace.wake();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
