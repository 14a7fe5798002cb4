//! One picture of the machine for `rtmgr top` (issue 23), the same for the
//! screen and for `--once --json` (schema rtmgr.top/1): per RT CPU the wake-up
//! latency, steal, IRQs and kernel threads, guests and lending (ARTiS
//! §2.2–2.3); per NRT CPU the load; the reservations with their budgets
//! (budget-based RTAI §3); the daemon's counters (DROPS §4.1). A field the
//! source cannot tell is None and shows as "-".

use rtmgr_core::protocol::{Guest, LatencyWindow, Lending};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The version of the `--once --json` output.
pub const SCHEMA: &str = "rtmgr.top/1";

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Snapshot {
    pub schema: String,
    /// Where the figures come from: "daemon" or "partition in place" (no daemon).
    pub source: String,
    /// Why there is no daemon, or other facts worth a line.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The refresh interval the deltas cover (ms).
    pub interval_ms: u64,
    /// `--probe`: what the probe is ("SCHED_FIFO 99, every 10 ms"); None: no probe of ours.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub probe: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub daemon: Option<DaemonLine>,
    pub rt: Vec<RtCpu>,
    pub nrt: Vec<NrtCpu>,
    pub reservations: Vec<Reservation>,
}

/// The daemon's counters since it started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct DaemonLine {
    pub pid: u32,
    pub uptime_s: f64,
    pub requests: u64,
    pub granted: u64,
    pub refused: u64,
    pub errors: u64,
    /// Drift repaired, by kind.
    pub drift: BTreeMap<String, u64>,
    pub evictions: u64,
    pub starvation_boosts: u64,
    pub balancer: String,
}

#[cfg(feature = "top")]
impl DaemonLine {
    pub fn drift_total(&self) -> u64 {
        self.drift.values().sum()
    }
}

/// One RT CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RtCpu {
    pub cpu: u32,
    /// Wake-up latency over the last window (the daemon's guard or our probe).
    pub latency: Option<LatencyWindow>,
    /// Largest sample of each recent window, oldest first (ns).
    #[serde(default)]
    pub history_ns: Vec<u64>,
    /// Busy share of the CPU over the interval.
    pub load: Option<f64>,
    /// Steal over the interval, clock ticks.
    pub steal_ticks: Option<u64>,
    pub host_stalls: Option<u64>,
    /// Interrupts handled here over the interval, and the largest sources.
    pub irqs: Option<u64>,
    #[serde(default)]
    pub irq_sources: Vec<(String, u64)>,
    /// Kernel threads bound to this CPU.
    #[serde(default)]
    pub kthreads: Vec<String>,
    pub guests: Option<Vec<Guest>>,
    pub lending: Option<Lending>,
    /// Evictions since the daemon started, by cause (None: no daemon).
    pub evictions: Option<BTreeMap<String, u64>>,
    pub starvation_boosts: Option<u64>,
}

#[cfg(feature = "top")]
impl RtCpu {
    pub fn evictions_total(&self) -> Option<u64> {
        self.evictions.as_ref().map(|e| e.values().sum())
    }
}

/// One NRT CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct NrtCpu {
    pub cpu: u32,
    pub load: Option<f64>,
    pub steal_ticks: Option<u64>,
}

/// A reservation of the daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Reservation {
    pub id: u64,
    pub name: Option<String>,
    pub pid: u32,
    pub cpu: u32,
    pub class: String,
    pub policy: String,
    pub budget_ns: u64,
    pub period_ns: u64,
    pub threads: Vec<u32>,
    /// CPU time its threads used over the interval, as a share of the budget.
    pub budget_used: Option<f64>,
}
