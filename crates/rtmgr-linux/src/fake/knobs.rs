//! The files of the run-time knobs in a fake machine (partition knobs beyond
//! cpusets and IRQs): sysctls, workqueue masks, network queues, block devices
//! and the PCI device behind one, optional cpuidle states and cpufreq
//! governors, and the debugfs preemption model.

use std::path::Path;

/// What the optional parts of the tree hold.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct KnobFiles {
    pub cpuidle: bool,
    pub cpufreq: bool,
    /// `Some(writable)`: a PREEMPT_DYNAMIC kernel's debugfs `sched/preempt`.
    pub preempt: Option<bool>,
}

/// A relative symlink inside the tree, as sysfs has them.
fn link(root: &Path, at: &str, target: &str) {
    let at = root.join(at.trim_start_matches('/'));
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(target, at).unwrap();
}

pub(super) fn write(root: &Path, ncpu: u32, w: &dyn Fn(&str, &str), k: KnobFiles) {
    let all = format!("0-{}", ncpu - 1);
    let mask = rtmgr_core::CpuSet::parse_list(&all).unwrap().to_mask(1);
    w("/proc/uptime", "1000.00 1900.00\n");
    w("/proc/sys/kernel/timer_migration", "1\n");
    w("/proc/sys/vm/stat_interval", "1\n");
    w("/proc/sys/kernel/watchdog_cpumask", &format!("{all}\n"));
    for q in ["writeback", "blkcg_punt_bio"] {
        w(
            &format!("/sys/devices/virtual/workqueue/{q}/cpumask"),
            &format!("{mask}\n"),
        );
    }
    link(
        root,
        "/sys/bus/workqueue/devices/writeback",
        "../../../devices/virtual/workqueue/writeback",
    );
    // lo: one queue, RPS off, no XPS file (single queue); eth0: two queues with XPS.
    w("/sys/class/net/lo/queues/rx-0/rps_cpus", "0\n");
    std::fs::create_dir_all(root.join("sys/class/net/lo/queues/tx-0")).unwrap();
    for q in 0..2 {
        w(
            &format!("/sys/class/net/eth0/queues/rx-{q}/rps_cpus"),
            "0\n",
        );
    }
    w("/sys/class/net/eth0/queues/tx-0/xps_cpus", "1\n");
    let rest = rtmgr_core::CpuSet::parse_list(&all)
        .unwrap()
        .difference(&rtmgr_core::CpuSet::single(0));
    w(
        "/sys/class/net/eth0/queues/tx-1/xps_cpus",
        &format!("{}\n", rest.to_mask(1)),
    );
    // vda: a virtio disk on PCI device 0000:00:02.0 with MSI-X IRQs 35 and 36;
    // loop0: no device, no interrupt.
    let pci = "/sys/devices/pci0000:00/0000:00:02.0";
    w(&format!("{pci}/msi_irqs/35"), "msix\n");
    w(&format!("{pci}/msi_irqs/36"), "msix\n");
    w(&format!("{pci}/virtio1/vendor"), "0x1af4\n");
    w("/sys/block/vda/queue/rq_affinity", "1\n");
    link(
        root,
        "/sys/block/vda/device",
        "../../devices/pci0000:00/0000:00:02.0/virtio1",
    );
    w("/sys/block/loop0/queue/rq_affinity", "1\n");
    let idle_driver = if k.cpuidle { "intel_idle" } else { "none" };
    w(
        "/sys/devices/system/cpu/cpuidle/current_driver",
        &format!("{idle_driver}\n"),
    );
    for c in 0..ncpu {
        let cpu = format!("/sys/devices/system/cpu/cpu{c}");
        if k.cpuidle {
            for (i, (name, latency)) in [("POLL", 0), ("C1", 2), ("C6", 170)].iter().enumerate() {
                w(
                    &format!("{cpu}/cpuidle/state{i}/name"),
                    &format!("{name}\n"),
                );
                w(
                    &format!("{cpu}/cpuidle/state{i}/latency"),
                    &format!("{latency}\n"),
                );
                w(&format!("{cpu}/cpuidle/state{i}/disable"), "0\n");
            }
        }
        if k.cpufreq {
            w(&format!("{cpu}/cpufreq/scaling_governor"), "powersave\n");
            w(
                &format!("{cpu}/cpufreq/scaling_available_governors"),
                "performance powersave\n",
            );
        }
    }
    if let Some(writable) = k.preempt {
        w(
            "/sys/kernel/debug/sched/preempt",
            "none (voluntary) full lazy\n",
        );
        if !writable {
            w(crate::host::FAKE_DEBUGFS_LOCKED, "");
        }
    }
}
