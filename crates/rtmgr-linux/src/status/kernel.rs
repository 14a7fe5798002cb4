//! Status items about the kernel's scheduling (McKenney §2.1: preemption; ARTiS
//! §2.2): the preemption model, RT throttling, SCHED_DEADLINE, and what the live
//! balancer can observe cheaply.

use super::{item, Item, Verdict};
use crate::host::Host;
use rtmgr_core::partition::knobs::preempt_models;

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
    let from_debugfs = host
        .read_debugfs("sched/preempt")
        .and_then(|t| preempt_models(&t).1.map(str::to_string));
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

/// The kernel's build configuration, from /proc/config.gz or /boot; read
/// once per `host`.
pub fn kernel_config(host: &Host) -> Option<std::sync::Arc<str>> {
    host.kernel_config(|| read_kernel_config(host))
}

fn read_kernel_config(host: &Host) -> Option<String> {
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

pub(super) fn preemption_item(host: &Host) -> Item {
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

/// Does moving a thread into a cpuset (each grant) wait for an RCU grace
/// period after an idle spell? Not when a cgroup mount has `favordynmods` or
/// the kernel was built to favour it (the `favordynmods` knob).
pub(super) fn cgroup_attach_item(host: &Host) -> Item {
    let info = host.read_opt("/proc/self/mountinfo").unwrap_or_default();
    let mounted = info
        .lines()
        .filter_map(rtmgr_core::cgroupfs::mount_line)
        .find(|(_, fs, opts)| {
            fs.starts_with("cgroup") && opts.split(',').any(|o| o == "favordynmods")
        });
    let built = kernel_config(host)
        .is_some_and(|c| c.lines().any(|l| l == "CONFIG_CGROUP_FAVOR_DYNMODS=y"));
    match (mounted, built) {
        (Some((at, _, _)), _) => item(
            "cgroup_attach",
            Verdict::Ok,
            format!("favordynmods on {at}"),
            "a grant's move into the RT cpuset does not wait for an RCU grace period",
        ),
        (None, true) => item(
            "cgroup_attach",
            Verdict::Ok,
            "CONFIG_CGROUP_FAVOR_DYNMODS=y",
            "a grant's move into the RT cpuset does not wait for an RCU grace period",
        ),
        (None, false) => item(
            "cgroup_attach",
            Verdict::Warn,
            "no cgroup mount with favordynmods",
            "after an idle spell a thread's move into a cpuset waits for an RCU grace period (5-15 ms on the development VM), and so does the first grant of a burst, with the requests behind it; `favordynmods = true` (or --favordynmods) sets it for the partition's lifetime (docs/partition.md)",
        ),
    }
}

pub(super) fn throttling_item(host: &Host) -> Item {
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

pub(super) fn deadline_item(host: &Host) -> Item {
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

/// What `rtmgr balance` can observe cheaply: CPU pressure (PSI) and
/// per-task schedstat (see balance/observe.rs).
pub(super) fn balance_sources_item(host: &Host) -> Item {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Read once per host: `rtmgr status` asks three times, and
    /// /proc/config.gz is decompressed each time it is read.
    #[test]
    fn the_kernel_config_is_read_once_per_host() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        let w = |p: &str, t: &str| crate::host::write_fake_file(&host, p, t);
        w("/proc/sys/kernel/osrelease", "6.18.0-test\n");
        w("/boot/config-6.18.0-test", "CONFIG_PREEMPT_DYNAMIC=y\n");
        let first = kernel_config(&host).unwrap();
        assert!(first.contains("CONFIG_PREEMPT_DYNAMIC=y"));
        std::fs::remove_file(host.path("/boot/config-6.18.0-test")).unwrap();
        assert_eq!(kernel_config(&host), Some(first), "not read again");
        let other = Host::fake(dir.path());
        assert_eq!(kernel_config(&other), None, "another host reads its own");
    }
}
