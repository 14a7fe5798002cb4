//! User-mode spin loops pinned to one CPU each (issue 20's host-preemption
//! test; ARTiS §2.2's guests at their simplest): threads of this process, so
//! they end with it; `Spinners` stops and joins them when dropped.

use crate::measure::probe::Prepare;
use crate::measure::{MeasureError, Result};
use rtmgr_linux::rt_thread::setup_rt_thread;
use rtmgr_linux::sched::Policy;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;

/// One spinner: where, at what policy, entered into a cpuset by `prepare` first.
#[derive(Clone)]
pub struct SpinnerSpec {
    pub cpu: u32,
    pub policy: Policy,
    pub prepare: Option<Prepare>,
}

/// Running spinners; dropping them stops and joins every one.
pub struct Spinners {
    stop: Arc<AtomicBool>,
    handles: Vec<JoinHandle<()>>,
}

impl Spinners {
    /// Start one spinner per spec; each is pinned and at its policy before this
    /// returns (or none runs and the first set-up error is returned).
    pub fn start(specs: &[SpinnerSpec]) -> Result<Spinners> {
        let mut running = Spinners {
            stop: Arc::new(AtomicBool::new(false)),
            handles: Vec::new(),
        };
        let (tx, rx) = mpsc::channel::<std::result::Result<(), String>>();
        for spec in specs {
            let (stop, tx, spec) = (running.stop.clone(), tx.clone(), spec.clone());
            let handle = std::thread::Builder::new()
                .name(format!("rtmgr-spin{}", spec.cpu))
                .spawn(move || {
                    let ready = setup_rt_thread(spec.cpu, spec.policy, spec.prepare.as_ref());
                    let ok = ready.is_ok();
                    let _ = tx.send(ready.map_err(|e| e.to_string()));
                    if ok {
                        spin(&stop);
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
}

/// Pure user-mode work: no system call until `stop`.
fn spin(stop: &AtomicBool) {
    let mut x = 1u64;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
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
