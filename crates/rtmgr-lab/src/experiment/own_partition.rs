//! What an engine that applies and resets its own partition checks and takes
//! first (issue 14: `measure cost`, `evaluate --ablate`; the same rules as
//! `rtmgr evaluate`): at least two online CPUs, the RT CPU (given, or the one
//! the kernel leaves most alone, ARTiS §2.1), a valid plan, the machine lock,
//! no partition applied already, and a clean preflight. Nothing is changed.

use super::{bad_input, Error, Result};
use rtmgr_core::partition::{validate, PartitionConfig, PartitionPlan};
use rtmgr_core::CpuSet;
use rtmgr_linux::journal::DEFAULT_JOURNAL;
use rtmgr_linux::lock::MachineLock;
use rtmgr_linux::machine_access::machine_lock;
use rtmgr_linux::partition::{self, ApplyOptions};
use rtmgr_linux::Host;
use std::path::PathBuf;

/// The checked set-up, holding the machine lock while alive.
pub struct OwnPartition {
    pub online: CpuSet,
    pub rt_cpu: u32,
    pub plan: PartitionPlan,
    pub opts: ApplyOptions,
    _lock: Option<MachineLock>,
}

/// Check and take the machine for `what` (e.g. "measure cost").
pub fn prepare(host: &Host, what: &str, rt_cpu: Option<u32>) -> Result<OwnPartition> {
    let online = rtmgr_linux::cpus::online(host)?;
    if online.len() < 2 {
        return bad_input(format!(
            "{what} needs at least 2 online CPUs (one RT, one NRT); online: {online}"
        ));
    }
    let rt_cpu = match rt_cpu {
        Some(c) => c,
        None => {
            rtmgr_linux::unmovable::choose_rt_cpus(host, 1, rtmgr_linux::unmovable::SAMPLE_WINDOW)
                .map_err(|e| Error::Failed(format!("choosing the RT CPU: {e}")))?
                .rt
                .first()
                .expect("one CPU")
        }
    };
    let plan = validate(
        &PartitionConfig::default(),
        Some(&CpuSet::single(rt_cpu)),
        &online,
    )
    .or_else(|e| bad_input(e.to_string()))?;
    let journal = PathBuf::from(DEFAULT_JOURNAL);
    let lock = machine_lock(host)?;
    if let Some(a) = partition::current(host, &journal)? {
        return bad_input(format!(
            "a partition is already applied (RT CPUs {}): {what} applies and resets its own; run `rtmgr partition reset` first",
            a.plan.rt
        ));
    }
    let opts = ApplyOptions {
        journal,
        replace: false,
    };
    if let Err(e) = partition::preflight(host, &opts) {
        return bad_input(format!("cannot apply the partition of {what}: {e}"));
    }
    Ok(OwnPartition {
        online,
        rt_cpu,
        plan,
        opts,
        _lock: lock,
    })
}
