//! The live balancer (ARTiS §2.2–2.3) in a background thread over every task
//! of the machine (this process's own threads excluded), for as long as a
//! measurement runs: `rtmgr evaluate`'s "partition + live balancer"
//! configuration. Its policy is handed in and given back, so its memory (the
//! lending controller's state, back-offs) carries over evaluate's segments.

use super::guard::GuardFeed;
use super::{run_balancer_with, BalanceError, LiveConfig, LiveReport};
use crate::partition::Applied;
use crate::Host;
use rtmgr_core::balance::Balancer;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

type Outcome = (Result<LiveReport, BalanceError>, Balancer);

pub struct BackgroundBalancer {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Outcome>,
}

/// The configuration evaluate's balancer runs with on `applied`.
pub fn background_config(applied: &Applied, feed: Option<GuardFeed>) -> LiveConfig {
    let mut cfg = LiveConfig::new(applied);
    // Measurement segments are short: find new tasks every 200 ms.
    cfg.scan_every = 4;
    cfg.guard_feed = feed;
    cfg
}

impl BackgroundBalancer {
    /// Start on `applied` with `policy` (`Balancer::new(cfg.policy)` for a
    /// fresh one); with `feed`, the guard takes its samples from the probe
    /// that feeds it instead of its own threads.
    pub fn start(host: &Host, applied: &Applied, cfg: LiveConfig, mut policy: Balancer) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (h, a, s) = (host.clone(), applied.clone(), stop.clone());
        let handle = std::thread::spawn(move || {
            let r = run_balancer_with(&h, &a, &cfg, &mut policy, &s, |_, _| {});
            (r, policy)
        });
        BackgroundBalancer { stop, handle }
    }

    /// Start with a fresh policy and the guard's own threads.
    pub fn start_fresh(host: &Host, applied: &Applied) -> Self {
        let cfg = background_config(applied, None);
        let policy = Balancer::new(cfg.policy.clone());
        Self::start(host, applied, cfg, policy)
    }

    /// Stop, restore every change, and say what it did; the policy comes
    /// back for the next run (None if the thread panicked).
    pub fn finish(self) -> (Result<LiveReport, BalanceError>, Option<Balancer>) {
        self.stop.store(true, Ordering::Relaxed);
        match self.handle.join() {
            Ok((r, policy)) => (
                r.and_then(|rep| check_restored(&rep).map(|()| rep)),
                Some(policy),
            ),
            Err(_) => (Err(BalanceError::Panicked), None),
        }
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
