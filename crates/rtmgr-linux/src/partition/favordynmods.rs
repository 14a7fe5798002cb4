//! The favordynmods knob (DROPS §4.1: the manager answers a request in bounded
//! time; issue 27's grant round trip): cgroup2's `favordynmods` mount option
//! for the partition's lifetime, so that moving a thread into the RT cpuset no
//! longer waits for an RCU grace period after an idle spell. Journalled; reset
//! remounts without it.

use super::knob::{ApplyCx, Knob, PartitionKnobs, PreviewCx, RepairCx, UndoCx, VerifyCx};
use super::Result;
use crate::drift::{Drift, Fix};
use crate::journal::Record;
use crate::step::Step;
use crate::Host;
use rtmgr_core::cgroupfs::{cgroup2_mounts, Cgroup2Mount};
use rtmgr_core::partition::{KnobId, KnobReport};
use std::path::Path;

pub(super) struct Favordynmods;

const OPTION: &str = "favordynmods";

/// The cgroup2 mount the option goes on: the first one (every cgroup2 mount
/// is the same hierarchy, and the kernel keeps one flag for it).
fn mount(host: &Host) -> std::result::Result<Cgroup2Mount, String> {
    let info = host.read_opt("/proc/self/mountinfo").unwrap_or_default();
    cgroup2_mounts(&info).into_iter().next().ok_or_else(|| {
        "no cgroup2 hierarchy is mounted: favordynmods is a cgroup2 mount option (a v1 \
         hierarchy takes it only when first mounted); --favordynmods is skipped"
            .to_string()
    })
}

/// The cgroup2 mount at `mount_point`, as mountinfo shows it now.
fn mount_at(host: &Host, mount_point: &Path) -> Option<Cgroup2Mount> {
    let info = host.read_opt("/proc/self/mountinfo")?;
    cgroup2_mounts(&info)
        .into_iter()
        .find(|m| m.mount_point == mount_point)
}

fn mounted_with_option(host: &Host, mount_point: &Path) -> Option<bool> {
    mount_at(host, mount_point).map(|m| m.has(OPTION))
}

/// The mount `apply` would set the option on, or why it does nothing.
fn plan_line(host: &Host, asked: bool) -> std::result::Result<Cgroup2Mount, String> {
    if !asked {
        return Err("no --favordynmods given: cgroup attaches keep the mount's mode".into());
    }
    mount(host)
}

impl Step<PartitionKnobs> for Favordynmods {
    fn name(&self) -> &'static str {
        self.id().name()
    }

    fn apply(&self, cx: &mut ApplyCx<'_>) -> Result<()> {
        let m = match plan_line(cx.host, cx.plan.favordynmods) {
            Ok(m) if !m.has(OPTION) => m,
            Ok(m) => {
                cx.say(format!(
                    "cgroup2 at {}: favordynmods already set",
                    m.mount_point.display()
                ));
                return Ok(());
            }
            Err(why) if cx.plan.favordynmods => {
                cx.unavailable(why);
                return Ok(());
            }
            Err(why) => {
                cx.say(why);
                return Ok(());
            }
        };
        cx.journal.record(&Record::MountOption {
            mount_point: m.mount_point.clone(),
            option: OPTION.into(),
            knob: self.name().into(),
        })?;
        let data = m.remount_data(OPTION, true);
        let done = cx.host.remount(&m.mount_point, &m.mount_options, &data);
        match done {
            // Outside the initial cgroup namespace the kernel accepts the
            // remount and leaves the root's flags as they were.
            Ok(()) if mounted_with_option(cx.host, &m.mount_point) != Some(true) => cx.unavailable(format!(
                "cgroup2 at {} was remounted but does not show favordynmods (not in the initial cgroup namespace?): attaches keep waiting for grace periods",
                m.mount_point.display()
            )),
            Ok(()) => cx.say(format!(
                "cgroup2 at {}: favordynmods set (a cpuset attach no longer waits for an RCU grace period)",
                m.mount_point.display()
            )),
            Err(e) => cx.unavailable(format!(
                "the kernel refused favordynmods on cgroup2 at {} ({}): attaches keep waiting for grace periods",
                m.mount_point.display(),
                e.reason()
            )),
        }
        Ok(())
    }

    /// The option asked for is still on the mount it was set on (repair
    /// sets it again: its removal is already journalled).
    fn verify(&self, cx: &VerifyCx<'_>) -> Vec<Drift> {
        let mut out = Vec::new();
        for r in cx.records {
            let Record::MountOption {
                mount_point, knob, ..
            } = r
            else {
                continue;
            };
            if knob == self.name() && mounted_with_option(cx.host, mount_point) == Some(false) {
                out.push(Drift {
                    knob: self.name(),
                    what: format!(
                        "cgroup2 at {}: favordynmods was removed since apply",
                        mount_point.display()
                    ),
                    fix: Fix::Owned {
                        path: mount_point.clone(),
                        want: OPTION.into(),
                    },
                });
            }
        }
        out
    }

    /// Remount without the option where it is still set.
    fn undo(&self, cx: &mut UndoCx<'_>) -> Vec<String> {
        let mut problems = Vec::new();
        for r in cx.records.iter().rev() {
            let Record::MountOption {
                mount_point,
                option,
                knob,
            } = r
            else {
                continue;
            };
            if knob != self.name() {
                continue;
            }
            let Some(m) = mount_at(cx.host, mount_point) else {
                cx.report.notes.push(format!(
                    "cgroup2 is no longer mounted at {}: favordynmods not removed there",
                    mount_point.display()
                ));
                continue;
            };
            if !m.has(option) {
                continue;
            }
            match cx.host.remount(&m.mount_point, &m.mount_options, &m.remount_data(option, false)) {
                Ok(()) => cx.report.notes.push(format!(
                    "cgroup2 at {}: favordynmods removed (kernels with the per-threadgroup rwsem, 6.18 on, keep using it until reboot and say so in dmesg)",
                    mount_point.display()
                )),
                Err(e) => problems.push(format!(
                    "remove favordynmods from cgroup2 at {}: {e}",
                    mount_point.display()
                )),
            }
        }
        problems
    }
}

impl Knob for Favordynmods {
    fn id(&self) -> KnobId {
        KnobId::Favordynmods
    }

    /// Remount with the option again where it was removed since apply.
    fn repair(&self, cx: &mut RepairCx<'_>, drift: &[&Drift]) -> Result<usize> {
        let mut n = 0;
        for d in drift {
            let Fix::Owned { path, want } = &d.fix else {
                continue;
            };
            let Some(m) = mount_at(cx.host, path) else {
                continue;
            };
            let data = m.remount_data(want, true);
            n += usize::from(
                cx.host
                    .remount(&m.mount_point, &m.mount_options, &data)
                    .is_ok()
                    && mounted_with_option(cx.host, &m.mount_point) == Some(true),
            );
        }
        Ok(n)
    }

    fn explain(&self) -> &'static str {
        "Moving a thread between cgroups (a grant's move into the RT cpuset) takes the kernel's \
         thread-group rwsem for writing. Unless cgroup2 is mounted with favordynmods, that write \
         waits for an RCU grace period whenever no move happened in the last grace period or \
         so: on the development VM a move after a 50 ms idle spell took 5.7-7.8 ms instead of \
         50-70 µs, and the first grant of a burst waited 14 ms for it, with every request queued \
         behind. favordynmods keeps the rwsem ready for writers at the cost of slower fork and \
         exit (their read side takes an atomic instead of a per-CPU count). rtmgr sets it on the \
         cgroup2 mount for the partition's lifetime with `--favordynmods` (`favordynmods = \
         true`), journalled, and reset remounts without it. Kernels from 6.18 also switch to a \
         per-threadgroup rwsem when the option is first set and keep it until reboot (dmesg \
         says so): reset cannot take that back, so the option is never set unless asked."
    }

    fn preview(&self, cx: &PreviewCx<'_>) -> KnobReport {
        match plan_line(cx.host, cx.plan.favordynmods) {
            Ok(m) => {
                let what = if m.has(OPTION) {
                    "already set"
                } else {
                    "would be set"
                };
                let line = format!(
                    "cgroup2 at {}: favordynmods {what}",
                    m.mount_point.display()
                );
                cx.report(self.id(), vec![line])
            }
            Err(why) if cx.plan.favordynmods => cx.unavailable(self.id(), why),
            Err(why) => cx.report(self.id(), vec![why]),
        }
    }
}
