//! CPU topology as the kernel exposes it in sysfs: online CPUs, SMT siblings,
//! and the CPUs isolated at boot (isolcpus, nohz_full). ARTiS §2.1 partitions
//! these; McKenney §2.1 notes that SMT siblings share a core and disturb each other.

use crate::host::{Host, Result};
use rtmgr_core::CpuSet;

fn read_set(host: &Host, path: &str) -> Result<CpuSet> {
    let text = host.read(path)?;
    CpuSet::parse_list(&text).map_err(|e| host.parse_err(path, e.to_string()))
}

fn read_set_opt(host: &Host, path: &str) -> Option<CpuSet> {
    host.read_opt(path)
        .and_then(|t| CpuSet::parse_list(&t).ok())
}

/// CPUs currently online.
pub fn online(host: &Host) -> Result<CpuSet> {
    read_set(host, "/sys/devices/system/cpu/online")
}

/// CPUs that exist (online or not); read once per `Host`.
pub fn possible(host: &Host) -> Result<CpuSet> {
    host.possible_cpus(|| read_set(host, "/sys/devices/system/cpu/possible"))
}

/// Groups of SMT siblings (hyper-threads sharing one core), only groups of 2+.
pub fn smt_groups(host: &Host) -> Result<Vec<CpuSet>> {
    let mut groups: Vec<CpuSet> = Vec::new();
    for cpu in online(host)?.iter() {
        let path = format!("/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list");
        if let Some(set) = read_set_opt(host, &path) {
            if set.len() > 1 && !groups.contains(&set) {
                groups.push(set);
            }
        }
    }
    Ok(groups)
}

/// CPUs isolated from the scheduler at boot (`isolcpus=`), empty when none.
pub fn isolated(host: &Host) -> CpuSet {
    read_set_opt(host, "/sys/devices/system/cpu/isolated").unwrap_or_default()
}

/// CPUs running without the periodic tick (`nohz_full=`), empty when none.
pub fn nohz_full(host: &Host) -> CpuSet {
    read_set_opt(host, "/sys/devices/system/cpu/nohz_full").unwrap_or_default()
}

/// The unbound-workqueue CPU mask file, when the kernel has it.
pub const WORKQUEUE_CPUMASK: &str = "/sys/devices/virtual/workqueue/cpumask";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeMachine;

    #[test]
    fn reads_topology_from_a_fake_tree() {
        let m = FakeMachine::new(4).smt_pairs().build();
        let host = m.host();
        assert_eq!(online(&host).unwrap().to_list(), "0-3");
        let groups = smt_groups(&host).unwrap();
        assert_eq!(groups.len(), 2);
        assert_eq!(groups[0].to_list(), "0-1");
        assert!(isolated(&host).is_empty());
    }
}
