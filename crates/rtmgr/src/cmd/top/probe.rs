//! `rtmgr top --probe`: wake-up latency on the RT CPUs when no daemon's
//! guard measures it (issue 23; McKenney §2.1: a pinned SCHED_FIFO thread
//! that sleeps and measures how late it wakes, as the daemon's latency guard
//! does). The one thing `top` changes: its own probe threads' policy, named
//! on screen, gone when `top` exits.

use rtmgr_core::protocol::LiveCpu;
use rtmgr_core::CpuSet;
use rtmgr_linux::balance::LiveEvents;
use rtmgr_linux::daemon::live::LiveFigures;
use rtmgr_linux::rt_thread::{setup_rt_thread, Prepare};
use rtmgr_linux::sched::Policy;
use rtmgr_linux::Host;
use rtmgr_sys::time::{mono_ns, sleep_until};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// How often each probe thread wakes (the daemon's guard interval).
const INTERVAL_NS: u64 = 10_000_000;

pub struct Probe {
    priority: u8,
    figures: Arc<LiveFigures>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Probe {
    /// One probe thread per RT CPU at SCHED_FIFO `priority`, moved into the
    /// RT cpuset of a v1 partition first (`journal`: the partition's).
    pub fn start(
        host: &Host,
        journal: &std::path::Path,
        rt: &CpuSet,
        priority: u8,
    ) -> anyhow::Result<Probe> {
        let applied = rtmgr_linux::partition::current(host, journal)
            .ok()
            .flatten();
        let h = host.clone();
        let prepare: Prepare = Arc::new(move |tid| {
            if let Some(a) = applied
                .as_ref()
                .filter(|a| matches!(a.layout, rtmgr_linux::cgroup::Layout::V1(_)))
            {
                rtmgr_linux::cgroup::attach(&h, &a.layout, &a.rt_cgroup, tid).map_err(|e| {
                    rtmgr_linux::rt_thread::MeasureError::Setup(format!(
                        "probe into RT cpuset: {e}"
                    ))
                })?;
            }
            Ok(())
        });
        let mut p = Probe {
            priority,
            figures: Arc::new(LiveFigures::new(rt, None)),
            stop: Arc::new(AtomicBool::new(false)),
            threads: Vec::new(),
        };
        let (tx, rx) = mpsc::channel();
        for cpu in rt.iter() {
            let (stop, figures, tx, prepare) = (
                p.stop.clone(),
                p.figures.clone(),
                tx.clone(),
                prepare.clone(),
            );
            let policy = Policy::Fifo { priority };
            p.threads.push(
                std::thread::Builder::new()
                    .name(format!("rtmgr-top-probe{cpu}"))
                    .spawn(move || {
                        let ok = setup_rt_thread(cpu, policy, Some(&prepare));
                        let failed = ok.is_err();
                        let _ = tx.send(ok);
                        // `start` waits until every thread has said how its set-up went.
                        drop(tx);
                        if failed {
                            return;
                        }
                        let mut next = mono_ns() + INTERVAL_NS;
                        while !stop.load(Ordering::Relaxed) {
                            sleep_until(next);
                            figures.guard_sample(cpu, mono_ns().saturating_sub(next));
                            next += INTERVAL_NS;
                        }
                    })?,
            );
        }
        drop(tx);
        for r in rx {
            r?;
        }
        Ok(p)
    }

    /// What the probe is, for the screen and the JSON.
    pub fn describe(&self) -> String {
        format!(
            "SCHED_FIFO {}, every {} ms",
            self.priority,
            INTERVAL_NS / 1_000_000
        )
    }

    pub fn live(&self, host: &Host) -> Vec<LiveCpu> {
        self.figures.snapshot(host, mono_ns()).cpus
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}
