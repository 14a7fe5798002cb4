//! User-mode spin loops pinned to one CPU each (issue 20's host-preemption
//! test; ARTiS §2.2's guests at their simplest): threads of this process, so
//! they end with it; `Spinners` stops and joins them when dropped. Each
//! counts the fixed units of work it did (issue 28's capacity measurement).

use crate::measure::probe::Prepare;
use crate::measure::{MeasureError, Result};
use rtmgr_linux::rt_thread::setup_rt_thread;
use rtmgr_linux::sched::Policy;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// One spinner: where, at what policy, entered into a cpuset by `prepare` first.
#[derive(Clone)]
pub struct SpinnerSpec {
    pub cpu: u32,
    pub policy: Policy,
    pub prepare: Option<Prepare>,
}

/// One spinner's count of work units, alone on its cache lines (spinners on
/// two CPUs must not share one: that would slow both and the measurement).
#[repr(align(128))]
#[derive(Default)]
struct Counter(AtomicU64);

/// Running spinners; dropping them stops and joins every one.
pub struct Spinners {
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<()>>,
    counters: Vec<Arc<Counter>>,
}

impl Spinners {
    /// Start one spinner per spec; each is pinned and at its policy before this
    /// returns (or none runs and the first set-up error is returned).
    pub fn start(specs: &[SpinnerSpec]) -> Result<Spinners> {
        let mut running = Spinners {
            stop: Arc::new(AtomicBool::new(false)),
            handles: Vec::new(),
            counters: Vec::new(),
        };
        let (tx, rx) = mpsc::channel::<std::result::Result<(), String>>();
        for spec in specs {
            let (stop, tx, spec) = (running.stop.clone(), tx.clone(), spec.clone());
            let counter = Arc::new(Counter::default());
            running.counters.push(counter.clone());
            let handle = std::thread::Builder::new()
                .name(format!("rtmgr-spin{}", spec.cpu))
                .spawn(move || {
                    let ready = setup_rt_thread(spec.cpu, spec.policy, spec.prepare.as_ref());
                    let ok = ready.is_ok();
                    let _ = tx.send(ready.map_err(|e| e.to_string()));
                    if ok {
                        spin(&stop, &counter.0);
                    }
                })
                .map_err(|e| MeasureError::io("spawn spinner thread", e))?;
            running.handles.push(handle);
        }
        drop(tx);
        for _ in specs {
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => return Err(MeasureError::Setup(format!("spinner: {e}"))),
                Err(_) => return Err(MeasureError::Setup("spinner thread died".into())),
            }
        }
        Ok(running)
    }

    /// Work units each spinner has done so far, in the order of the specs
    /// (one unit: `rtmgr_core::capacity::WORK_UNIT`).
    pub fn work(&self) -> Vec<u64> {
        self.counters
            .iter()
            .map(|c| c.0.load(Ordering::Relaxed))
            .collect()
    }
}

/// Pure user-mode work, counted in units: no system call until `stop`.
fn spin(stop: &AtomicBool, units: &AtomicU64) {
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        units.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for Spinners {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spinners_run_where_asked_and_stop_when_dropped() {
        let spec = SpinnerSpec {
            cpu: 0,
            policy: Policy::Idle,
            prepare: None,
        };
        let s = Spinners::start(std::slice::from_ref(&spec)).unwrap();
        assert_eq!(s.handles.len(), 1);
        let w0 = s.work();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let w1 = s.work();
        assert_eq!(w0.len(), 1);
        assert!(w1[0] >= w0[0], "counts only grow");
        drop(s);
        let bad = SpinnerSpec {
            cpu: 100_000,
            ..spec
        };
        assert!(
            Spinners::start(&[bad]).is_err(),
            "a CPU that does not exist"
        );
    }
}
