//! Tasks joining an applied partition after `apply` (ARTiS §2.4: the helper
//! program that makes a task RT0): a process put into the RT or NRT set is
//! journalled so `reset` moves it back; one thread of rtmgr itself (a probe)
//! joins the RT cpuset where the layout allows it.

use super::{tasks::narrow_affinity, Applied, Result, Role};
use crate::cgroup::{self, Layout};
use crate::journal::{Journal, Record};
use crate::tasks;
use crate::Host;
use rtmgr_core::CpuSet;
use std::path::PathBuf;

/// Put a process (all its threads) into the RT or NRT set of an applied
/// partition, journalled so that `reset` moves it back.
pub fn enter(host: &Host, applied: &Applied, role: Role, pid: u32) -> Result<()> {
    let dir = match (role, &applied.nrt_cgroup) {
        (Role::Rt, _) => applied.rt_cgroup.clone(),
        (Role::Nrt, Some(d)) => d.clone(),
        // v2: the NRT set is every cgroup outside the RT partition.
        (Role::Nrt, None) => {
            for tid in tasks::threads_of(host, pid) {
                narrow_affinity(host, tid, &applied.plan.rt, &applied.plan.nrt)?;
            }
            return Ok(());
        }
    };
    record_entered(host, applied, pid, pid)?;
    match applied.layout {
        Layout::V1(_) => {
            for tid in tasks::threads_of(host, pid) {
                match cgroup::attach(host, &applied.layout, &dir, tid) {
                    Err(e) if !e.is_gone() => return Err(e.into()),
                    _ => {}
                }
            }
        }
        Layout::V2(_) => cgroup::attach(host, &applied.layout, &dir, pid)?,
    }
    Ok(())
}

/// Journal that `pid` enters an rtmgr cpuset, coming from the cgroup that
/// `origin` is in now (`reset` returns it there): the process itself before
/// it moves, or the parent of a child that joined before exec (`rtmgr run`).
pub fn record_entered(host: &Host, applied: &Applied, pid: u32, origin: u32) -> Result<()> {
    let start_time = tasks::info(host, pid, pid)
        .map(|t| t.start_time)
        .unwrap_or(0);
    let mut j = Journal::append_to(host, &applied.journal)?;
    j.record(&Record::Entered {
        pid,
        start_time,
        from: cgroup::task_cgroup(host, &applied.layout, origin),
    })?;
    Ok(())
}

/// Put one thread of this process into the RT or NRT set: on cgroup v1 that
/// thread alone moves (not journalled: it belongs to rtmgr, which restores its
/// own threads); v2 moves whole processes only, so this process enters (journalled).
pub fn enter_thread(host: &Host, applied: &Applied, role: Role, tid: u32) -> Result<()> {
    match (&applied.layout, role, &applied.nrt_cgroup) {
        (Layout::V1(_), Role::Rt, _) => Ok(cgroup::attach(
            host,
            &applied.layout,
            &applied.rt_cgroup,
            tid,
        )?),
        (Layout::V1(_), Role::Nrt, Some(d)) => Ok(cgroup::attach(host, &applied.layout, d, tid)?),
        _ => enter(host, applied, role, std::process::id()),
    }
}

/// Which set a task with these CPUs belongs in; None when they span both.
pub fn role_of(applied: &Applied, cpus: &CpuSet) -> Option<Role> {
    if cpus.is_subset(&applied.plan.rt) {
        Some(Role::Rt)
    } else if cpus.is_subset(&applied.plan.nrt) {
        Some(Role::Nrt)
    } else {
        None
    }
}

/// The membership file (machine path) a new task with these CPUs writes
/// itself into before exec (`rtmgr run`), if any: its role's cpuset, or on v1
/// the root cpuset when it spans both sets.
pub fn membership_file(applied: &Applied, cpus: &CpuSet) -> Option<PathBuf> {
    let dir = match (role_of(applied, cpus), &applied.layout) {
        (Some(Role::Rt), _) => Some(applied.rt_cgroup.clone()),
        (Some(Role::Nrt), _) => applied.nrt_cgroup.clone(),
        (None, Layout::V1(mount)) => Some(mount.clone()),
        (None, Layout::V2(_)) => None,
    }?;
    Some(dir.join(match applied.layout {
        Layout::V1(_) => "tasks",
        Layout::V2(_) => "cgroup.procs",
    }))
}

/// Move a running process (all its threads) where tasks with these CPUs
/// belong: its role's set (journalled), or on v1 the root cpuset when the
/// CPUs span both sets.
pub fn place_process(host: &Host, applied: &Applied, pid: u32, cpus: &CpuSet) -> Result<()> {
    match role_of(applied, cpus) {
        Some(role) => enter(host, applied, role, pid),
        None => {
            if let Layout::V1(mount) = &applied.layout {
                for tid in tasks::threads_of(host, pid) {
                    cgroup::attach(host, &applied.layout, mount, tid)?;
                }
            }
            Ok(())
        }
    }
}
