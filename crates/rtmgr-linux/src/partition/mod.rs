//! Applying and undoing a CPU partition (ARTiS §2.1/§2.4; DROPS §4.1; McKenney
//! §2.1): create the RT and NRT cpusets, move every movable task and IRQ to the
//! NRT CPUs, and journal the old state first so `reset` restores it exactly,
//! also after a `kill -9` at any point. The order keeps the machine usable at
//! every step: nothing is ever confined to fewer CPUs than the NRT set.
//!
//! Callers that change the machine hold the machine lock (`crate::lock`).
//! Each thing a partition changes is one knob (`knob.rs`), applied in the
//! order of `KNOBS` and undone in reverse by `reset`.

mod block;
mod cpufreq;
mod cpuidle;
mod cpusets;
mod defaults;
mod favordynmods;
mod files;
mod guard;
pub mod irqbalance;
mod irqs;
mod knob;
mod members;
mod orphans;
mod preempt;
mod reset;
mod rps;
mod stat_interval;
mod sysctl;
mod tasks;
mod timer_migration;
mod verify;
mod watchdog;
mod workqueues;

pub use guard::PartitionGuard;
pub use members::{enter, enter_thread, membership_file, place_process, record_entered, role_of};
pub use preempt::switchable as preempt_switchable;
pub use reset::reset;
pub use verify::{enabled_knobs, repair, verify, verify_some};

use crate::cgroup::{self, Layout};
use crate::host::{Host, HostError};
use crate::journal::{self, Journal, Record};
use knob::{ApplyCx, Knob, PreviewCx};
use rtmgr_core::partition::{boot, ApplyReport, KnobId, KnobReport, PartitionPlan};
use std::path::{Path, PathBuf};

/// The knobs of a partition, in the order `apply` runs them (`reset` undoes
/// them in reverse). Each name is also a crash-test point after its knob.
const KNOBS: &[&dyn Knob] = &[
    &cpusets::Cpusets,
    &tasks::Tasks,
    &irqbalance::Irqbalance,
    &irqs::Irqs,
    &defaults::Defaults,
    &workqueues::Workqueues,
    &rps::Rps,
    &block::Block,
    &timer_migration::TIMER_MIGRATION,
    &stat_interval::STAT_INTERVAL,
    &watchdog::WATCHDOG,
    &cpuidle::Cpuidle,
    &cpufreq::Cpufreq,
    &preempt::Preempt,
    &favordynmods::Favordynmods,
];

pub const CGROUP_PREFIX: &str = "rtmgr";

#[derive(Debug, thiserror::Error)]
pub enum PartitionError {
    #[error("a partition is already applied (journal {0}): run `rtmgr partition reset` first, or pass --replace")]
    AlreadyApplied(PathBuf),
    #[error("no cpuset controller: neither a cgroup v1 cpuset mount nor a cgroup v2 mount offering the cpuset controller (see `rtmgr status`)")]
    NoCpuset,
    #[error("cgroup {0} already exists: left over by another tool or an older rtmgr; remove it (rmdir) or run `rtmgr partition reset`")]
    CgroupExists(PathBuf),
    #[error("journal {0} has no Begin record: it is not an rtmgr partition journal")]
    BadJournal(PathBuf),
    #[error("reset left problems behind (journal kept, run reset again): {0}")]
    Incomplete(String),
    #[error("{0}")]
    Irqbalance(String),
    #[error(transparent)]
    Host(#[from] HostError),
}

pub type Result<T> = std::result::Result<T, PartitionError>;

#[derive(Debug, Clone)]
pub struct ApplyOptions {
    pub journal: PathBuf,
    /// Reset an existing partition first instead of refusing.
    pub replace: bool,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions {
            journal: PathBuf::from(journal::DEFAULT_JOURNAL),
            replace: false,
        }
    }
}

/// The two sets of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Rt,
    Nrt,
}

/// A partition as recorded in its journal.
#[derive(Debug, Clone)]
pub struct Applied {
    pub plan: PartitionPlan,
    pub layout: Layout,
    pub rt_cgroup: PathBuf,
    pub nrt_cgroup: Option<PathBuf>,
    /// False when apply was interrupted: only `reset` is sensible then.
    pub complete: bool,
    pub report: Option<ApplyReport>,
    pub journal: PathBuf,
}

/// What `reset` did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ResetReport {
    pub had_partition: bool,
    pub irqs_restored: usize,
    pub tasks_restored: usize,
    pub cgroups_removed: Vec<String>,
    pub notes: Vec<String>,
}

/// Kill this process with SIGKILL at a named point when the crash test asks
/// for it (environment RTMGR_TEST_CRASH_AT=<point>): the `kill -9` of the tests.
fn crash_point(name: &str) {
    if std::env::var("RTMGR_TEST_CRASH_AT").as_deref() == Ok(name) {
        rtmgr_sys::process::kill_self();
    }
}

/// Which cpuset layout rtmgr will use here.
pub fn layout(host: &Host) -> Result<Layout> {
    cgroup::mounts(host)?
        .layout()
        .ok_or(PartitionError::NoCpuset)
}

/// Checks that need no change: cpuset controller, no partition yet, no stray cgroup.
pub fn preflight(host: &Host, opts: &ApplyOptions) -> Result<Layout> {
    let layout = layout(host)?;
    if !opts.replace && host.path(&opts.journal).exists() {
        return Err(PartitionError::AlreadyApplied(opts.journal.clone()));
    }
    if !opts.replace {
        for role in [Role::Rt, Role::Nrt] {
            let dir = cgroup_dir(&layout, role);
            if host.exists(&dir) {
                return Err(PartitionError::CgroupExists(dir));
            }
        }
    }
    Ok(layout)
}

fn cgroup_dir(layout: &Layout, role: Role) -> PathBuf {
    let name = match role {
        Role::Rt => format!("{CGROUP_PREFIX}-rt"),
        Role::Nrt => format!("{CGROUP_PREFIX}-nrt"),
    };
    layout.mount().join(name)
}

/// Apply a validated plan. Everything is journalled before it changes.
pub fn apply(
    host: &Host,
    plan: &PartitionPlan,
    opts: &ApplyOptions,
) -> Result<(Applied, ApplyReport)> {
    let layout = preflight(host, opts)?;
    for knob in KNOBS.iter().filter(|k| plan.enabled(k.id())) {
        knob.preflight(host, plan)?;
    }
    if opts.replace && current(host, &opts.journal)?.is_some() {
        reset(host, &opts.journal)?;
    }
    let mut j = Journal::create(host, &opts.journal)?;
    match apply_journalled(host, &mut j, plan, opts, layout) {
        Ok(r) => Ok(r),
        Err(e) => {
            // Roll back whatever was done; the original error is what matters.
            if let Err(re) = reset(host, &opts.journal) {
                tracing::error!("rollback after failed apply: {re}");
            }
            Err(e)
        }
    }
}

fn apply_journalled(
    host: &Host,
    j: &mut Journal,
    plan: &PartitionPlan,
    opts: &ApplyOptions,
    layout: Layout,
) -> Result<(Applied, ApplyReport)> {
    let rt_dir = cgroup_dir(&layout, Role::Rt);
    let nrt_dir = match layout {
        Layout::V1(_) => Some(cgroup_dir(&layout, Role::Nrt)),
        Layout::V2(_) => None,
    };
    j.record(&Record::Begin {
        version: journal::JOURNAL_VERSION,
        plan: plan.clone(),
        layout: layout.clone(),
        rt_cgroup: rt_dir.clone(),
        nrt_cgroup: nrt_dir.clone(),
    })?;
    crash_point("begin");
    let mut report = ApplyReport {
        layout: layout.name().into(),
        rt_cgroup: rt_dir.display().to_string(),
        nrt_cgroup: nrt_dir.as_ref().map(|d| d.display().to_string()),
        ..Default::default()
    };
    let mut cx = ApplyCx {
        host,
        journal: j,
        plan,
        layout: &layout,
        rt_dir: &rt_dir,
        nrt_dir: nrt_dir.as_deref(),
        report: &mut report,
    };
    for knob in KNOBS.iter().filter(|k| plan.enabled(k.id())) {
        cx.report.knobs.push(KnobReport {
            knob: knob.id(),
            available: true,
            lines: Vec::new(),
        });
        knob.apply(&mut cx)?;
        crash_point(knob.name());
    }
    say_what_stays(host, plan, &mut report);
    j.record(&Record::Applied {
        report: report.clone(),
    })?;
    let applied = current(host, &opts.journal)?
        .ok_or_else(|| PartitionError::BadJournal(opts.journal.clone()))?;
    Ok((applied, report))
}

/// One knob as `apply --explain` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KnobExplained {
    pub knob: KnobId,
    /// Selected by the plan (the config's `knobs`).
    pub enabled: bool,
    /// What it is for.
    pub explain: &'static str,
    /// What it would do on this machine.
    pub here: KnobReport,
}

/// What every knob is for and what it would do here under `plan`; changes nothing.
pub fn explain(host: &Host, plan: &PartitionPlan) -> Vec<KnobExplained> {
    let layout = layout(host).ok();
    let cx = PreviewCx {
        host,
        plan,
        layout: layout.as_ref(),
    };
    KNOBS
        .iter()
        .map(|k| KnobExplained {
            knob: k.id(),
            enabled: plan.enabled(k.id()),
            explain: k.explain(),
            here: k.preview(&cx),
        })
        .collect()
}

/// Every control file a knob may change on this machine, for snapshots.
pub fn watched_files(host: &Host) -> Vec<PathBuf> {
    KNOBS.iter().flat_map(|k| k.watched(host)).collect()
}

/// What no knob can move off the RT CPUs (kernel-managed interrupts, the
/// tick), with since-boot rates, and the boot options that would finish the job.
fn say_what_stays(host: &Host, plan: &PartitionPlan, report: &mut ApplyReport) {
    let hits = crate::unmovable::unmovable_irqs(host, std::time::Duration::ZERO);
    report.unmovable_irqs = hits
        .unwrap_or_default()
        .into_iter()
        .filter(|h| plan.rt.contains(h.cpu))
        .collect();
    let cmdline = host.read_opt("/proc/cmdline").unwrap_or_default();
    report.boot = boot::boot_options(&plan.rt, &plan.nrt, &cmdline);
}

/// The partition recorded in a journal, if any.
pub fn current(host: &Host, journal_path: &Path) -> Result<Option<Applied>> {
    let Some(records) = journal::read(host, journal_path)? else {
        return Ok(None);
    };
    let mut applied = None;
    for r in &records {
        match r {
            Record::Begin {
                plan,
                layout,
                rt_cgroup,
                nrt_cgroup,
                ..
            } => {
                applied = Some(Applied {
                    plan: plan.clone(),
                    layout: layout.clone(),
                    rt_cgroup: rt_cgroup.clone(),
                    nrt_cgroup: nrt_cgroup.clone(),
                    complete: false,
                    report: None,
                    journal: journal_path.to_path_buf(),
                })
            }
            Record::Applied { report } => {
                if let Some(a) = applied.as_mut() {
                    a.complete = true;
                    a.report = Some(report.clone());
                }
            }
            _ => {}
        }
    }
    match applied {
        Some(a) => Ok(Some(a)),
        None if records.is_empty() => Ok(None),
        None => Err(PartitionError::BadJournal(journal_path.to_path_buf())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_knob_once_in_the_core_order_with_an_explanation() {
        let ids: Vec<KnobId> = KNOBS.iter().map(|k| k.id()).collect();
        assert_eq!(ids, KnobId::all());
        for k in KNOBS {
            assert_eq!(k.name(), k.id().name());
            assert!(
                k.explain().len() > 200,
                "{}: explain in a paragraph",
                k.name()
            );
        }
    }
}
