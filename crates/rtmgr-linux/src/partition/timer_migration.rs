//! The timer_migration knob (tuned's network-latency profile, which realtime
//! includes; McKenney §2.1: nothing should fire on the real-time CPU that its
//! own work did not arm): `kernel.timer_migration = 0`.

use super::sysctl::Sysctl;
use rtmgr_core::partition::{KnobId, PartitionPlan};

fn off(_: &PartitionPlan) -> String {
    "0".into()
}

pub(super) const TIMER_MIGRATION: Sysctl = Sysctl {
    id: KnobId::TimerMigration,
    path: "/proc/sys/kernel/timer_migration",
    value: off,
    explain: "With timer migration on, a timer armed on one CPU may expire on another: an idle \
              CPU's timers go to a busy one (before Linux 6.9), or a busy CPU is made the \
              migrator that expires the idle CPUs' timers (6.9 and later) — and the busiest CPU \
              of a partition is often the RT CPU running its RT0 task. tuned's network-latency \
              profile, which its realtime profile includes, sets kernel.timer_migration = 0: \
              every timer expires on the CPU that armed it, so timers armed by NRT work stay on \
              the NRT CPUs. Reset writes the old value back.",
    absent: "a kernel without NO_HZ_COMMON",
};
