//! cgroup v2 and lending (ARTiS §2.2 guests on an unpatched kernel): an
//! `isolated` or `root` cpuset partition takes the RT CPUs out of every other
//! cgroup, so no thread outside it can be pinned there. While the balancer
//! runs, the RT cpuset is made a plain `member` (NRT tasks stay off the RT
//! CPUs by their affinity, which the partition set); it is restored when the
//! balancer stops. v1 needs nothing: a guest moves to the root cpuset.

use crate::cgroup::Layout;
use crate::host::{Host, HostError};
use crate::partition::Applied;
use std::path::PathBuf;

/// The RT cpuset turned into a `member` for as long as this lives.
pub struct MemberWhileLending {
    host: Host,
    file: PathBuf,
    old: String,
}

impl MemberWhileLending {
    /// On cgroup v2 with the RT cpuset an exclusive partition, make it a
    /// member; None when there is nothing to do (v1, no partition file, or
    /// not a valid partition).
    pub fn open(host: &Host, applied: &Applied) -> Result<Option<Self>, HostError> {
        let Layout::V2(_) = applied.layout else {
            return Ok(None);
        };
        let file = applied.rt_cgroup.join("cpuset.cpus.partition");
        let Some(text) = host.read_opt(&file) else {
            return Ok(None);
        };
        // "isolated", "root", "member", or "isolated invalid (…)".
        let mut words = text.split_whitespace();
        let (mode, valid) = (words.next().unwrap_or(""), words.next().is_none());
        if !valid || !(mode == "isolated" || mode == "root") {
            return Ok(None);
        }
        host.write(&file, "member")?;
        Ok(Some(MemberWhileLending {
            host: host.clone(),
            file,
            old: mode.to_string(),
        }))
    }

    /// The partition mode restored at the end.
    pub fn restores(&self) -> &str {
        &self.old
    }
}

impl Drop for MemberWhileLending {
    fn drop(&mut self) {
        if let Err(e) = self.host.write(&self.file, &self.old) {
            tracing::error!("balance: could not restore {}: {e}", self.file.display());
            eprintln!(
                "rtmgr: balance: could not make the RT cpuset '{}' again ({}): {e}; `rtmgr partition reset` clears it",
                self.old,
                self.file.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::{FakeCgroup, FakeMachine};
    use crate::partition::{self, ApplyOptions};
    use rtmgr_core::partition::{validate, PartitionConfig};
    use rtmgr_core::CpuSet;

    fn applied(kind: FakeCgroup) -> (FakeMachine, Applied) {
        let m = FakeMachine::new(2).cgroup(kind).typical_tasks().build();
        let host = m.host();
        let online: CpuSet = [0, 1].into_iter().collect();
        let plan = validate(
            &PartitionConfig {
                rt_cpus: Some(CpuSet::single(1)),
                ..Default::default()
            },
            None,
            &online,
        )
        .unwrap();
        let opts = ApplyOptions {
            journal: m.root().join("run/rtmgr/journal"),
            replace: false,
        };
        let (a, _) = partition::apply(&host, &plan, &opts).unwrap();
        (m, a)
    }

    #[test]
    fn v2_partition_is_a_member_while_lending_and_restored_after() {
        let (m, a) = applied(FakeCgroup::V2);
        let host = m.host();
        let file = a.rt_cgroup.join("cpuset.cpus.partition");
        assert_eq!(host.read(&file).unwrap().trim(), "isolated");
        {
            let l = MemberWhileLending::open(&host, &a)
                .unwrap()
                .expect("v2 partition");
            assert_eq!(l.restores(), "isolated");
            assert_eq!(host.read(&file).unwrap().trim(), "member");
        }
        assert_eq!(host.read(&file).unwrap().trim(), "isolated");
    }

    #[test]
    fn v1_and_invalid_partitions_are_left_alone() {
        let (m, a) = applied(FakeCgroup::V1);
        assert!(MemberWhileLending::open(&m.host(), &a).unwrap().is_none());
        let (m, a) = applied(FakeCgroup::V2);
        let host = m.host();
        let file = a.rt_cgroup.join("cpuset.cpus.partition");
        host.write(
            &file,
            "isolated invalid (cpu list in cpuset.cpus not exclusive)",
        )
        .unwrap();
        assert!(MemberWhileLending::open(&host, &a).unwrap().is_none());
    }
}
