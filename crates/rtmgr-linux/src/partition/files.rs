//! Knobs that are plain control files (sysctls, sysfs masks, as tuned's sysctl
//! and sysfs plugins): what each file is and becomes is found once, read-only
//! (`FileKnob::find`); `preview` shows it, `apply` journals each old value and
//! writes the new one, reset writes the old values back; `verify` finds them
//! again and reports each that no longer holds its new value.

use super::knob::{ApplyCx, Knob, PartitionKnobs, PreviewCx, UndoCx, VerifyCx};
use super::{crash_point, Result};
use crate::drift::{self, Drift};
use crate::step::Step;
use crate::{cpus, Host};
use rtmgr_core::partition::{KnobId, KnobReport, KthreadPolicy, PartitionPlan};
use std::path::{Path, PathBuf};

/// A knob made of control files: say what it is, find what it would set.
pub(super) trait FileKnob: Sync {
    fn knob(&self) -> KnobId;
    /// What it is for, one paragraph (which seed or tuned reason).
    fn reason(&self) -> &'static str;
    /// The files it would set under `plan` and their new values; read-only.
    fn find(&self, host: &Host, plan: &PartitionPlan) -> Found;
    /// What `verify` expects now: by default the files `find` finds (those
    /// it `journalled` are among them). Read-only.
    fn expected(&self, host: &Host, plan: &PartitionPlan, _journalled: &[&Path]) -> Vec<Setting> {
        self.find(host, plan)
            .split()
            .map(|(_, files)| files)
            .unwrap_or_default()
    }
    /// Every file it could set, for snapshots: by default its files under a
    /// plan where every online CPU is both RT and NRT.
    fn watched_files(&self, host: &Host) -> Vec<PathBuf> {
        self.find(host, &every_cpu_plan(host)).paths()
    }
}

/// A plan where every online CPU is both RT and NRT: a knob finds every file
/// it could set under some plan.
fn every_cpu_plan(host: &Host) -> PartitionPlan {
    let all = cpus::online(host).unwrap_or_default();
    PartitionPlan {
        rt: all.clone(),
        nrt: all,
        kernel_threads: KthreadPolicy::Move,
        irq_leave: Vec::new(),
        irq_rt: Vec::new(),
        latency_bound_us: 1,
        knobs: KnobId::all(),
        preempt: None,
        favordynmods: false,
        irqbalance: Default::default(),
    }
}

impl<T: FileKnob> Step<PartitionKnobs> for T {
    fn name(&self) -> &'static str {
        self.id().name()
    }

    fn apply(&self, cx: &mut ApplyCx<'_>) -> Result<()> {
        let found = self.find(cx.host, cx.plan);
        apply(cx, self.knob(), found)
    }

    /// Every file it would set now that does not hold its new value.
    fn verify(&self, cx: &VerifyCx<'_>) -> Vec<Drift> {
        let name = self.knob().name();
        let journalled = cx.journalled_files(name);
        self.expected(cx.host, &cx.applied.plan, &journalled)
            .iter()
            .filter_map(|s| drift::file(cx.host, name, &s.label, &s.path, &s.new))
            .collect()
    }

    fn undo(&self, cx: &mut UndoCx<'_>) -> Vec<String> {
        cx.restore_files(Some(self.name()))
    }
}

impl<T: FileKnob> Knob for T {
    fn id(&self) -> KnobId {
        self.knob()
    }

    fn explain(&self) -> &'static str {
        self.reason()
    }

    fn preview(&self, cx: &PreviewCx<'_>) -> KnobReport {
        preview(cx, self.knob(), self.find(cx.host, cx.plan))
    }

    fn watched(&self, host: &Host) -> Vec<PathBuf> {
        self.watched_files(host)
    }
}

/// One control file a knob sets.
#[derive(Debug, Clone)]
pub(super) struct Setting {
    /// Machine path.
    pub path: PathBuf,
    /// What it is, for people ("lo rx-0 rps_cpus").
    pub label: String,
    pub old: String,
    pub new: String,
}

/// What a file knob finds on this machine.
pub(super) enum Found {
    /// Nothing to set here, and why (the files do not exist).
    Absent(String),
    Files(Vec<Setting>),
    /// Files, and what else the knob found worth saying (said first).
    Said(Vec<String>, Vec<Setting>),
}

impl Found {
    pub fn paths(&self) -> Vec<PathBuf> {
        match self {
            Found::Absent(_) => Vec::new(),
            Found::Files(f) | Found::Said(_, f) => f.iter().map(|s| s.path.clone()).collect(),
        }
    }

    /// The lines to say first, and the files; or why there is nothing.
    fn split(self) -> std::result::Result<(Vec<String>, Vec<Setting>), String> {
        match self {
            Found::Absent(why) => Err(why),
            Found::Files(f) => Ok((Vec::new(), f)),
            Found::Said(lines, f) => Ok((lines, f)),
        }
    }
}

fn change(s: &Setting) -> String {
    format!("{}: {} -> {}", s.label, s.old, s.new)
}

/// Files already as wanted are summed up in one line.
fn already(n: usize) -> Option<String> {
    (n > 0).then(|| format!("{n} already as wanted"))
}

fn preview(cx: &PreviewCx<'_>, knob: KnobId, found: Found) -> KnobReport {
    match found.split() {
        Err(why) => cx.unavailable(knob, why),
        Ok((mut lines, files)) => {
            let (same, diff): (Vec<_>, Vec<_>) = files.iter().partition(|s| s.old == s.new);
            lines.extend(diff.into_iter().map(change));
            lines.extend(already(same.len()));
            cx.report(knob, lines)
        }
    }
}

/// Journal and write every file that differs; refusals are reported, not
/// errors. The crash test's point `<knob>-half` is half-way through.
fn apply(cx: &mut ApplyCx<'_>, knob: KnobId, found: Found) -> Result<()> {
    let files = match found.split() {
        Err(why) => {
            cx.unavailable(why);
            return Ok(());
        }
        Ok((lines, files)) => {
            for l in lines {
                cx.say(l);
            }
            files
        }
    };
    let half = files.len() / 2;
    let mut same = 0;
    for (i, s) in files.iter().enumerate() {
        if i == half {
            crash_point(&format!("{}-half", knob.name()));
        }
        if s.old == s.new {
            same += 1;
            continue;
        }
        let new = s.new.clone();
        let written = cx.set_file(knob.name(), &s.path, |_| new)?;
        if let Some(w) = &written {
            let what = (knob.name(), s.path.as_path(), s.new.as_str());
            drift::check_held(cx.host, cx.journal, what, w.is_ok(), drift::same_value)?;
        }
        match written {
            Some(Ok(())) => cx.say(change(s)),
            Some(Err(e)) => {
                cx.say(format!("{}: refused ({e})", s.label));
                cx.report
                    .notes
                    .push(format!("{knob}: {} not set: {e}", s.label));
            }
            None => {} // gone since it was found
        }
    }
    if let Some(l) = already(same) {
        cx.say(l);
    }
    Ok(())
}
