//! One scheduling root domain per RT CPU, so that SCHED_DEADLINE's admission
//! (global per root domain) is per CPU and a deadline thread may be pinned
//! to its CPU (sched-deadline.rst §5; ARTiS §4: EDF per RT CPU). On cgroup
//! v1 the partition turns load balancing off at the root and in `rtmgr-rt`;
//! here each RT CPU gets a child cpuset `rtmgr-rt/cpuN`, CPU-exclusive with
//! load balancing on, which the kernel makes a root domain of its own. The
//! children are journalled in the partition journal (`CgroupCreated`), so
//! `rtmgr partition reset` removes them like the partition's own cpusets.
//!
//! cgroup v2 has no per-thread cpusets outside threaded subtrees and the RT
//! partition is `isolated`, whose CPUs share the kernel's default root
//! domain: there grants pin by affinity only, and a hard reservation works
//! when the RT set has one CPU (otherwise the kernel refuses to pin a
//! deadline thread and the daemon says so).

use crate::cgroup::{self, Layout};
use crate::host::{Host, HostError};
use crate::journal::{Journal, Record};
use crate::partition::Applied;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// The per-CPU cpusets, or why there are none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domains {
    pub dirs: BTreeMap<u32, PathBuf>,
    /// "per-cpu", or why the RT CPUs share a root domain.
    pub note: String,
}

impl Domains {
    pub fn dir(&self, cpu: u32) -> Option<&PathBuf> {
        self.dirs.get(&cpu)
    }
}

/// Make (or find, after a restart) `rtmgr-rt/cpuN` for every RT CPU.
pub fn ensure(host: &Host, applied: &Applied) -> Result<Domains, HostError> {
    let Layout::V1(_) = applied.layout else {
        let note = if applied.plan.rt.len() == 1 {
            "one RT CPU: its isolated partition is its own root domain (cgroup v2)".into()
        } else {
            "cgroup v2: the RT CPUs share one root domain; grants pin by affinity, and the kernel refuses to pin SCHED_DEADLINE threads (use class rt1, or one RT CPU)".into()
        };
        return Ok(Domains {
            dirs: BTreeMap::new(),
            note,
        });
    };
    let mems = cgroup::root_mems(host, &applied.layout);
    let mut dirs = BTreeMap::new();
    for cpu in applied.plan.rt.iter() {
        let dir = applied.rt_cgroup.join(format!("cpu{cpu}"));
        if !host.exists(&dir) {
            Journal::append_to(host, &applied.journal)?
                .record(&Record::CgroupCreated { path: dir.clone() })?;
            cgroup::create(host, &applied.layout, &dir)?;
        }
        // A CPU that went offline and came back is missing from cpuset.cpus (v1).
        cgroup::configure_v1(host, &dir, &rtmgr_core::CpuSet::single(cpu), &mems)?;
        let _ = host.write(dir.join("cpuset.cpu_exclusive"), "1");
        let _ = host.write(dir.join("cpuset.sched_load_balance"), "1");
        dirs.insert(cpu, dir);
    }
    Ok(Domains {
        dirs,
        note: "per-cpu".into(),
    })
}

/// Rebuild the root domain of one RT CPU's cpuset (cgroup v1): its load
/// balancing flag off and on again makes the kernel rebuild the scheduling
/// domains, and with them recount each root domain's SCHED_DEADLINE
/// bandwidth from the deadline tasks it finds — which gives back bandwidth
/// the kernel leaked (docs/kernel-dl-bandwidth-leak.md). Costs two domain
/// rebuilds (about 2 ms each here). The flag is put back even when turning
/// it off failed half-way.
pub fn rebuild(host: &Host, dir: &std::path::Path) -> Result<(), HostError> {
    let flag = dir.join("cpuset.sched_load_balance");
    let off = host.write(&flag, "0");
    let on = host.write(&flag, "1").or_else(|_| host.write(&flag, "1"));
    off.and(on)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    const CPU1: &str = "/sys/fs/cgroup/cpuset/rtmgr-rt/cpu1";

    #[test]
    fn rebuild_leaves_load_balancing_on() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        std::fs::create_dir_all(host.path(Path::new(CPU1))).unwrap();
        let flag = Path::new(CPU1).join("cpuset.sched_load_balance");
        host.write(&flag, "1").unwrap();
        rebuild(&host, Path::new(CPU1)).unwrap();
        assert_eq!(host.read(&flag).unwrap().trim(), "1");
    }

    #[test]
    fn rebuild_of_a_missing_cpuset_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        assert!(rebuild(&host, Path::new(CPU1)).is_err());
    }
}
