//! The cpusets knob (ARTiS §2.1: RT CPUs kept for RT tasks; what `cset shield`
//! does): v1 creates `rtmgr-nrt` and a CPU-exclusive `rtmgr-rt` and turns off
//! load balancing across the root; v2 makes `rtmgr-rt` an isolated (or root)
//! partition. Undo empties and removes them and disables what it enabled.
//! Verify checks their CPUs (and v1's root load balancing) still hold.

use super::knob::{ApplyCx, Knob, PartitionKnobs, PreviewCx, UndoCx, VerifyCx};
use super::Result;
use crate::cgroup::{self, Layout};
use crate::drift::{self, Drift, Fix};
use crate::host::HostError;
use crate::journal::Record;
use crate::step::Step;
use crate::Host;
use rtmgr_core::partition::{KnobId, KnobReport};
use std::path::{Path, PathBuf};

pub(super) struct Cpusets;

impl Step<PartitionKnobs> for Cpusets {
    fn name(&self) -> &'static str {
        self.id().name()
    }

    fn apply(&self, cx: &mut ApplyCx<'_>) -> Result<()> {
        match cx.layout {
            Layout::V1(mount) => apply_v1(cx, &mount.clone())?,
            Layout::V2(mount) => apply_v2(cx, &mount.clone())?,
        }
        let line = format!("RT cpuset {} with CPUs {}", cx.rt_dir.display(), cx.plan.rt);
        cx.say(line);
        Ok(())
    }

    /// The RT (and v1 NRT) cpuset still has the plan's CPUs; v1's root
    /// still does not balance load. A cpuset gone cannot be repaired while
    /// the partition runs: said.
    fn verify(&self, cx: &VerifyCx<'_>) -> Vec<Drift> {
        let (a, host) = (cx.applied, cx.host);
        let mut sets = vec![(&a.rt_cgroup, &a.plan.rt)];
        sets.extend(a.nrt_cgroup.as_ref().map(|d| (d, &a.plan.nrt)));
        let mut out = Vec::new();
        for (dir, cpus) in sets {
            let path = dir.join("cpuset.cpus");
            let fix = Fix::Owned {
                path: path.clone(),
                want: cpus.to_list(),
            };
            let what = match host.read_opt(&path) {
                None => format!("{} is gone", dir.display()),
                Some(now) if !drift::same_value(&now, &cpus.to_list()) => {
                    format!("{}: CPUs {} (applied {cpus})", dir.display(), now.trim())
                }
                Some(_) => continue,
            };
            let fix = if host.exists(dir) { fix } else { Fix::Report };
            out.push(Drift {
                knob: self.name(),
                what,
                fix,
            });
        }
        for path in cx.journalled_files(self.name()) {
            out.extend(drift::file(
                host,
                self.name(),
                "root load balancing",
                path,
                "0",
            ));
        }
        out
    }

    fn undo(&self, cx: &mut UndoCx<'_>) -> Vec<String> {
        let mut problems = Vec::new();
        problems.extend(cx.restore_files(Some(self.name())));
        let created: Vec<PathBuf> = cx
            .records
            .iter()
            .filter_map(|r| match r {
                Record::CgroupCreated { path } => Some(path.clone()),
                _ => None,
            })
            .collect();
        for dir in created.iter().rev() {
            match remove_cgroup(cx.host, cx.layout, dir) {
                Ok(true) => cx.report.cgroups_removed.push(dir.display().to_string()),
                Ok(false) => {}
                Err(e) => problems.push(format!("remove {}: {e}", dir.display())),
            }
        }
        for r in cx.records.iter().rev() {
            if let Record::ControllerEnabled { path } = r {
                if let Err(e) = cx.host.write(path, "-cpuset") {
                    cx.report.notes.push(format!(
                        "cpuset controller left enabled in {}: {e}",
                        path.display()
                    ));
                }
            }
        }
        problems
    }
}

impl Knob for Cpusets {
    fn id(&self) -> KnobId {
        KnobId::Cgroups
    }

    fn explain(&self) -> &'static str {
        "The partition itself (ARTiS §2.1: RT CPUs kept for RT tasks; what `cset shield` does). \
         cgroup v1: an `rtmgr-nrt` cpuset for everything else and a CPU-exclusive `rtmgr-rt`, with \
         load balancing off across the root so the scheduler never pulls work onto the RT CPUs. \
         cgroup v2: `rtmgr-rt` becomes an isolated partition, which also takes the RT CPUs out of \
         the scheduler's load-balancing domains. Reset empties and removes them."
    }

    fn preview(&self, cx: &PreviewCx<'_>) -> KnobReport {
        let (rt, nrt) = (&cx.plan.rt, &cx.plan.nrt);
        match cx.layout {
            None => cx.unavailable(self.id(), "no cpuset controller: apply would refuse"),
            Some(Layout::V1(m)) => cx.report(
                self.id(),
                vec![
                    format!("create {}/rtmgr-nrt with CPUs {nrt}", m.display()),
                    format!(
                        "create {}/rtmgr-rt, CPU-exclusive, with CPUs {rt}",
                        m.display()
                    ),
                    "cpuset.sched_load_balance of the root -> 0".into(),
                ],
            ),
            Some(Layout::V2(m)) => cx.report(
                self.id(),
                vec![format!(
                    "create {}/rtmgr-rt as an isolated partition with CPUs {rt}",
                    m.display()
                )],
            ),
        }
    }
}

fn apply_v1(cx: &mut ApplyCx<'_>, mount: &Path) -> Result<()> {
    let (host, layout) = (cx.host, cx.layout);
    let mems = cgroup::root_mems(host, layout);
    if let Some(nrt) = cx.nrt_dir {
        cx.journal
            .record(&Record::CgroupCreated { path: nrt.into() })?;
        cgroup::create(host, layout, nrt)?;
        cgroup::configure_v1(host, nrt, &cx.plan.nrt, &mems)?;
    }
    let rt_dir = cx.rt_dir;
    cx.journal.record(&Record::CgroupCreated {
        path: rt_dir.into(),
    })?;
    cgroup::create(host, layout, rt_dir)?;
    cgroup::configure_v1(host, rt_dir, &cx.plan.rt, &mems)?;
    if host
        .write(rt_dir.join("cpuset.cpu_exclusive"), "1")
        .is_err()
    {
        cx.report
            .notes
            .push("could not make the RT cpuset CPU-exclusive".into());
    }
    // Like `cset shield`: no load balancing across the root, none on the
    // RT set, so the scheduler never pulls tasks onto the RT CPUs.
    let slb = mount.join("cpuset.sched_load_balance");
    if let Some(written) = cx.set_file("cgroups", &slb, |_| "0".into())? {
        written?;
        let _ = host.write(rt_dir.join("cpuset.sched_load_balance"), "0");
    }
    Ok(())
}

fn apply_v2(cx: &mut ApplyCx<'_>, mount: &Path) -> Result<()> {
    let host = cx.host;
    let ctl = mount.join("cgroup.subtree_control");
    let enabled = host.read_opt(&ctl).unwrap_or_default();
    if !enabled.split_whitespace().any(|c| c == "cpuset") {
        cx.journal
            .record(&Record::ControllerEnabled { path: ctl.clone() })?;
        host.write(&ctl, "+cpuset")?;
    }
    let rt_dir = cx.rt_dir;
    cx.journal.record(&Record::CgroupCreated {
        path: rt_dir.into(),
    })?;
    cgroup::create(host, cx.layout, rt_dir)?;
    match cgroup::configure_v2_partition(host, rt_dir, &cx.plan.rt)? {
        Some(state) => {
            cx.report.partition_state = Some(state.actual.clone());
            if !state.valid() {
                cx.report.notes.push(format!(
                    "the kernel did not accept the RT cpuset as a partition ({}); RT CPUs are kept clear by task affinity only",
                    state.actual
                ));
            }
        }
        None => cx.report.notes.push(
            "this kernel has no cpuset.cpus.partition (cgroup v2 partitions need Linux 5.11+): RT CPUs are kept clear by task affinity only".into(),
        ),
    }
    Ok(())
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
