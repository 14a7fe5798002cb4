//! Status items about the partition (ARTiS §2.1; DROPS §4.1): CPUs isolated at
//! boot, the cpuset controller rtmgr would use, and the partition rtmgr applied.

use super::{item, Item, Verdict};
use crate::host::Host;
use crate::{cgroup, cpus, partition};
use std::path::Path;

pub(super) fn isolation_item(host: &Host) -> Item {
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

pub(super) fn cgroup_item(host: &Host) -> Item {
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

pub(super) fn partition_item(host: &Host, journal: &Path) -> Item {
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
