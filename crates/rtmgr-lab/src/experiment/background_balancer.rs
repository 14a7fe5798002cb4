//! The live balancer (ARTiS §2.2–2.3) in a background thread over every task
//! of the machine (this process's own threads excluded), for as long as a
//! measurement runs: evaluate's, ablate's and cost's "balanced"
//! configuration. Its policy is handed in and given back, so its memory (the
//! lending controller's state, back-offs) carries over evaluate's segments.

use rtmgr_core::balance::Balancer;
use rtmgr_linux::balance::{
    check_restored, run_balancer_with, BalanceError, LiveConfig, LiveReport, SampleFeed,
};
use rtmgr_linux::partition::Applied;
use rtmgr_linux::Host;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

type Outcome = (Result<LiveReport, BalanceError>, Balancer);

pub struct BackgroundBalancer {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Outcome>,
}

/// The configuration evaluate's balancer runs with on `applied`.
pub fn background_config(applied: &Applied, feed: Option<SampleFeed>) -> LiveConfig {
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
