//! Applying and undoing a CPU partition (ARTiS §2.1/§2.4; DROPS §4.1; McKenney
//! §2.1): create the RT and NRT cpusets, move every movable task and IRQ to the
//! NRT CPUs, and journal the old state first so `reset` restores it exactly,
//! also after a `kill -9` at any point. The order keeps the machine usable at
//! every step: nothing is ever confined to fewer CPUs than the NRT set.
//!
//! Callers that change the machine hold the machine lock (`crate::lock`).

use crate::cgroup::{self, Layout};
use crate::host::{Host, HostError};
use crate::journal::{self, Journal, Record, TaskBefore};
use crate::{cpus, irq, tasks};
use rtmgr_core::partition::{irq_target, ApplyReport, KthreadPolicy, PartitionPlan};
use rtmgr_core::CpuSet;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

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
        // SAFETY: sending a signal to ourselves; no memory involved.
        unsafe {
            libc::kill(libc::getpid(), libc::SIGKILL);
        }
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

    create_cpusets(
        host,
        j,
        &layout,
        plan,
        &rt_dir,
        nrt_dir.as_deref(),
        &mut report,
    )?;
    crash_point("cgroups");
    move_tasks(
        host,
        j,
        &layout,
        plan,
        &rt_dir,
        nrt_dir.as_deref(),
        &mut report,
    )?;
    crash_point("tasks");
    steer_irqs(host, j, plan, &mut report)?;
    crash_point("irqs");
    steer_defaults(host, j, plan, &mut report)?;
    crash_point("defaults");
    j.record(&Record::Applied {
        report: report.clone(),
    })?;
    let applied = current(host, &opts.journal)?
        .ok_or_else(|| PartitionError::BadJournal(opts.journal.clone()))?;
    Ok((applied, report))
}

fn create_cpusets(
    host: &Host,
    j: &mut Journal,
    layout: &Layout,
    plan: &PartitionPlan,
    rt_dir: &Path,
    nrt_dir: Option<&Path>,
    report: &mut ApplyReport,
) -> Result<()> {
    match layout {
        Layout::V1(mount) => {
            let mems = cgroup::root_mems(host, layout);
            if let Some(nrt) = nrt_dir {
                j.record(&Record::CgroupCreated { path: nrt.into() })?;
                cgroup::create(host, layout, nrt)?;
                cgroup::configure_v1(host, nrt, &plan.nrt, &mems)?;
            }
            j.record(&Record::CgroupCreated {
                path: rt_dir.into(),
            })?;
            cgroup::create(host, layout, rt_dir)?;
            cgroup::configure_v1(host, rt_dir, &plan.rt, &mems)?;
            if host
                .write(rt_dir.join("cpuset.cpu_exclusive"), "1")
                .is_err()
            {
                report
                    .notes
                    .push("could not make the RT cpuset CPU-exclusive".into());
            }
            // Like `cset shield`: no load balancing across the root, none on the
            // RT set, so the scheduler never pulls tasks onto the RT CPUs.
            let slb = mount.join("cpuset.sched_load_balance");
            if let Some(old) = host.read_opt(&slb) {
                j.record(&Record::File {
                    path: slb.clone(),
                    old: old.trim().into(),
                })?;
                host.write(&slb, "0")?;
                let _ = host.write(rt_dir.join("cpuset.sched_load_balance"), "0");
            }
        }
        Layout::V2(mount) => {
            let ctl = mount.join("cgroup.subtree_control");
            let enabled = host.read_opt(&ctl).unwrap_or_default();
            if !enabled.split_whitespace().any(|c| c == "cpuset") {
                j.record(&Record::ControllerEnabled { path: ctl.clone() })?;
                host.write(&ctl, "+cpuset")?;
            }
            j.record(&Record::CgroupCreated {
                path: rt_dir.into(),
            })?;
            cgroup::create(host, layout, rt_dir)?;
            match cgroup::configure_v2_partition(host, rt_dir, &plan.rt)? {
                Some(state) => {
                    report.partition_state = Some(state.actual.clone());
                    if !state.valid() {
                        report.notes.push(format!(
                            "the kernel did not accept the RT cpuset as a partition ({}); RT CPUs are kept clear by task affinity only",
                            state.actual
                        ));
                    }
                }
                None => report.notes.push(
                    "this kernel has no cpuset.cpus.partition (cgroup v2 partitions need Linux 5.11+): RT CPUs are kept clear by task affinity only".into(),
                ),
            }
        }
    }
    Ok(())
}

/// Tasks that fork while we move their parents can escape one pass, so
/// passes repeat over the tasks not seen yet until none is new.
const MAX_TASK_PASSES: usize = 8;

fn move_tasks(
    host: &Host,
    j: &mut Journal,
    layout: &Layout,
    plan: &PartitionPlan,
    rt_dir: &Path,
    nrt_dir: Option<&Path>,
    report: &mut ApplyReport,
) -> Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for pass in 0..MAX_TASK_PASSES {
        let fresh: Vec<tasks::TaskInfo> = tasks::all(host)?
            .into_iter()
            .filter(|t| !seen.contains(&(t.tid, t.start_time)))
            .collect();
        if fresh.is_empty() {
            return Ok(());
        }
        seen.extend(fresh.iter().map(|t| (t.tid, t.start_time)));
        move_task_batch(
            host,
            j,
            layout,
            plan,
            rt_dir,
            nrt_dir,
            report,
            &fresh,
            pass == 0,
        )?;
    }
    report.notes.push(format!(
        "tasks were still being created after {MAX_TASK_PASSES} passes; the newest may keep RT CPUs"
    ));
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn move_task_batch(
    host: &Host,
    j: &mut Journal,
    layout: &Layout,
    plan: &PartitionPlan,
    rt_dir: &Path,
    nrt_dir: Option<&Path>,
    report: &mut ApplyReport,
    all: &[tasks::TaskInfo],
    first_pass: bool,
) -> Result<()> {
    let mut before = Vec::with_capacity(all.len());
    for t in all {
        if let Ok(aff) = host.get_affinity(t.tid) {
            before.push(TaskBefore {
                tid: t.tid,
                start_time: t.start_time,
                cgroup: cgroup::task_cgroup(host, layout, t.tid),
                affinity: aff,
            });
        }
    }
    j.record(&Record::Tasks {
        tasks: before.clone(),
    })?;
    let rt_rel = cgroup::rel_path(layout, rt_dir);
    let by_tid: BTreeMap<u32, &TaskBefore> = before.iter().map(|b| (b.tid, b)).collect();
    let half = all.len() / 2;
    for (i, t) in all.iter().enumerate() {
        if i == half && first_pass {
            crash_point("tasks-half");
        }
        let label = format!("{} {}", t.tid, t.comm);
        if t.kthread && plan.kernel_threads == KthreadPolicy::Leave {
            report.skip("kernel thread (kernel_threads = \"leave\")", label);
            continue;
        }
        if t.no_setaffinity {
            report.skip("per-CPU kernel thread: the kernel forbids moving it", label);
            continue;
        }
        let Some(b) = by_tid.get(&t.tid) else {
            continue;
        };
        if b.cgroup.as_deref() == Some(rt_rel.as_str()) {
            continue;
        }
        // v1: tasks of the root cpuset join the NRT cpuset.
        if let (Layout::V1(_), Some(nrt)) = (layout, nrt_dir) {
            if b.cgroup.as_deref() == Some("/") {
                match cgroup::attach(host, layout, nrt, t.tid) {
                    Ok(()) => {}
                    Err(e) if e.is_gone() => continue,
                    // kthreadd and a few others may not change cpuset; their
                    // affinity still can (new kernel threads inherit kthreadd's).
                    Err(e) => report.notes.push(format!(
                        "task {label} stays in the root cpuset (the kernel refuses: {}); its affinity is narrowed instead",
                        e.errno().map(|n| std::io::Error::from_raw_os_error(n).to_string()).unwrap_or_else(|| e.to_string())
                    )),
                }
            } else {
                report.notes.push(format!(
                    "task {label} is in another cpuset ({}); its affinity is narrowed instead",
                    b.cgroup.as_deref().unwrap_or("?")
                ));
            }
        }
        // Both layouts: no movable task keeps an RT CPU in its affinity.
        match narrow_affinity(host, t.tid, &plan.rt, &plan.nrt) {
            Ok(_) => {
                report.tasks_moved += 1;
                if b.affinity.is_subset(&plan.rt) {
                    report.notes.push(format!(
                        "task {label} was pinned to RT CPUs only; moved to the NRT CPUs (use `rtmgr run --pid` to make it an RT task)"
                    ));
                }
            }
            Err(e) if e.is_gone() => {}
            Err(e) => report.skip(
                "the kernel refused a new affinity",
                format!("{label} ({e})"),
            ),
        }
    }
    Ok(())
}

/// Remove the RT CPUs from a task's affinity (all NRT CPUs if nothing is left).
fn narrow_affinity(
    host: &Host,
    tid: u32,
    rt: &CpuSet,
    nrt: &CpuSet,
) -> std::result::Result<(), HostError> {
    let aff = host.get_affinity(tid)?;
    if aff.is_disjoint(rt) {
        return Ok(());
    }
    let rest = aff.difference(rt);
    host.set_affinity(tid, if rest.is_empty() { nrt } else { &rest })
}

fn steer_irqs(
    host: &Host,
    j: &mut Journal,
    plan: &PartitionPlan,
    report: &mut ApplyReport,
) -> Result<()> {
    let numbers = irq::numbers(host)?;
    let mut masks = Vec::with_capacity(numbers.len());
    for &n in &numbers {
        if let Ok(m) = irq::raw_mask(host, n) {
            masks.push((n, m));
        }
    }
    j.record(&Record::Irqs {
        masks: masks.clone(),
    })?;
    let half = masks.len() / 2;
    for (i, (n, raw)) in masks.iter().enumerate() {
        if i == half {
            crash_point("irqs-half");
        }
        let Some(target) = irq_target(plan, *n) else {
            report.skip("IRQ left alone by the config (irq.leave)", n.to_string());
            continue;
        };
        if CpuSet::parse_mask(raw).ok().as_ref() == Some(target) {
            report.irqs_moved.push(*n);
            continue;
        }
        match irq::set_affinity(host, *n, target) {
            Ok(()) => report.irqs_moved.push(*n),
            Err(e) if e.is_gone() => {}
            Err(e) => report.skip(
                "the kernel refused the new IRQ affinity (managed or per-CPU interrupt)",
                format!("{n} ({e})"),
            ),
        }
    }
    Ok(())
}

fn steer_defaults(
    host: &Host,
    j: &mut Journal,
    plan: &PartitionPlan,
    report: &mut ApplyReport,
) -> Result<()> {
    let old = irq::default_affinity_raw(host)?;
    j.record(&Record::File {
        path: irq::DEFAULT_AFFINITY.into(),
        old: old.clone(),
    })?;
    let words = old.split(',').count();
    host.write(irq::DEFAULT_AFFINITY, &plan.nrt.to_mask(words))?;
    if plan.workqueues {
        if let Some(old) = host.read_opt(cpus::WORKQUEUE_CPUMASK) {
            let old = old.trim().to_string();
            j.record(&Record::File {
                path: cpus::WORKQUEUE_CPUMASK.into(),
                old: old.clone(),
            })?;
            let words = old.split(',').count();
            if let Err(e) = host.write(cpus::WORKQUEUE_CPUMASK, &plan.nrt.to_mask(words)) {
                report
                    .notes
                    .push(format!("unbound workqueues not steered: {e}"));
            }
        } else {
            report
                .notes
                .push("no unbound-workqueue cpumask on this kernel".into());
        }
    }
    Ok(())
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
    let start_time = tasks::info(host, pid, pid)
        .map(|t| t.start_time)
        .unwrap_or(0);
    let mut j = Journal::append_to(host, &applied.journal)?;
    j.record(&Record::Entered {
        pid,
        start_time,
        from: cgroup::task_cgroup(host, &applied.layout, pid),
    })?;
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

/// Undo everything the journal records. Idempotent: with no journal it does
/// nothing; after a partial reset it finishes the job.
pub fn reset(host: &Host, journal_path: &Path) -> Result<ResetReport> {
    let mut rep = ResetReport::default();
    let Some(records) = journal::read(host, journal_path)? else {
        return Ok(rep);
    };
    rep.had_partition = true;
    let layout = records.iter().find_map(|r| match r {
        Record::Begin { layout, .. } => Some(layout.clone()),
        _ => None,
    });
    let Some(layout) = layout else {
        if records.is_empty() {
            journal::remove(host, journal_path)?;
            return Ok(rep);
        }
        return Err(PartitionError::BadJournal(journal_path.to_path_buf()));
    };
    let mut problems = Vec::new();

    // Phase A: files and IRQs, newest first.
    for r in records.iter().rev() {
        match r {
            Record::File { path, old } => {
                if let Err(e) = host.write(path, old) {
                    if !e.is_gone() {
                        problems.push(format!("restore {}: {e}", path.display()));
                    }
                }
            }
            Record::Irqs { masks } => {
                for (n, mask) in masks {
                    match irq::raw_mask(host, *n) {
                        Ok(now) if now == *mask => rep.irqs_restored += 1,
                        Ok(_) => match irq::write_raw_mask(host, *n, mask) {
                            Ok(()) => rep.irqs_restored += 1,
                            Err(e) => problems.push(format!("IRQ {n}: {e}")),
                        },
                        Err(_) => {} // IRQ gone (device removed)
                    }
                }
            }
            _ => {}
        }
    }

    // Phase B: tasks back to their cgroups, rtmgr cgroups removed.
    let snapshot: Vec<&TaskBefore> = records
        .iter()
        .filter_map(|r| match r {
            Record::Tasks { tasks } => Some(tasks.iter()),
            _ => None,
        })
        .flatten()
        .collect();
    let entered: Vec<(u32, u64, Option<String>)> = records
        .iter()
        .filter_map(|r| match r {
            Record::Entered {
                pid,
                start_time,
                from,
            } => Some((*pid, *start_time, from.clone())),
            _ => None,
        })
        .collect();
    let created: Vec<PathBuf> = records
        .iter()
        .filter_map(|r| match r {
            Record::CgroupCreated { path } => Some(path.clone()),
            _ => None,
        })
        .collect();
    let ours: Vec<String> = created
        .iter()
        .map(|p| cgroup::rel_path(&layout, p))
        .collect();
    for (pid, start, from) in &entered {
        if !tasks::same_task(host, *pid, *start) {
            continue;
        }
        let dest = from
            .as_deref()
            .filter(|f| !ours.iter().any(|o| o == f))
            .unwrap_or("/");
        move_process_back(host, &layout, *pid, dest);
    }
    for b in &snapshot {
        let Some(orig) = &b.cgroup else { continue };
        if !tasks::same_task(host, b.tid, b.start_time) {
            continue;
        }
        let now = cgroup::task_cgroup(host, &layout, b.tid);
        if now.as_deref() != Some(orig.as_str()) && ours.iter().any(|o| Some(o) == now.as_ref()) {
            let dest = layout.dir(orig);
            let id = match layout {
                Layout::V1(_) => b.tid,
                Layout::V2(_) => continue, // v2 moves whole processes: only `Entered` ones moved
            };
            if let Err(e) = cgroup::attach(host, &layout, &dest, id) {
                if !e.is_gone() {
                    problems.push(format!("task {} back to {orig}: {e}", b.tid));
                }
            }
        }
    }
    for dir in created.iter().rev() {
        match remove_cgroup(host, &layout, dir) {
            Ok(true) => rep.cgroups_removed.push(dir.display().to_string()),
            Ok(false) => {}
            Err(e) => problems.push(format!("remove {}: {e}", dir.display())),
        }
    }
    for r in records.iter().rev() {
        if let Record::ControllerEnabled { path } = r {
            if let Err(e) = host.write(path, "-cpuset") {
                rep.notes.push(format!(
                    "cpuset controller left enabled in {}: {e}",
                    path.display()
                ));
            }
        }
    }

    // Phase C: affinities, last (v1 attach and v2 partitions reset them).
    for b in &snapshot {
        if !tasks::same_task(host, b.tid, b.start_time) {
            continue;
        }
        match host.get_affinity(b.tid) {
            Ok(now) if now == b.affinity => rep.tasks_restored += 1,
            Ok(_) => match host.set_affinity(b.tid, &b.affinity) {
                Ok(()) => rep.tasks_restored += 1,
                Err(e) if e.is_gone() => {}
                Err(e) => problems.push(format!("task {} affinity {}: {e}", b.tid, b.affinity)),
            },
            Err(_) => {}
        }
    }

    if problems.is_empty() {
        journal::remove(host, journal_path)?;
        Ok(rep)
    } else {
        Err(PartitionError::Incomplete(problems.join("; ")))
    }
}

fn move_process_back(host: &Host, layout: &Layout, pid: u32, dest_rel: &str) {
    let dest = layout.dir(dest_rel);
    match layout {
        Layout::V1(_) => {
            for tid in tasks::threads_of(host, pid) {
                let _ = cgroup::attach(host, layout, &dest, tid);
            }
        }
        Layout::V2(_) => {
            let _ = cgroup::attach(host, layout, &dest, pid);
        }
    }
}

/// Empty a cgroup into its parent and remove it. Ok(false) if it was not there.
fn remove_cgroup(host: &Host, layout: &Layout, dir: &Path) -> std::result::Result<bool, HostError> {
    if !host.exists(dir) {
        return Ok(false);
    }
    let parent = dir.parent().unwrap_or(layout.mount()).to_path_buf();
    let mut last = None;
    for _ in 0..50 {
        for id in cgroup::members(host, layout, dir) {
            let _ = cgroup::attach(host, layout, &parent, id);
        }
        match host.rmdir(dir) {
            Ok(()) => return Ok(true),
            Err(e) if e.is_gone() => return Ok(false),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    Err(last.expect("loop ran"))
}

/// Applies a partition and resets it when dropped (also on panic): for
/// commands and tests that need a partition for a while.
pub struct PartitionGuard {
    host: Host,
    applied: Applied,
    report: ApplyReport,
    reset_done: bool,
}

impl PartitionGuard {
    pub fn apply(host: &Host, plan: &PartitionPlan, opts: &ApplyOptions) -> Result<Self> {
        match apply(host, plan, opts) {
            Ok((applied, report)) => Ok(PartitionGuard {
                host: host.clone(),
                applied,
                report,
                reset_done: false,
            }),
            Err(e) => Err(e),
        }
    }

    pub fn applied(&self) -> &Applied {
        &self.applied
    }

    pub fn report(&self) -> &ApplyReport {
        &self.report
    }

    /// Reset now and report errors (Drop resets too but can only log them).
    pub fn reset(mut self) -> Result<ResetReport> {
        self.reset_done = true;
        reset(&self.host, &self.applied.journal)
    }
}

impl Drop for PartitionGuard {
    fn drop(&mut self) {
        if !self.reset_done {
            if let Err(e) = reset(&self.host, &self.applied.journal) {
                tracing::error!("partition reset failed: {e}");
                eprintln!("rtmgr: partition reset failed: {e}; run `rtmgr partition reset`");
            }
        }
    }
}
