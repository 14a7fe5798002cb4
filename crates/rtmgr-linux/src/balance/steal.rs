//! Steal time per RT CPU per balancer step, from /proc/stat: the evidence
//! that the hypervisor, not the guest, took a lent vCPU (issue 20; ARTiS §2.3
//! assumes a CPU that runs when the kernel schedules it, which a VM breaks).

use crate::Host;
use rtmgr_core::proctext::parse_steal;
use std::collections::BTreeMap;

/// The steal counters at the previous step.
pub struct StealWindow {
    prev: BTreeMap<u32, u64>,
    tick_ns: u64,
}

impl StealWindow {
    pub fn new(host: &Host) -> StealWindow {
        StealWindow {
            prev: read(host),
            tick_ns: 1_000_000_000 / rtmgr_sys::time::clock_ticks_per_second().max(1),
        }
    }

    /// Steal per CPU since the last call, ns (10 ms resolution: USER_HZ ticks).
    pub fn take(&mut self, host: &Host) -> BTreeMap<u32, u64> {
        let now = read(host);
        let out = now
            .iter()
            .map(|(&c, &v)| {
                let before = self.prev.get(&c).copied().unwrap_or(v);
                (c, v.saturating_sub(before) * self.tick_ns)
            })
            .collect();
        self.prev = now;
        out
    }
}

fn read(host: &Host) -> BTreeMap<u32, u64> {
    parse_steal(&host.read_opt("/proc/stat").unwrap_or_default())
}
