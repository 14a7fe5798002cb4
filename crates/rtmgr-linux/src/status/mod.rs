//! `rtmgr status`: what a real-time user checks first, each item with a
//! verdict and why it matters for latency (McKenney §2.1: IRQs, kernel
//! daemons, preemption; ARTiS §2.1: partition; DROPS §4.1: who owns what).
//! Read-only: nothing here changes the machine. One module per group of items:
//! the machine and hypervisor, the partition and boot isolation, the kernel's
//! scheduling facts, interrupts and kernel threads.

mod irqs;
mod kernel;
mod machine;
mod partition;

pub use kernel::{kernel_config, preemption};
pub use machine::steal_shares;

use crate::cpus;
use crate::host::Host;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Ok,
    Warn,
}

#[derive(Debug, Clone, Serialize)]
pub struct Item {
    pub name: &'static str,
    pub verdict: Verdict,
    pub value: String,
    /// Why it matters for latency (always given for warnings).
    pub why: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct IrqStatus {
    pub irq: u32,
    pub name: String,
    pub affinity: String,
    pub effective: Option<String>,
    pub movable: &'static str,
    pub total: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    pub schema: &'static str,
    pub items: Vec<Item>,
    pub irqs: Vec<IrqStatus>,
    /// Per-CPU kernel threads that cannot move, by CPU.
    pub pinned_kthreads: BTreeMap<u32, Vec<String>>,
}

pub(super) fn item(
    name: &'static str,
    verdict: Verdict,
    value: impl Into<String>,
    why: impl Into<String>,
) -> Item {
    Item {
        name,
        verdict,
        value: value.into(),
        why: why.into(),
    }
}

pub fn collect(host: &Host, journal: &Path) -> StatusReport {
    let mut items = Vec::new();
    let online = cpus::online(host).unwrap_or_default();
    items.push(machine::cpu_item(host, &online));
    items.push(partition::isolation_item(host));
    items.push(partition::cgroup_item(host));
    items.push(partition::partition_item(host, journal));
    items.push(kernel::preemption_item(host));
    items.push(kernel::throttling_item(host));
    items.push(machine::clocksource_item(host));
    items.push(machine::virt_item(host));
    items.push(kernel::deadline_item(host));
    items.push(machine::dma_latency_item(host));
    items.push(kernel::balance_sources_item(host));
    let irqs = irqs::irq_status(host);
    let pinned = irqs::pinned_kthreads(host);
    items.push(irqs::irq_item(&irqs));
    items.push(irqs::kthread_item(&pinned));
    StatusReport {
        schema: "rtmgr.status/1",
        items,
        irqs,
        pinned_kthreads: pinned,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeMachine;

    #[test]
    fn fake_machine_status_has_every_item() {
        let m = FakeMachine::new(2).typical_tasks().build();
        let r = collect(&m.host(), Path::new("/run/rtmgr/journal.jsonl"));
        let names: Vec<&str> = r.items.iter().map(|i| i.name).collect();
        for n in [
            "cpus",
            "isolation",
            "cgroups",
            "partition",
            "preemption",
            "rt_throttling",
            "clocksource",
            "virtualization",
            "sched_deadline",
            "cpu_dma_latency",
            "balance_sources",
            "irqs",
            "per_cpu_kthreads",
        ] {
            assert!(names.contains(&n), "missing {n}");
        }
        assert_eq!(r.irqs.len(), 3);
        assert_eq!(r.pinned_kthreads.len(), 2);
        assert!(r
            .items
            .iter()
            .filter(|i| i.verdict == Verdict::Warn)
            .all(|i| !i.why.is_empty() || i.name == "sched_deadline"));
    }

    #[test]
    fn real_machine_status_reads() {
        let r = collect(&Host::real(), Path::new(crate::journal::DEFAULT_JOURNAL));
        assert!(r
            .items
            .iter()
            .any(|i| i.name == "cpus" && i.value.contains("online")));
    }
}
