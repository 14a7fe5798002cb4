//! The stat_interval knob (tuned's network-latency profile, which realtime
//! includes; McKenney §2.1: per-CPU kernel work disturbs the real-time CPU):
//! `vm.stat_interval = 10` seconds.

use super::sysctl::Sysctl;
use rtmgr_core::partition::{KnobId, PartitionPlan};

/// tuned's value, in seconds.
fn tuned(_: &PartitionPlan) -> String {
    "10".into()
}

pub(super) const STAT_INTERVAL: Sysctl = Sysctl {
    id: KnobId::StatInterval,
    path: "/proc/sys/vm/stat_interval",
    value: tuned,
    explain: "Every vm.stat_interval seconds a per-CPU kernel worker (vmstat_update, which \
              cannot leave its CPU) folds the CPU's memory counters into the global ones. \
              tuned's network-latency profile, which its realtime profile includes, sets it to \
              10 s instead of 1 s: ten times fewer wake-ups of a kernel worker on each RT CPU, \
              at the price of memory statistics up to 10 s old. Reset writes the old value back.",
    absent: "an unusual kernel",
};
