//! `rtmgr status`: what a real-time user checks first, each item with a
//! verdict and why it matters for latency (McKenney §2.1: IRQs, kernel
//! daemons, preemption; ARTiS §2.1: partition; DROPS §4.1: who owns what).
//! Read-only: nothing here changes the machine. One module per group of items:
//! the machine and hypervisor, the partition and boot isolation, the kernel's
//! scheduling facts, interrupts and kernel threads, what stays on the RT CPUs,
//! the programs (irqbalance, tuned) that would undo part of a partition, and
//! cache allocation (resctrl).

mod cache;
mod cpu_capacity;
mod host_preemption;
mod irqs;
mod kernel;
mod machine;
mod partition;
mod rt_permission;
mod services;
mod unmovable;

pub use cache::{cache_allocation, CacheAllocation};
pub use kernel::{kernel_config, preemption};
pub use machine::steal_shares;
pub use rt_permission::facts as rt_permission_facts;

use crate::cpus;
use crate::host::Host;
use rtmgr_core::partition::placement::{IrqHit, RtChoice};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

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
    /// Interrupts user space cannot move, per CPU, with rates (root only).
    pub unmovable_irqs: Vec<IrqHit>,
    /// What `--rt-cpus auto` would choose, and why.
    pub rt_choice: Option<RtChoice>,
    /// The cached host-preemption test (`rtmgr status --host-test`), if recent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_preemption: Option<rtmgr_core::host_preemption::HostPreemption>,
    /// What 1…N busy vCPUs did (from the cached host test), if measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_capacity: Option<rtmgr_core::capacity::CpuCapacity>,
    /// resctrl, the L3's CLOS and ways, and the daemon's cache split here.
    pub cache_allocation: CacheAllocation,
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

/// Every item; interrupt rates are sampled for `unmovable::SAMPLE_WINDOW`.
pub fn collect(host: &Host, journal: &Path) -> StatusReport {
    collect_with(host, journal, crate::unmovable::SAMPLE_WINDOW)
}

/// Every item, sampling interrupt rates for `window` (zero: means since boot).
pub fn collect_with(host: &Host, journal: &Path, window: Duration) -> StatusReport {
    let mut items = Vec::new();
    let online = cpus::online(host).unwrap_or_default();
    items.push(machine::cpu_item(host, &online));
    items.push(partition::isolation_item(host));
    items.push(partition::cgroup_item(host));
    items.push(partition::partition_item(host, journal));
    items.push(kernel::preemption_item(host));
    items.push(kernel::throttling_item(host));
    items.push(kernel::cgroup_attach_item(host));
    items.push(machine::clocksource_item(host));
    items.push(machine::virt_item(host));
    let (preemption_item, host_preemption) = host_preemption::host_preemption_item(host);
    items.push(preemption_item);
    let (capacity_item, cpu_capacity) = cpu_capacity::cpu_capacity_item(host_preemption.as_ref());
    items.push(capacity_item);
    items.push(kernel::deadline_item(host));
    items.push(rt_permission::rt_permission_item(host));
    items.push(machine::dma_latency_item(host));
    items.push(kernel::balance_sources_item(host));
    let irqs = irqs::irq_status(host);
    let pinned = irqs::pinned_kthreads(host);
    items.push(irqs::irq_item(&irqs));
    items.push(irqs::kthread_item(&pinned));
    let facts = crate::unmovable::facts(host, window).unwrap_or_default();
    let applied = crate::partition::current(host, journal).ok().flatten();
    let rt = unmovable::rt_cpus(&facts, applied.as_ref());
    items.push(unmovable::managed_irqs_item(host, &facts.hits, rt.as_ref()));
    items.push(unmovable::block_item(host, rt.as_ref()));
    items.push(unmovable::choice_item(rt.as_ref()));
    items.push(unmovable::boot_item(host, rt.as_ref(), &online));
    items.push(unmovable::knobs_item(host, rt.as_ref(), &online));
    let applied_rt = applied.as_ref().map(|a| &a.plan.rt);
    items.push(services::irqbalance_item(host, applied_rt));
    items.push(services::tuned_item(host, applied_rt));
    let cache_allocation = cache::cache_allocation(host);
    items.push(cache::cache_item(&cache_allocation));
    StatusReport {
        schema: "rtmgr.status/1",
        items,
        irqs,
        pinned_kthreads: pinned,
        unmovable_irqs: facts.hits,
        rt_choice: rt.and_then(|r| r.choice),
        host_preemption,
        cpu_capacity,
        cache_allocation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeMachine;
    use rtmgr_core::CpuSet;

    fn status_of(m: &FakeMachine) -> StatusReport {
        collect_with(
            &m.host(),
            Path::new("/run/rtmgr/journal.jsonl"),
            Duration::ZERO,
        )
    }

    fn find<'a>(r: &'a StatusReport, name: &str) -> &'a Item {
        r.items.iter().find(|i| i.name == name).unwrap()
    }

    #[test]
    fn a_managed_disk_interrupt_is_named_with_its_rate_and_boot_option() {
        let m = FakeMachine::new(2)
            .typical_tasks()
            .managed_irq(36, 1, 57_000)
            .build();
        let r = status_of(&m);
        let irqs = find(&r, "unmovable_irqs");
        assert!(
            irqs.value
                .contains("IRQ 36 virtio1-req.0 on CPU 1: 57/s, 57000 since boot")
                && irqs.value.contains("isolcpus=managed_irq,domain,1"),
            "{irqs:?}"
        );
        assert_eq!(irqs.verdict, Verdict::Ok, "auto keeps it off the RT CPU");
        let choice = find(&r, "rt_cpu_choice");
        assert!(
            choice
                .value
                .starts_with("--rt-cpus auto would choose CPU 0"),
            "{choice:?}"
        );
        let block = find(&r, "block_completions");
        assert!(
            block
                .value
                .contains("vda: completion IRQ 36 kernel-managed on CPU 1"),
            "{block:?}"
        );
        let bootline = find(&r, "boot_cmdline");
        assert!(
            bootline
                .value
                .contains("isolcpus=managed_irq,domain,0 nohz_full=0"),
            "{bootline:?}"
        );
        let knobs = find(&r, "runtime_knobs");
        assert!(
            knobs
                .value
                .contains("not here: irqbalance cpuidle cpufreq preempt"),
            "{knobs:?}"
        );
        assert_eq!(r.rt_choice.as_ref().unwrap().rt.to_list(), "0");
    }

    #[test]
    fn an_applied_partition_on_the_managed_interrupt_warns() {
        let m = FakeMachine::new(2)
            .typical_tasks()
            .managed_irq(36, 1, 57_000)
            .build();
        let host = m.host();
        let plan = rtmgr_core::partition::validate(
            &Default::default(),
            Some(&rtmgr_core::CpuSet::single(1)),
            &cpus::online(&host).unwrap(),
        )
        .unwrap();
        let opts = crate::partition::ApplyOptions {
            journal: "/run/rtmgr/journal.jsonl".into(),
            replace: false,
        };
        crate::partition::apply(&host, &plan, &opts).unwrap();
        let r = status_of(&m);
        assert_eq!(find(&r, "unmovable_irqs").verdict, Verdict::Warn);
        assert_eq!(find(&r, "rt_cpu_choice").verdict, Verdict::Warn);
        // The partition set rq_affinity 2: the completions are handled.
        assert_eq!(find(&r, "block_completions").verdict, Verdict::Ok);
        crate::partition::reset(&host, Path::new("/run/rtmgr/journal.jsonl")).unwrap();
    }

    #[test]
    fn cgroup_attach_is_ok_only_with_favordynmods() {
        let m = FakeMachine::new(2).typical_tasks().build();
        assert_eq!(find(&status_of(&m), "cgroup_attach").verdict, Verdict::Warn);
        let host = m.host();
        let info = host.read("/proc/self/mountinfo").unwrap();
        let on = info.replace("cgroup2 cgroup2 rw", "cgroup2 cgroup2 rw,favordynmods");
        host.write("/proc/self/mountinfo", &on).unwrap();
        let r = status_of(&m);
        let i = find(&r, "cgroup_attach");
        assert_eq!(i.verdict, Verdict::Ok);
        assert!(i.value.contains("favordynmods on /sys/fs/cgroup"), "{i:?}");
    }

    #[test]
    fn fake_machine_status_has_every_item() {
        let m = FakeMachine::new(2).typical_tasks().build();
        let r = status_of(&m);
        let names: Vec<&str> = r.items.iter().map(|i| i.name).collect();
        for n in [
            "cpus",
            "isolation",
            "cgroups",
            "partition",
            "preemption",
            "rt_throttling",
            "cgroup_attach",
            "clocksource",
            "virtualization",
            "host_preemption",
            "cpu_capacity",
            "sched_deadline",
            "rt_permission",
            "cpu_dma_latency",
            "balance_sources",
            "irqs",
            "per_cpu_kthreads",
            "unmovable_irqs",
            "block_completions",
            "rt_cpu_choice",
            "boot_cmdline",
            "runtime_knobs",
            "irqbalance",
            "tuned",
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
    fn host_preemption_shows_the_cached_test_or_how_to_run_it() {
        use rtmgr_core::host_preemption::{assess, Phase, TestSetup};
        let m = FakeMachine::new(2).typical_tasks().build();
        let host = m.host();
        let missing = status_of(&m);
        let i = find(&missing, "host_preemption");
        assert!(
            i.value.starts_with("not measured") && i.value.contains("rtmgr status --host-test"),
            "{i:?}"
        );
        assert!(missing.host_preemption.is_none());
        std::fs::create_dir_all(host.path("/proc/sys/kernel/random")).unwrap();
        std::fs::write(host.path(crate::host_preemption::BOOT_ID_PATH), "b\n").unwrap();
        let now = rtmgr_sys::time::unix_now_s();
        let setup = TestSetup::new(CpuSet::single(0), CpuSet::single(1), "b", now);
        let phases = [
            Phase::synthetic(0, false, 2, 0, 0, 0),
            Phase::synthetic(0, true, 2, 1, 11_000_000, 1),
        ];
        let r = assess(setup, &phases);
        crate::host_preemption::write_host_preemption(&host, &r).unwrap();
        let shown = status_of(&m);
        let i = find(&shown, "host_preemption");
        assert_eq!(i.verdict, Verdict::Warn);
        assert!(
            i.value
                .starts_with("this host preempts busy vCPUs: lending would cost about 11 ms"),
            "{i:?}"
        );
        assert!(shown.host_preemption.as_ref().is_some_and(|h| h.preempts));
        let c = find(&shown, "cpu_capacity");
        assert!(c.value.contains("no capacity measurement"), "{c:?}");
        assert!(shown.cpu_capacity.is_none());
    }

    #[test]
    fn cpu_capacity_shows_the_cached_measurement_or_how_to_get_it() {
        use rtmgr_core::capacity::{assess_capacity, CapacityPhase};
        use rtmgr_core::host_preemption::{assess, TestSetup};
        let m = FakeMachine::new(2).typical_tasks().build();
        let host = m.host();
        let missing = status_of(&m);
        let i = find(&missing, "cpu_capacity");
        assert!(
            i.value.starts_with("not measured") && i.value.contains("rtmgr status --host-test"),
            "{i:?}"
        );
        std::fs::create_dir_all(host.path("/proc/sys/kernel/random")).unwrap();
        std::fs::write(host.path(crate::host_preemption::BOOT_ID_PATH), "b\n").unwrap();
        let setup = TestSetup::new(
            CpuSet::single(0),
            CpuSet::single(1),
            "b",
            rtmgr_sys::time::unix_now_s(),
        );
        // Two busy vCPUs each at half the speed of one alone.
        let phase = |k: usize| CapacityPhase {
            elapsed_ns: 1_000_000_000,
            work: vec![1000 / k as u64; k],
            steal_ticks: 0,
        };
        let cap = assess_capacity(&[1, 0], 1, &[phase(1), phase(2)]);
        let r = rtmgr_core::host_preemption::HostPreemption {
            cpu_capacity: cap,
            ..assess(setup, &[])
        };
        crate::host_preemption::write_host_preemption(&host, &r).unwrap();
        let shown = status_of(&m);
        let i = find(&shown, "cpu_capacity");
        assert_eq!(i.verdict, Verdict::Warn);
        assert!(
            i.value.starts_with(
                "2 busy vCPUs do 1.0× the work of one: the host gives this VM about one CPU now"
            ),
            "{i:?}"
        );
        let json = serde_json::to_value(&shown).unwrap();
        assert!((json["cpu_capacity"]["effective_cpus"].as_f64().unwrap() - 1.0).abs() < 1e-9);
        // A cache written before the capacity measurement existed still reads.
        let mut old = serde_json::to_value(&r).unwrap();
        old.as_object_mut().unwrap().remove("cpu_capacity");
        std::fs::write(
            host.path(crate::host_preemption::CACHE_PATH),
            old.to_string(),
        )
        .unwrap();
        let shown = status_of(&m);
        assert!(shown.host_preemption.is_some());
        assert!(find(&shown, "cpu_capacity")
            .value
            .contains("no capacity measurement"));
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
