//! The status item that explains an EPERM from `sched_setscheduler`
//! (McKenney §2.1: RT tasks run SCHED_FIFO): SCHED_FIFO is tried on a
//! short-lived thread, and what the kernel checks is read — CAP_SYS_NICE,
//! RLIMIT_RTPRIO, RT group scheduling and this process's cpu cgroup (v1
//! `cpu.rt_runtime_us`, v2 cpu controller). The judging is
//! rtmgr_core::rt_permission's.

use super::{item, Item, Verdict};
use crate::host::Host;
use rtmgr_core::rt_permission::{self as rp, RtPermissionFacts};

/// What the kernel checks, as this process sees it.
pub fn facts(host: &Host) -> RtPermissionFacts {
    let cgroup = host.read_opt("/proc/self/cgroup").unwrap_or_default();
    let mountinfo = host.read_opt("/proc/self/mountinfo").unwrap_or_default();
    let v1_cpu_cgroup = rp::v1_mount_of(&mountinfo, "cpu").and_then(|mount| {
        let path = rp::v1_cgroup_of(&cgroup, "cpu")?;
        let file = format!("{}{}/cpu.rt_runtime_us", mount, path.trim_end_matches('/'));
        let runtime = host.read_opt(&file).and_then(|t| t.trim().parse().ok());
        Some((path, runtime))
    });
    let v2_cpu_cgroup = crate::cgroup::mounts(host)
        .ok()
        .and_then(|m| m.v2)
        .and_then(|v2| {
            let path = rp::v2_cgroup_of(&cgroup)?;
            let weight = v2.join(path.trim_start_matches('/')).join("cpu.weight");
            (path != "/" && host.exists(&weight)).then_some(path)
        });
    let cmdline = host.read_opt("/proc/cmdline").unwrap_or_default();
    let rt_group_sched = super::kernel_config(host)
        .and_then(|c| rp::rt_group_sched(&c, &cmdline))
        .or_else(|| {
            // No config to read: v1 shows the budget files only with it.
            let mount = rp::v1_mount_of(&mountinfo, "cpu")?;
            Some(host.exists(format!("{mount}/cpu.rt_runtime_us")))
        });
    RtPermissionFacts {
        cap_sys_nice: host
            .read_opt("/proc/self/status")
            .and_then(|s| rp::cap_sys_nice(&s)),
        rtprio_limit: host
            .read_opt("/proc/self/limits")
            .and_then(|l| rp::rtprio_limit(&l)),
        rt_group_sched,
        global_rt_runtime_us: host
            .read_opt("/proc/sys/kernel/sched_rt_runtime_us")
            .and_then(|t| t.trim().parse().ok()),
        v1_cpu_cgroup,
        v2_cpu_cgroup,
    }
}

fn errno_text(errno: i32) -> String {
    let text = std::io::Error::from_raw_os_error(errno).to_string();
    text.split(" (os error").next().unwrap_or(&text).to_string()
}

pub(super) fn rt_permission_item(host: &Host) -> Item {
    let causes = rp::diagnose(&facts(host));
    let explained = causes
        .iter()
        .map(|c| format!("{}; fix: {}", c.why, c.fix))
        .collect::<Vec<_>>()
        .join(" — also: ");
    let names = causes.iter().map(|c| c.name).collect::<Vec<_>>().join(", ");
    match host.probe_fifo() {
        Some(Ok(())) => item(
            "rt_permission",
            Verdict::Ok,
            "SCHED_FIFO allowed (tried on a thread)",
            "this process may run real-time threads",
        ),
        Some(Err(errno)) if errno == libc::EPERM => {
            let why = if causes.is_empty() {
                "none of the kernel's own reasons applies (CAP_SYS_NICE or RLIMIT_RTPRIO, an RT cgroup budget): a seccomp filter, an LSM or a container runtime (started without CAP_SYS_NICE, or without --cpu-rt-runtime under RT group scheduling) refuses it".to_string()
            } else {
                explained
            };
            item(
                "rt_permission",
                Verdict::Warn,
                format!(
                    "SCHED_FIFO refused: EPERM ({})",
                    if names.is_empty() {
                        "cause unknown"
                    } else {
                        &names
                    }
                ),
                why,
            )
        }
        Some(Err(errno)) => item(
            "rt_permission",
            Verdict::Warn,
            format!("SCHED_FIFO refused: {}", errno_text(errno)),
            "the kernel refused a SCHED_FIFO thread for a reason other than permission",
        ),
        None if causes.is_empty() => item(
            "rt_permission",
            Verdict::Ok,
            "not tried here; nothing the kernel checks would refuse SCHED_FIFO",
            "",
        ),
        None => item(
            "rt_permission",
            Verdict::Warn,
            format!("not tried here; SCHED_FIFO would be refused ({names})"),
            explained,
        ),
    }
}

#[cfg(test)]
#[path = "rt_permission_tests.rs"]
mod tests;
