//! The preempt knob (ARTiS §3.1 Table 1, "Linux with preemption"; ARTiS §2.1:
//! Linux tasks may run on an RT CPU only while preemptible): where debugfs
//! `sched/preempt` can be written (PREEMPT_DYNAMIC), `--preempt full|lazy`
//! sets the model for the partition's lifetime, journalled, restored by reset.
//! debugfs is written in a private mount namespace (`Host::write_debugfs`).
//! Verify checks the model is still the one asked for; repair sets it again.

use super::knob::{ApplyCx, Knob, PartitionKnobs, PreviewCx, RepairCx, UndoCx, VerifyCx};
use super::Result;
use crate::drift::{Drift, Fix};
use crate::journal::Record;
use crate::step::Step;
use crate::Host;
use rtmgr_core::partition::knobs::preempt_models;
use rtmgr_core::partition::{KnobId, KnobReport, PreemptMode};
use std::path::Path;

pub(super) struct Preempt;

const REL: &str = "sched/preempt";
/// How the journal names the file (debugfs is not mounted there for others).
const JOURNALLED: &str = "/sys/kernel/debug/sched/preempt";

/// The model selected now, or why it cannot be known or changed here.
enum Now {
    Selected(String),
    Unusable(String),
}

fn now(host: &Host, want: PreemptMode) -> Now {
    match host.try_read_debugfs(REL) {
        Err(e) => {
            let why = match e.errno() {
                Some(libc::ENOENT) => "no sched/preempt in debugfs: a kernel without PREEMPT_DYNAMIC or without debugfs".to_string(),
                Some(_) => format!(
                    "the kernel refuses debugfs sched/preempt ({}: debugfs restricted or the kernel locked down)",
                    e.reason()
                ),
                None => e.to_string(),
            };
            Now::Unusable(why)
        }
        Ok(text) => match preempt_models(&text) {
            (offered, Some(sel)) if offered.contains(&want.name()) => Now::Selected(sel.into()),
            (offered, _) => Now::Unusable(format!(
                "sched/preempt offers {}, not {want}",
                offered.join(" ")
            )),
        },
    }
}

fn skipped(why: &str, want: PreemptMode) -> String {
    format!("{why}; --preempt {want} is skipped and the preemption model stays as booted")
}

/// Can this kernel switch to `want` at run time? Err(why) otherwise.
pub fn switchable(host: &Host, want: PreemptMode) -> std::result::Result<(), String> {
    match now(host, want) {
        Now::Selected(_) => Ok(()),
        Now::Unusable(why) => Err(why),
    }
}

impl Step<PartitionKnobs> for Preempt {
    fn name(&self) -> &'static str {
        self.id().name()
    }

    fn apply(&self, cx: &mut ApplyCx<'_>) -> Result<()> {
        let Some(want) = cx.plan.preempt else {
            cx.say("no --preempt given: the model stays");
            return Ok(());
        };
        let old = match now(cx.host, want) {
            Now::Unusable(why) => {
                cx.unavailable(skipped(&why, want));
                return Ok(());
            }
            Now::Selected(old) if old == want.name() => {
                cx.say(format!("sched/preempt: already {want}"));
                return Ok(());
            }
            Now::Selected(old) => old,
        };
        cx.journal.record(&Record::File {
            path: JOURNALLED.into(),
            old: old.clone(),
            knob: Some(self.name().into()),
        })?;
        match cx.host.write_debugfs(REL, want.name()) {
            Ok(()) => cx.say(format!("sched/preempt: {old} -> {want}")),
            Err(e) => cx.unavailable(format!(
                "the kernel refused {want} in sched/preempt ({}): the model stays {old}",
                e.reason()
            )),
        }
        Ok(())
    }

    /// The model asked for is still the selected one (a kernel that cannot
    /// switch has nothing to verify).
    fn verify(&self, cx: &VerifyCx<'_>) -> Vec<Drift> {
        let Some(want) = cx.applied.plan.preempt else {
            return Vec::new();
        };
        match now(cx.host, want) {
            Now::Selected(sel) if sel != want.name() => vec![Drift {
                knob: self.name(),
                what: format!("sched/preempt: {sel} (applied {want})"),
                fix: Fix::File {
                    path: JOURNALLED.into(),
                    want: want.name().into(),
                },
            }],
            _ => Vec::new(),
        }
    }

    /// Put back the journalled model when it changed; debugfs has no plain path.
    fn undo(&self, cx: &mut UndoCx<'_>) -> Vec<String> {
        let mut problems = Vec::new();
        for r in cx.records.iter().rev() {
            let Record::File { path, old, knob } = r else {
                continue;
            };
            if knob.as_deref() != Some(self.name()) || path != Path::new(JOURNALLED) {
                continue;
            }
            match cx.host.try_read_debugfs(REL) {
                Ok(text) if preempt_models(&text).1 == Some(old.as_str()) => {}
                Ok(_) => {
                    if let Err(e) = cx.host.write_debugfs(REL, old) {
                        problems.push(format!("restore sched/preempt {old}: {e}"));
                    }
                }
                Err(e) => cx.report.notes.push(format!(
                    "sched/preempt unreadable at reset ({e}); it was {old} before apply"
                )),
            }
        }
        problems
    }
}

impl Knob for Preempt {
    fn id(&self) -> KnobId {
        KnobId::Preempt
    }

    fn explain(&self) -> &'static str {
        "How far kernel code can be preempted. With none or voluntary, a task in a system call \
         keeps its CPU until the call ends or reaches a preemption point, so a guest in the \
         kernel on an RT CPU delays a waking RT0 task by that long (ARTiS §2.1 moves such \
         tasks off before they become non-preemptible). With full (or lazy, which is full for \
         RT tasks), the kernel can be preempted everywhere except in its non-preemptible \
         sections (spinlocks, interrupt handlers, per-CPU regions): ARTiS Table 1's \"Linux \
         with preemption\". A PREEMPT_DYNAMIC kernel switches at run time through debugfs \
         sched/preempt; rtmgr sets `--preempt full|lazy` for the partition's lifetime, \
         journalled, and reset puts back the booted model. Kernels that refuse debugfs, or \
         were built without PREEMPT_DYNAMIC, keep their model: said once, and skipped."
    }

    fn preview(&self, cx: &PreviewCx<'_>) -> KnobReport {
        let Some(want) = cx.plan.preempt else {
            return cx.report(
                self.id(),
                vec!["no --preempt given: the model stays".into()],
            );
        };
        match now(cx.host, want) {
            Now::Unusable(why) => cx.unavailable(self.id(), skipped(&why, want)),
            Now::Selected(old) => {
                cx.report(self.id(), vec![format!("sched/preempt: {old} -> {want}")])
            }
        }
    }

    /// Journal the model found, select the wanted one again.
    fn repair(&self, cx: &mut RepairCx<'_>, drift: &[&Drift]) -> Result<usize> {
        let mut n = 0;
        for d in drift {
            let Fix::File { want, .. } = &d.fix else {
                continue;
            };
            let Ok(text) = cx.host.try_read_debugfs(REL) else {
                continue;
            };
            let Some(old) = preempt_models(&text).1 else {
                continue;
            };
            cx.journal.record(&Record::File {
                path: JOURNALLED.into(),
                old: old.into(),
                knob: Some(self.name().into()),
            })?;
            let written = cx.host.write_debugfs(REL, want).is_ok();
            if !written {
                cx.journal.record(&Record::Unheld {
                    path: JOURNALLED.into(),
                    knob: self.name().into(),
                })?;
            }
            n += usize::from(written);
        }
        Ok(n)
    }

    /// Where debugfs is mounted (a fake tree), snapshots compare it.
    fn watched(&self, _host: &Host) -> Vec<std::path::PathBuf> {
        vec![JOURNALLED.into()]
    }
}
