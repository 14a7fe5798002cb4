//! Status items about the machine under the kernel (McKenney §2.1; docs/architecture.md
//! "Measuring"): CPUs and SMT siblings, the clocksource, the hypervisor and its
//! steal time, and whether deep C-states can be held off.

use super::{item, Item, Verdict};
use crate::cpus;
use crate::host::Host;
use rtmgr_core::CpuSet;

pub(super) fn cpu_item(host: &Host, online: &CpuSet) -> Item {
    let smt = cpus::smt_groups(host).unwrap_or_default();
    let value = format!("{} online ({online})", online.len());
    if smt.is_empty() {
        item(
            "cpus",
            Verdict::Ok,
            format!("{value}, no SMT siblings"),
            "each CPU is a whole core",
        )
    } else {
        let groups: Vec<String> = smt.iter().map(|g| g.to_list()).collect();
        item(
            "cpus",
            Verdict::Warn,
            format!("{value}, SMT siblings {}", groups.join(" ")),
            "hyper-threads share a core: work on an RT CPU's sibling slows and delays the RT task; make siblings RT together or keep them idle",
        )
    }
}

pub(super) fn clocksource_item(host: &Host) -> Item {
    let cs = host
        .read_opt("/sys/devices/system/clocksource/clocksource0/current_clocksource")
        .unwrap_or_default()
        .trim()
        .to_string();
    match cs.as_str() {
        "tsc" | "kvm-clock" | "arch_sys_counter" | "hyperv_clocksource_tsc_page" => {
            item("clocksource", Verdict::Ok, cs, "read in user space (vDSO) in nanoseconds")
        }
        "" => item("clocksource", Verdict::Warn, "unknown", "could not read the clocksource"),
        _ => item(
            "clocksource",
            Verdict::Warn,
            cs,
            "a slow clocksource (hpet, acpi_pm) makes every clock read a system call and costs microseconds",
        ),
    }
}

/// Steal time share per CPU since boot, from /proc/stat.
pub fn steal_shares(host: &Host) -> Vec<(u32, f64)> {
    let text = host.read_opt("/proc/stat").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            let name = w.next()?;
            let cpu: u32 = name.strip_prefix("cpu")?.parse().ok()?;
            let v: Vec<u64> = w.filter_map(|x| x.parse().ok()).collect();
            let total: u64 = v.iter().take(8).sum();
            let steal = *v.get(7)?;
            Some((
                cpu,
                if total > 0 {
                    steal as f64 / total as f64
                } else {
                    0.0
                },
            ))
        })
        .collect()
}

pub(super) fn virt_item(host: &Host) -> Item {
    let vm = host
        .read_opt("/proc/cpuinfo")
        .map(|c| c.contains(" hypervisor"))
        .unwrap_or(false);
    let steal = steal_shares(host);
    let worst = steal.iter().map(|(_, s)| *s).fold(0.0, f64::max);
    let value = format!(
        "{}; steal since boot: {}",
        if vm {
            "virtual machine"
        } else {
            "bare metal (no hypervisor flag)"
        },
        steal
            .iter()
            .map(|(c, s)| format!("cpu{c} {:.2}%", s * 100.0))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if vm || worst > 0.001 {
        item(
            "virtualization",
            Verdict::Warn,
            value,
            "the hypervisor can stop a vCPU at any time: latency tails are set by the host, not by this kernel; compare configurations in one run",
        )
    } else {
        item("virtualization", Verdict::Ok, value, "no steal time")
    }
}

pub(super) fn dma_latency_item(host: &Host) -> Item {
    let p = host.path("/dev/cpu_dma_latency");
    if p.exists() {
        item(
            "cpu_dma_latency",
            Verdict::Ok,
            "present",
            "holding it at 0 keeps CPUs out of deep idle states whose exit takes tens to hundreds of µs (rtmgr measure does)",
        )
    } else {
        item(
            "cpu_dma_latency",
            Verdict::Warn,
            "absent",
            "deep C-state exit latency cannot be limited from user space",
        )
    }
}
