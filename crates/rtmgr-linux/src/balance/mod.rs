//! The live balancer (`rtmgr balance`): the ARTiS policy of rtmgr-core
//! (§2.2–2.3) run on a partitioned machine. Every T ms it samples /proc,
//! asks the policy for pushes and applies them by moving tasks between the
//! NRT cpuset and single RT CPUs (cpuset + affinity), under a latency guard
//! and a watch of the guests' kernel entries that both send guests away at
//! once. Every change is journalled first in the partition journal
//! (`lends`), kept in memory and undone when it stops (also on error); what
//! a `kill -9` left, `partition reset` or the next start gives back. `run` is
//! the loop, `mover` applies and undoes, `observe` reads /proc.

pub mod entry_watch;
pub mod events;
pub mod guard;
pub mod lends;
pub mod mover;
pub mod observe;
pub mod procfile;
mod run;
pub mod steal;
mod step;
mod step_evidence;
pub mod v2_lending;

pub use events::{EventSink, LiveEvents};
pub use guard::SampleFeed;
pub use mover::{Evictor, Mover};
pub use run::{check_restored, lending_prior, run_balancer, run_balancer_with};

use crate::host::HostError;
use crate::partition::Applied;
use crate::rt_thread::MeasureError;
use observe::Scope;
use rtmgr_core::balance::{PolicyConfig, Reason};
use serde::Serialize;
use std::collections::BTreeMap;

#[derive(Debug, thiserror::Error)]
pub enum BalanceError {
    #[error("the partition in the journal is incomplete: run `rtmgr partition reset`, then apply it again")]
    Incomplete,
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("latency guard: {0}")]
    Guard(#[from] MeasureError),
    #[error("balancer could not restore: {0}")]
    Restore(String),
    #[error("balancer thread panicked")]
    Panicked,
}

/// How the live balancer runs.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    /// Sampling period T.
    pub period_ns: u64,
    /// Run the latency guard (one probe thread per RT CPU, or `guard_feed`).
    pub guard: bool,
    /// A probe that samples the RT CPUs anyway feeds the guard in place of
    /// its own threads (no second SCHED_FIFO thread per RT CPU).
    pub guard_feed: Option<guard::SampleFeed>,
    pub guard_interval_ns: u64,
    /// Stop by itself after this long.
    pub duration_ns: Option<u64>,
    pub scope: Scope,
    pub policy: PolicyConfig,
    /// Full /proc scans every this many samples.
    pub scan_every: u64,
    /// Watch the guests' kernel entries on the RT CPUs (tracefs) and evict
    /// a guest at its first one (ARTiS §2.2's trigger, from user space).
    pub watch_entries: bool,
    /// Evict a CPU's guests at the guard's first late sample, not at the
    /// next step.
    pub immediate_guard: bool,
    /// Where events go as they happen (the daemon's metrics); None: nowhere.
    pub events: Option<EventSink>,
    /// What a host-preemption test found, to start the lending controller
    /// from; None: read the cached `rtmgr status --host-test` result when
    /// `read_host_cache` (a missing one is noted, lending then learns).
    pub host_prior: Option<rtmgr_core::balance::LendingPrior>,
    pub read_host_cache: bool,
}

impl LiveConfig {
    pub fn new(applied: &Applied) -> Self {
        LiveConfig {
            period_ns: 50_000_000,
            guard: true,
            guard_feed: None,
            guard_interval_ns: 10_000_000,
            duration_ns: None,
            scope: Scope::All,
            policy: PolicyConfig {
                latency_bound_ns: Some(applied.plan.latency_bound_us * 1000),
                ..Default::default()
            },
            scan_every: 20,
            watch_entries: true,
            immediate_guard: true,
            events: None,
            host_prior: None,
            read_host_cache: true,
        }
    }
}

/// What a live run did and what it cost.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LiveReport {
    pub samples: u64,
    pub moves: BTreeMap<String, u64>,
    pub refused: Vec<String>,
    pub restored: usize,
    pub restore_failures: Vec<String>,
    pub wall_s: f64,
    /// CPU time of the sampling/deciding thread (the guard's probes excluded).
    pub balancer_cpu_s: f64,
    /// balancer_cpu_s / wall_s, in percent of one CPU.
    pub overhead_percent: f64,
    pub tasks_known_max: usize,
    pub mean_task_reads_per_sample: f64,
    /// Times /proc was listed to find new tasks (only after a task was created).
    pub proc_listings: u64,
    /// Full scans that read every task's `stat` (loadavg saw an unseen runnable task).
    pub stat_sweeps: u64,
    /// Most /proc descriptors kept open at once.
    pub open_files_max: usize,
    /// Full scans skipped because no task waited for a CPU (PSI).
    pub scans_skipped_calm: u64,
    /// What the kernel offered the observer.
    pub psi: bool,
    pub schedstat: bool,
    /// Highest recent p99 the guard reported, ns, per RT CPU (a trip's late
    /// sample is counted in `guard_trips`, not here).
    pub guard_p99_max_ns: BTreeMap<u32, u64>,
    /// Tasks lent an RT CPU (moves to an RT CPU).
    pub lends: u64,
    /// Guests the watch sent away at a kernel entry on their RT CPU, and
    /// which system calls (or page faults) those entries were.
    pub kernel_entry_evictions: u64,
    pub entry_syscalls: BTreeMap<String, u64>,
    /// From a guest's kernel entry to its eviction: mean and worst, ns.
    pub entry_evict_delay_mean_ns: Option<u64>,
    pub entry_evict_delay_max_ns: Option<u64>,
    /// Lends that did not end in a kernel-entry eviction: how often the
    /// user-mode prediction held.
    pub prediction_hit_rate: Option<f64>,
    /// Late guard samples that sent a CPU's guests away at once, and how many.
    pub guard_trips: u64,
    pub guard_evictions: u64,
    /// Was the kernel-entry watch running, and the events it read.
    pub entry_watch: bool,
    pub entry_events: u64,
    /// CPU time of the entry watch's reader thread.
    pub entry_watch_cpu_s: f64,
    /// RT1+ tasks across both sets taken under the policy.
    pub adopted: u64,
    /// The lending controller's state per RT CPU when the run ended.
    pub lending: Vec<rtmgr_core::balance::LendingStatus>,
    /// Steps skipped while lending was off on every RT CPU with no guest
    /// (the balancer then looks only once a second).
    pub idle_steps: u64,
    /// Threads and processes created by guests (they inherit the RT-CPU
    /// pinning): kept as guests of the same CPU while their creator was
    /// lent, or sent back to the NRT CPUs.
    pub children_lent: u64,
    pub children_sent_back: u64,
    pub notes: Vec<String>,
}

pub(crate) fn reason_name(r: Reason) -> &'static str {
    match r {
        Reason::KernelHeavy => "kernel_heavy",
        Reason::LatencyGuard => "latency_guard",
        Reason::NotAllowed => "not_allowed",
        Reason::Rebalance => "rebalance",
        Reason::Fill => "fill",
        Reason::Rotate => "rotate",
        Reason::LendingOff => "lending_off",
    }
}
