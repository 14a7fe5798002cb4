//! Where the live balancer and its latency guard report events as they
//! happen (ARTiS §2.2: evictions to keep RT0 latency; §2.3: the balancer),
//! for whoever watches: the daemon's metrics (`daemon/metrics`). Every method
//! has a default that ignores the event; a sink must be cheap and never
//! block. The guard's samples reach it from the balancer loop, never from
//! the SCHED_FIFO probe thread (that one only writes atomics).

use rtmgr_core::balance::LendingStatus;
use std::sync::Arc;

/// Events of a live balancer run.
pub trait LiveEvents: Send + Sync {
    /// One guard sample on `cpu`: how late the probe woke, ns.
    fn guard_sample(&self, _cpu: u32, _latency_ns: u64) {}
    /// The same sample, taken at `at_ns` (CLOCK_MONOTONIC) and passed on
    /// later (the guard forwards its samples from the balancer loop).
    fn guard_sample_at(&self, cpu: u32, _at_ns: u64, latency_ns: u64) {
        self.guard_sample(cpu, latency_ns);
    }
    /// Every sample of `cpu` taken before `upto_ns` (CLOCK_MONOTONIC) has
    /// been passed on: a window over the samples is whole up to there.
    fn guard_forwarded(&self, _cpu: u32, _upto_ns: u64) {}
    /// `n` guests sent away from RT CPU `cpu`; `cause` is "guard" (a late
    /// guard sample) or "kernel_entry" (a guest entered the kernel there).
    fn eviction(&self, _cpu: u32, _cause: &'static str, _n: u64) {}
    /// A starved task on `cpu` was given CPU time by the starvation guard.
    fn starvation_boost(&self, _cpu: u32) {}
    /// At the end of each balancer step, per RT CPU: its guests now, the late
    /// samples of the step the host stalled, and the lending controller's state.
    fn step(&self, _cpu: u32, _guests: &[u32], _host_stalled: u64, _lending: &LendingStatus) {}
}

/// A shared sink in a `LiveConfig` (Debug and Clone for the config's sake).
#[derive(Clone)]
pub struct EventSink(pub Arc<dyn LiveEvents>);

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventSink")
    }
}
