//! The live balancer (ARTiS §2.2–2.3) in a background thread over every task
//! of the machine (this process's own threads excluded), for as long as a
//! measurement runs: `rtmgr evaluate`'s "partition + live balancer" configuration.

use super::{run_balancer, BalanceError, LiveConfig, LiveReport};
use crate::partition::Applied;
use crate::Host;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

pub struct BackgroundBalancer {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<LiveReport, BalanceError>>,
}

impl BackgroundBalancer {
    pub fn start(host: &Host, applied: &Applied) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (h, a, s) = (host.clone(), applied.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            let mut cfg = LiveConfig::new(&a);
            // Measurement segments are short: find new tasks every 200 ms.
            cfg.scan_every = 4;
            run_balancer(&h, &a, &cfg, &s, |_, _| {})
        });
        BackgroundBalancer { stop, handle }
    }

    /// Stop, restore every change, and say what it did.
    pub fn finish(self) -> Result<LiveReport, BalanceError> {
        self.stop.store(true, Ordering::Relaxed);
        let rep = self.handle.join().map_err(|_| BalanceError::Panicked)??;
        check_restored(&rep)?;
        Ok(rep)
    }
}

/// A run that could not undo every change is an error (the machine is not as it was).
pub fn check_restored(rep: &LiveReport) -> Result<(), BalanceError> {
    if rep.restore_failures.is_empty() {
        Ok(())
    } else {
        Err(BalanceError::Restore(rep.restore_failures.join("; ")))
    }
}
