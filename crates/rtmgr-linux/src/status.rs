//! `rtmgr status`: what a real-time user checks first, each item with a
//! verdict and why it matters for latency (McKenney §2.1: IRQs, kernel
//! daemons, preemption; ARTiS §2.1: partition; DROPS §4.1: who owns what).
//! Read-only: nothing here changes the machine.

use crate::host::Host;
use crate::{cgroup, cpus, irq, partition, tasks};
use rtmgr_core::CpuSet;
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

fn item(
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
    items.push(cpu_item(host, &online));
    items.push(isolation_item(host));
    items.push(cgroup_item(host));
    items.push(partition_item(host, journal));
    items.push(preemption_item(host));
    items.push(throttling_item(host));
    items.push(clocksource_item(host));
    items.push(virt_item(host));
    items.push(deadline_item(host));
    items.push(dma_latency_item(host));
    items.push(balance_sources_item(host));
    let irqs = irq_status(host);
    let pinned = pinned_kthreads(host);
    items.push(irq_item(&irqs));
    items.push(kthread_item(&pinned));
    StatusReport {
        schema: "rtmgr.status/1",
        items,
        irqs,
        pinned_kthreads: pinned,
    }
}

fn cpu_item(host: &Host, online: &CpuSet) -> Item {
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

fn isolation_item(host: &Host) -> Item {
    let iso = cpus::isolated(host);
    let nohz = cpus::nohz_full(host);
    let value = format!(
        "isolcpus: {}; nohz_full: {}",
        if iso.is_empty() {
            "none".into()
        } else {
            iso.to_list()
        },
        if nohz.is_empty() {
            "none".into()
        } else {
            nohz.to_list()
        }
    );
    if iso.is_empty() && nohz.is_empty() {
        item(
            "isolation",
            Verdict::Warn,
            value,
            "no CPU is isolated at boot: RT CPUs keep the scheduler tick and some kernel work; an rtmgr partition moves what can move at run time",
        )
    } else {
        item(
            "isolation",
            Verdict::Ok,
            value,
            "isolated CPUs receive no unbound kernel work or tick",
        )
    }
}

fn cgroup_item(host: &Host) -> Item {
    let m = cgroup::mounts(host).unwrap_or_default();
    let v1 = m
        .v1_cpuset
        .as_ref()
        .map(|p| format!("v1 cpuset at {}", p.display()));
    let v2 = m.v2.as_ref().map(|p| {
        format!(
            "v2 at {} (controllers: {})",
            p.display(),
            m.v2_controllers.join(" ")
        )
    });
    let value = [v1, v2]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join("; ");
    match m.layout() {
        Some(l) => item(
            "cgroups",
            Verdict::Ok,
            format!("{value}; rtmgr uses {} at {}", l.name(), l.mount().display()),
            "cpusets confine every task to the NRT CPUs",
        ),
        None => item(
            "cgroups",
            Verdict::Warn,
            if value.is_empty() { "no cgroup mount".into() } else { value },
            "no cpuset controller anywhere: rtmgr cannot partition this machine (mount cgroup v2 with cpuset, or v1 cpuset)",
        ),
    }
}

fn partition_item(host: &Host, journal: &Path) -> Item {
    match partition::current(host, journal) {
        Ok(None) => item(
            "partition",
            Verdict::Ok,
            "none applied",
            "`rtmgr partition apply --rt-cpus LIST` creates one",
        ),
        Ok(Some(a)) if a.complete => item(
            "partition",
            Verdict::Ok,
            format!(
                "RT {} / NRT {} (cgroup {}, {})",
                a.plan.rt,
                a.plan.nrt,
                a.layout.name(),
                a.rt_cgroup.display()
            ),
            "applied by rtmgr; `rtmgr partition reset` undoes it",
        ),
        Ok(Some(a)) => item(
            "partition",
            Verdict::Warn,
            format!("INCOMPLETE: RT {} / NRT {}", a.plan.rt, a.plan.nrt),
            "an apply was interrupted: run `rtmgr partition reset`",
        ),
        Err(e) => item(
            "partition",
            Verdict::Warn,
            format!("journal unreadable: {e}"),
            "run `rtmgr partition reset`",
        ),
    }
}

/// The preemption model: PREEMPT_RT from the version string; the
/// PREEMPT_DYNAMIC mode from debugfs when it can be read.
pub fn preemption(host: &Host) -> (String, Option<String>) {
    let version = host
        .read_opt("/proc/sys/kernel/version")
        .unwrap_or_default();
    let model = if version.contains("PREEMPT_RT") {
        "PREEMPT_RT"
    } else if version.contains("PREEMPT_DYNAMIC") {
        "PREEMPT_DYNAMIC"
    } else if version.contains("PREEMPT") {
        "PREEMPT"
    } else {
        "no forced preemption"
    };
    // The PREEMPT_DYNAMIC mode: debugfs when readable, else `preempt=` on the
    // command line, else the boot default chosen in the kernel config.
    let from_debugfs = host.read_debugfs("sched/preempt").and_then(|t| {
        // "none voluntary (full) lazy": the selected mode is in parentheses.
        let start = t.find('(')?;
        let end = t[start..].find(')')?;
        Some(t[start + 1..start + end].to_string())
    });
    let from_cmdline = || {
        host.read_opt("/proc/cmdline")?
            .split_whitespace()
            .find_map(|w| w.strip_prefix("preempt="))
            .map(|m| format!("{m} (preempt= on the command line)"))
    };
    let from_config = || {
        let config = kernel_config(host)?;
        ["NONE", "VOLUNTARY", "LAZY", "RT"]
            .iter()
            .chain(std::iter::once(&""))
            .find(|m| {
                config.lines().any(|l| {
                    l == format!(
                        "CONFIG_PREEMPT{}{}=y",
                        if m.is_empty() { "" } else { "_" },
                        m
                    )
                })
            })
            .map(|m| {
                format!(
                    "{} (boot default in the kernel config)",
                    if m.is_empty() {
                        "full".to_string()
                    } else {
                        m.to_ascii_lowercase()
                    }
                )
            })
    };
    let mode = if model == "PREEMPT_DYNAMIC" {
        from_debugfs.or_else(from_cmdline).or_else(from_config)
    } else {
        from_debugfs
    };
    (model.to_string(), mode)
}

/// The kernel's build configuration, from /proc/config.gz or /boot.
pub fn kernel_config(host: &Host) -> Option<String> {
    use std::io::Read;
    if let Ok(f) = std::fs::File::open(host.path("/proc/config.gz")) {
        let mut text = String::new();
        if flate2::read::GzDecoder::new(f)
            .read_to_string(&mut text)
            .is_ok()
        {
            return Some(text);
        }
    }
    let release = host.read_opt("/proc/sys/kernel/osrelease")?;
    host.read_opt(format!("/boot/config-{}", release.trim()))
}

fn preemption_item(host: &Host) -> Item {
    let (model, mode) = preemption(host);
    let value = match &mode {
        Some(m) => format!("{model}, mode {m}"),
        None => format!("{model}, mode unknown (debugfs unreadable, no kernel config)"),
    };
    let effective = mode
        .as_deref()
        .and_then(|m| m.split_whitespace().next())
        .unwrap_or(model.as_str());
    match effective {
        "PREEMPT_RT" | "full" | "lazy" => item("preemption", Verdict::Ok, value, "kernel code is preemptible"),
        _ => item(
            "preemption",
            Verdict::Warn,
            value,
            "kernel code runs to completion before a waking RT task gets the CPU: expect latencies of the longest system call; PREEMPT_RT (or preempt=full) bounds them",
        ),
    }
}

fn throttling_item(host: &Host) -> Item {
    let runtime = host
        .read_opt("/proc/sys/kernel/sched_rt_runtime_us")
        .unwrap_or_default();
    let period = host
        .read_opt("/proc/sys/kernel/sched_rt_period_us")
        .unwrap_or_default();
    let (runtime, period) = (runtime.trim(), period.trim());
    if runtime == "-1" {
        item(
            "rt_throttling",
            Verdict::Warn,
            "disabled (sched_rt_runtime_us = -1)",
            "a runaway SCHED_FIFO task can hang its CPU forever; RT0 tasks must never spin",
        )
    } else {
        item(
            "rt_throttling",
            Verdict::Ok,
            format!("{runtime} / {period} µs"),
            "RT tasks may use this share of each period; a FIFO task that runs longer is throttled (a latency spike for it, safety for the machine)",
        )
    }
}

fn clocksource_item(host: &Host) -> Item {
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

fn virt_item(host: &Host) -> Item {
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

fn deadline_item(host: &Host) -> Item {
    match host.probe_deadline() {
        None => item(
            "sched_deadline",
            Verdict::Warn,
            "not probed (fake machine)",
            "",
        ),
        Some(Ok(())) => item("sched_deadline", Verdict::Ok, "available", "reservations (runtime/period) are enforced by the kernel"),
        Some(Err(e)) => item(
            "sched_deadline",
            Verdict::Warn,
            format!("unavailable: {e}"),
            "hard budget enforcement (rtmgr-rt hard mode) needs SCHED_DEADLINE (root, and no RT cgroup bandwidth limits)",
        ),
    }
}

fn dma_latency_item(host: &Host) -> Item {
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

/// What `rtmgr balance` can observe cheaply: CPU pressure (PSI) and
/// per-task schedstat (see balance/observe.rs).
fn balance_sources_item(host: &Host) -> Item {
    let psi = std::fs::read_to_string(host.path("/proc/pressure/cpu"))
        .is_ok_and(|t| t.starts_with("some"));
    let schedstat = ["/proc/self/schedstat", "/proc/1/schedstat"]
        .iter()
        .any(|p| host.path(p).exists());
    let mut missing = Vec::new();
    if !psi {
        missing.push("no CPU pressure (PSI off: CONFIG_PSI or psi=1): every full scan of `rtmgr balance` reads every task");
    }
    if !schedstat {
        missing.push("no per-task schedstat (CONFIG_SCHED_INFO): tasks are checked through stat, which costs more");
    }
    if missing.is_empty() {
        item(
            "balance_sources",
            Verdict::Ok,
            "PSI and per-task schedstat",
            "rtmgr balance checks tasks through schedstat and skips full scans while no task waits for a CPU",
        )
    } else {
        let value = match (psi, schedstat) {
            (true, false) => "PSI only",
            (false, true) => "schedstat only",
            _ => "neither PSI nor schedstat",
        };
        item("balance_sources", Verdict::Warn, value, missing.join("; "))
    }
}

fn irq_status(host: &Host) -> Vec<IrqStatus> {
    irq::all(host)
        .unwrap_or_default()
        .into_iter()
        .map(|i| {
            // The kernel decides at write time (managed and per-CPU interrupts
            // refuse); the timer cascade IRQs 0 and 2 on x86 never move.
            let movable = if i.irq == 0 || i.irq == 2 || i.name.contains("timer") {
                "no"
            } else {
                "yes (unless kernel-managed)"
            };
            IrqStatus {
                irq: i.irq,
                total: i.counts.iter().sum(),
                name: i.name,
                affinity: i.affinity.to_list(),
                effective: i.effective.map(|e| e.to_list()),
                movable,
            }
        })
        .collect()
}

fn irq_item(irqs: &[IrqStatus]) -> Item {
    let everywhere = irqs.iter().filter(|i| i.movable != "no").count();
    item(
        "irqs",
        if everywhere > 0 { Verdict::Warn } else { Verdict::Ok },
        format!("{} device IRQs, {everywhere} movable", irqs.len()),
        "an interrupt handled on an RT CPU delays the RT task by the handler's run time; a partition steers them to NRT CPUs",
    )
}

fn pinned_kthreads(host: &Host) -> BTreeMap<u32, Vec<String>> {
    let mut by_cpu: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for t in tasks::all(host).unwrap_or_default() {
        if t.kthread && t.no_setaffinity {
            if let Ok(aff) = host.get_affinity(t.tid) {
                if aff.len() == 1 {
                    by_cpu
                        .entry(aff.first().unwrap_or(0))
                        .or_default()
                        .push(t.comm);
                }
            }
        }
    }
    by_cpu
}

fn kthread_item(pinned: &BTreeMap<u32, Vec<String>>) -> Item {
    let per_cpu: Vec<String> = pinned
        .iter()
        .map(|(c, v)| format!("cpu{c}: {}", v.len()))
        .collect();
    item(
        "per_cpu_kthreads",
        Verdict::Ok,
        per_cpu.join(", "),
        "per-CPU kernel threads (ksoftirqd, kworker, migration, cpuhp) cannot leave their CPU; they run only when that CPU has work for them",
    )
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
