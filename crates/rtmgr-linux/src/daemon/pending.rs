//! Hard grants' threads waiting for SCHED_DEADLINE (budget-based RTAI §3.3:
//! hard reservations as SCHED_DEADLINE; DROPS §4.1: the manager answers at
//! once). The kernel admits SCHED_DEADLINE only where a thread waits; one
//! that still waits on an NRT CPU's run queue when granted (asleep,
//! stopped) is placed and runs under SCHED_FIFO 1 (`grant::placeholder_attr`)
//! until it is seen on its RT CPU's run queue, when the server loop sets
//! SCHED_DEADLINE (docs/protocol.md "When the policy takes effect"); one
//! held for an earlier overrun (`zero_lag.rs`) waits at its own policy. No
//! sleep: the loop looks every `EVERY_NS` while anything is pending. What
//! the Manager does with them: `manager/pending.rs`.

use std::collections::BTreeMap;

/// Look at most this often (the server loop polls no longer than this
/// while anything is pending).
pub const EVERY_NS: u64 = 2_000_000;

/// One pending thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub id: u64,
    pub cpu: u32,
    /// Why it is still pending on its RT CPU: the kernel refused it
    /// SCHED_DEADLINE there, or it is held until its last server's 0-lag
    /// time (the grant record's `hold_until_ns`); else None.
    pub reason: Option<String>,
}

/// The pending threads and the counters of `status`.
#[derive(Debug, Default)]
pub struct PendingWatch {
    pub threads: BTreeMap<u32, Pending>,
    pub(in crate::daemon) last_ns: u64,
    /// Threads given the placeholder since start.
    pub fallbacks: u64,
    /// SCHED_DEADLINE refused (EBUSY) on a pending thread's RT CPU, since start.
    pub refused: u64,
    /// Threads held until their last server's 0-lag time, since start.
    pub held: u64,
}

impl PendingWatch {
    /// The poll timeout the server loop may wait at most, ms (None: no limit).
    pub fn wait_ms(&self) -> Option<u64> {
        (!self.threads.is_empty()).then_some(EVERY_NS.div_ceil(1_000_000))
    }
}

#[cfg(test)]
#[path = "pending_tests.rs"]
pub(super) mod pending_tests;
