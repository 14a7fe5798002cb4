//! The tasks knob (ARTiS §2.1; McKenney §2.1): every movable task leaves the
//! RT CPUs — v1 moves the root cpuset's tasks into `rtmgr-nrt`, both layouts
//! narrow affinities — in passes until no new task appears. Undo puts tasks
//! back in their cgroups, and (after the cpusets are gone) their affinities.
//! Verify finds tasks allowed on RT and NRT CPUs at once (new ones, or an
//! affinity reset by hand); repair journals their affinity and narrows it.

use super::knob::{ApplyCx, Knob, PartitionKnobs, PreviewCx, RepairCx, UndoCx, VerifyCx};
use super::{crash_point, Result};
use crate::cgroup::{self, Layout};
use crate::drift::{Drift, Fix};
use crate::host::HostError;
use crate::journal::{Record, TaskBefore};
use crate::step::Step;
use crate::tasks;
use crate::Host;
use rtmgr_core::partition::{KnobId, KnobReport, KthreadPolicy};
use rtmgr_core::CpuSet;
use std::collections::{BTreeMap, BTreeSet};

/// Tasks that fork while we move their parents can escape one pass, so
/// passes repeat over the tasks not seen yet until none is new.
const MAX_TASK_PASSES: usize = 8;

pub(super) struct Tasks;

impl Step<PartitionKnobs> for Tasks {
    fn name(&self) -> &'static str {
        self.id().name()
    }

    fn apply(&self, cx: &mut ApplyCx<'_>) -> Result<()> {
        let mut seen = BTreeSet::new();
        for pass in 0..MAX_TASK_PASSES {
            let fresh: Vec<tasks::TaskInfo> = tasks::all(cx.host)?
                .into_iter()
                .filter(|t| !seen.contains(&(t.tid, t.start_time)))
                .collect();
            if fresh.is_empty() {
                let line = format!(
                    "{} tasks narrowed to the NRT CPUs {}",
                    cx.report.tasks_moved, cx.plan.nrt
                );
                cx.say(line);
                return Ok(());
            }
            seen.extend(fresh.iter().map(|t| (t.tid, t.start_time)));
            move_batch(cx, &fresh, pass == 0)?;
        }
        cx.report.notes.push(format!(
            "tasks were still being created after {MAX_TASK_PASSES} passes; the newest may keep RT CPUs"
        ));
        Ok(())
    }

    /// Tasks allowed on RT and NRT CPUs at once. Tasks pinned to RT CPUs
    /// only (RT0 tasks, guests of the balancer, the daemon's grants), this
    /// process, per-CPU kernel threads (and unbound ones when
    /// `kernel_threads = "leave"`) are left alone.
    fn verify(&self, cx: &VerifyCx<'_>) -> Vec<Drift> {
        let (host, plan) = (cx.host, &cx.applied.plan);
        let me = std::process::id();
        let mut out = Vec::new();
        // Affinity first (one syscall, no file opened): the daemon runs this
        // every `knob_verify_ms`, and almost every task is within one set;
        // only a task that spans both has its `stat` read.
        let all = tasks::pids(host).unwrap_or_default().into_iter();
        let threads = all.filter(|&pid| pid != me).flat_map(|pid| {
            tasks::threads_of(host, pid)
                .into_iter()
                .map(move |t| (pid, t))
        });
        for (pid, tid) in threads {
            let Ok(aff) = host.get_affinity(tid) else {
                continue;
            };
            if aff.is_disjoint(&plan.rt) || aff.is_disjoint(&plan.nrt) {
                continue;
            }
            let Some(t) = tasks::info(host, pid, tid) else {
                continue;
            };
            let left = t.kthread && plan.kernel_threads == KthreadPolicy::Leave;
            if t.no_setaffinity || left {
                continue;
            }
            out.push(Drift {
                knob: self.name(),
                what: format!("task {} {} may run on CPUs {aff}", t.tid, t.comm),
                fix: Fix::Task {
                    tid: t.tid,
                    start_time: t.start_time,
                    affinity: aff,
                },
            });
        }
        out
    }

    /// Processes put into an rtmgr cpuset later (`Entered`), then every task
    /// of the snapshot that sits in an rtmgr cgroup, back to where it was.
    fn undo(&self, cx: &mut UndoCx<'_>) -> Vec<String> {
        let mut problems = Vec::new();
        let (host, layout) = (cx.host, cx.layout);
        let ours: Vec<String> = cx
            .records
            .iter()
            .filter_map(|r| match r {
                Record::CgroupCreated { path } => Some(cgroup::rel_path(layout, path)),
                _ => None,
            })
            .collect();
        for r in cx.records {
            let Record::Entered {
                pid,
                start_time,
                from,
            } = r
            else {
                continue;
            };
            if !tasks::same_task(host, *pid, *start_time) {
                continue;
            }
            let dest = from
                .as_deref()
                .filter(|f| !ours.iter().any(|o| o == f))
                .unwrap_or("/");
            move_process_back(host, layout, *pid, dest);
        }
        for b in snapshot(cx.records) {
            let Some(orig) = &b.cgroup else { continue };
            if !tasks::same_task(host, b.tid, b.start_time) {
                continue;
            }
            let now = cgroup::task_cgroup(host, layout, b.tid);
            if now.as_deref() != Some(orig.as_str()) && ours.iter().any(|o| Some(o) == now.as_ref())
            {
                let id = match layout {
                    Layout::V1(_) => b.tid,
                    Layout::V2(_) => continue, // v2 moves whole processes: only `Entered` ones moved
                };
                if let Err(e) = cgroup::attach(host, layout, &layout.dir(orig), id) {
                    if !e.is_gone() {
                        problems.push(format!("task {} back to {orig}: {e}", b.tid));
                    }
                }
            }
        }
        problems
    }
}

impl Knob for Tasks {
    fn id(&self) -> KnobId {
        KnobId::Tasks
    }

    fn explain(&self) -> &'static str {
        "Every movable task leaves the RT CPUs (ARTiS §2.1: Linux tasks run on the NRT CPUs; \
         McKenney §2.1: kernel daemons are pinned away from the real-time CPU). cgroup v1 moves \
         the root cpuset's tasks into `rtmgr-nrt`; both layouts narrow every affinity that \
         includes an RT CPU, unbound kernel threads too unless `kernel_threads = \"leave\"`. \
         Per-CPU kernel threads cannot move: they are reported. Reset restores every cpuset \
         and affinity from the journal."
    }

    fn preview(&self, cx: &PreviewCx<'_>) -> KnobReport {
        let (host, plan) = (cx.host, cx.plan);
        let all = tasks::all(host).unwrap_or_default();
        let on_rt = |t: &&tasks::TaskInfo| {
            host.get_affinity(t.tid)
                .is_ok_and(|a| !a.is_disjoint(&plan.rt))
        };
        let pinned = all
            .iter()
            .filter(|t| t.no_setaffinity)
            .filter(on_rt)
            .count();
        let kthreads_left = plan.kernel_threads == KthreadPolicy::Leave;
        let movable = all
            .iter()
            .filter(|t| !(t.no_setaffinity || (t.kthread && kthreads_left)))
            .filter(on_rt)
            .count();
        let mut lines = vec![format!(
            "{movable} of {} tasks may run on RT CPUs {}: narrowed to the NRT CPUs {}",
            all.len(),
            plan.rt,
            plan.nrt
        )];
        lines.push(format!(
            "{pinned} per-CPU kernel threads stay (the kernel forbids moving them)"
        ));
        if kthreads_left {
            lines.push("unbound kernel threads left alone (kernel_threads = \"leave\")".into());
        }
        cx.report(self.id(), lines)
    }

    /// Journal their affinities (reset gives them back), then narrow each
    /// to its NRT part.
    fn repair(&self, cx: &mut RepairCx<'_>, drift: &[&Drift]) -> Result<usize> {
        let (host, a) = (cx.host, cx.applied);
        let found: Vec<TaskBefore> = drift
            .iter()
            .filter_map(|d| match &d.fix {
                Fix::Task {
                    tid,
                    start_time,
                    affinity,
                } => Some(TaskBefore {
                    tid: *tid,
                    start_time: *start_time,
                    cgroup: cgroup::task_cgroup(host, &a.layout, *tid),
                    affinity: affinity.clone(),
                }),
                _ => None,
            })
            .collect();
        if found.is_empty() {
            return Ok(0);
        }
        cx.journal.record(&Record::Tasks {
            tasks: found.clone(),
        })?;
        Ok(found
            .iter()
            .filter(|b| {
                host.set_affinity(b.tid, &b.affinity.difference(&a.plan.rt))
                    .is_ok()
            })
            .count())
    }

    /// Affinities last: v1 attach and v2 partitions reset them.
    fn settle(&self, cx: &mut UndoCx<'_>) {
        let host = cx.host;
        for b in snapshot(cx.records) {
            if !tasks::same_task(host, b.tid, b.start_time) {
                continue;
            }
            match host.get_affinity(b.tid) {
                Ok(now) if now == b.affinity => cx.report.tasks_restored += 1,
                Ok(_) => match host.set_affinity(b.tid, &b.affinity) {
                    Ok(()) => cx.report.tasks_restored += 1,
                    Err(e) if e.is_gone() => {}
                    Err(e) => cx
                        .problems
                        .push(format!("task {} affinity {}: {e}", b.tid, b.affinity)),
                },
                Err(_) => {}
            }
        }
    }
}

/// Every task as the journal saw it before it was moved.
fn snapshot(records: &[Record]) -> impl Iterator<Item = &TaskBefore> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Tasks { tasks } => Some(tasks.iter()),
            _ => None,
        })
        .flatten()
}

fn move_batch(cx: &mut ApplyCx<'_>, all: &[tasks::TaskInfo], first_pass: bool) -> Result<()> {
    let (host, layout, plan) = (cx.host, cx.layout, cx.plan);
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
    cx.journal.record(&Record::Tasks {
        tasks: before.clone(),
    })?;
    let rt_rel = cgroup::rel_path(layout, cx.rt_dir);
    let by_tid: BTreeMap<u32, &TaskBefore> = before.iter().map(|b| (b.tid, b)).collect();
    let half = all.len() / 2;
    let report = &mut *cx.report;
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
        if let (Layout::V1(_), Some(nrt)) = (layout, cx.nrt_dir) {
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
pub(super) fn narrow_affinity(
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

/// Return a process that entered an rtmgr cpuset to `dest_rel` (reset).
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
