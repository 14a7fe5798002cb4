//! rtmgr cgroups left without their journal (the journal deleted, or a
//! test's private journal gone with its directory): `partition reset` empties
//! them into the mount's root and removes them, and says that what else that
//! partition changed has no record to be restored from (DROPS §4.1: the
//! manager owns what it created, even when its record is lost).

use super::{cgroup_dir, layout, ResetReport, Result, Role};
use crate::cgroup;
use crate::Host;

/// Remove the orphaned `rtmgr-rt`/`rtmgr-nrt` cgroups, if any.
pub(super) fn remove(host: &Host, report: &mut ResetReport) -> Result<()> {
    let Ok(layout) = layout(host) else {
        return Ok(());
    };
    let root = layout.mount().to_path_buf();
    let mut problems = Vec::new();
    for role in [Role::Rt, Role::Nrt] {
        let dir = cgroup_dir(&layout, role);
        if !host.exists(&dir) {
            continue;
        }
        // Tasks may fork while they are moved: a few passes.
        for _ in 0..4 {
            let ids = cgroup::members(host, &layout, &dir);
            if ids.is_empty() {
                break;
            }
            for id in ids {
                if let Err(e) = cgroup::attach(host, &layout, &root, id) {
                    if !e.is_gone() && !cgroup::is_refused(&e) {
                        problems.push(format!("task {id} out of {}: {e}", dir.display()));
                    }
                }
            }
        }
        match host.rmdir(&dir) {
            Ok(()) => report.cgroups_removed.push(cgroup::rel_path(&layout, &dir)),
            Err(e) => problems.push(format!("remove {}: {e}", dir.display())),
        }
    }
    if report.cgroups_removed.is_empty() && problems.is_empty() {
        return Ok(());
    }
    report.had_partition = true;
    report.notes.push(
        "no journal: the rtmgr cgroups were emptied into the root and removed; what else \
         that partition changed (IRQ masks, workqueue masks, sysctls, affinities narrowed \
         outside the cpusets) has no record and was left as it is"
            .into(),
    );
    if problems.is_empty() {
        Ok(())
    } else {
        Err(super::PartitionError::Incomplete(problems.join("; ")))
    }
}
