//! The watchdog knob (tuned's realtime and cpu-partitioning profiles boot with
//! `nosoftlockup`; McKenney §2.1: what must be shut down on a real-time CPU):
//! `kernel.watchdog_cpumask` = the NRT CPUs, at run time.

use super::sysctl::Sysctl;
use rtmgr_core::partition::{KnobId, PartitionPlan};

fn nrt_cpus(plan: &PartitionPlan) -> String {
    plan.nrt.to_list()
}

pub(super) const WATCHDOG: Sysctl = Sysctl {
    id: KnobId::Watchdog,
    path: "/proc/sys/kernel/watchdog_cpumask",
    value: nrt_cpus,
    explain: "The lockup detectors run on every CPU of kernel.watchdog_cpumask: a per-CPU \
              timer every few seconds that wakes the CPU's stopper thread (soft lockups) and, \
              where there is one, a periodic NMI (hard lockups). tuned's realtime and \
              cpu-partitioning profiles turn the soft-lockup detector off everywhere with the \
              `nosoftlockup` boot option; rtmgr does it at run time and for the RT CPUs only \
              (the mask becomes the NRT CPUs), so lockups on the NRT CPUs are still caught. \
              Reset writes the old mask back.",
    absent: "a kernel without the lockup detector",
};
