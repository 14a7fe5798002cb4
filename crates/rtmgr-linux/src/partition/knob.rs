//! One thing a partition changes, applied and undone by one type (a
//! `step::Step` of the partition family), as tuned has one plugin per knob
//! (ARTiS §2.1, McKenney §2.1: what must be moved off a real-time CPU). A knob journals the old state before each change; `undo`
//! puts it back from the journal, also after a `kill -9` of the applier.
//! `explain` says what it is for; `preview` what it would do here (read-only);
//! `verify` whether the machine still holds what it applied, `repair` puts
//! back what drifted (journalled as `apply` journals).

use super::{Applied, ResetReport, Result};
use crate::cgroup::Layout;
use crate::drift::{self, Drift};
use crate::journal::{Journal, Record};
use crate::step::{Family, Step};
use crate::Host;
use rtmgr_core::partition::{ApplyReport, KnobId, KnobReport, PartitionPlan};
use std::path::{Path, PathBuf};

/// What a knob's `apply` works with.
pub(super) struct ApplyCx<'a> {
    pub host: &'a Host,
    pub journal: &'a mut Journal,
    pub plan: &'a PartitionPlan,
    pub layout: &'a Layout,
    pub rt_dir: &'a Path,
    /// v1 only: v2 has no NRT cgroup (every other cgroup is NRT).
    pub nrt_dir: Option<&'a Path>,
    pub report: &'a mut ApplyReport,
}

impl ApplyCx<'_> {
    /// Add a line to the running knob's report.
    pub fn say(&mut self, line: impl Into<String>) {
        if let Some(k) = self.report.knobs.last_mut() {
            k.lines.push(line.into());
        }
    }

    /// The running knob finds nothing to set on this machine: say why.
    pub fn unavailable(&mut self, why: impl Into<String>) {
        if let Some(k) = self.report.knobs.last_mut() {
            k.available = false;
            k.lines.push(why.into());
        }
    }

    /// Journal a control file's old content under `knob`, then write `new(old)`.
    /// Ok(None) when the file does not exist here; the write's error otherwise.
    pub fn set_file(
        &mut self,
        knob: &str,
        path: &Path,
        new: impl FnOnce(&str) -> String,
    ) -> Result<Option<std::result::Result<(), crate::HostError>>> {
        let Some(old) = self.host.read_opt(path) else {
            return Ok(None);
        };
        let old = old.trim().to_string();
        self.journal.record(&Record::File {
            path: path.into(),
            old: old.clone(),
            knob: Some(knob.into()),
        })?;
        Ok(Some(self.host.write(path, &new(&old))))
    }
}

/// What a knob's `undo` works with: the whole journal, and where to say what
/// was restored or could not be.
pub(super) struct UndoCx<'a> {
    pub host: &'a Host,
    pub layout: &'a Layout,
    pub records: &'a [Record],
    pub report: &'a mut ResetReport,
    /// Anything not restored: the journal is kept and reset can run again.
    pub problems: &'a mut Vec<String>,
}

impl UndoCx<'_> {
    /// Restore the control files a knob journalled, newest first. `None`
    /// restores the files of journals written before knobs were named.
    /// Returns what could not be restored.
    pub fn restore_files(&mut self, knob: Option<&str>) -> Vec<String> {
        let mut problems = Vec::new();
        for r in self.records.iter().rev() {
            if let Record::File { path, old, knob: k } = r {
                if k.as_deref() != knob {
                    continue;
                }
                if let Err(e) = self.host.write(path, old) {
                    if !e.is_gone() {
                        problems.push(format!("restore {}: {e}", path.display()));
                    }
                }
            }
        }
        problems
    }
}

/// What a knob's `verify` works with: read-only.
pub(super) struct VerifyCx<'a> {
    pub host: &'a Host,
    pub applied: &'a Applied,
    /// The partition journal's records.
    pub records: &'a [Record],
    /// IRQs steered to RT CPUs on purpose since apply (the daemon's grants).
    pub exempt_irqs: &'a [u32],
}

impl VerifyCx<'_> {
    /// The control files `knob` journalled (the ones it changed).
    pub fn journalled_files(&self, knob: &str) -> Vec<&Path> {
        let mut out: Vec<&Path> = Vec::new();
        for r in self.records {
            if let Record::File {
                path,
                knob: Some(k),
                ..
            } = r
            {
                if k == knob && !out.contains(&path.as_path()) {
                    out.push(path);
                }
            }
        }
        out
    }
}

/// What a knob's `repair` works with.
pub(super) struct RepairCx<'a> {
    pub host: &'a Host,
    pub applied: &'a Applied,
    pub journal: &'a mut Journal,
}

/// What a knob's `preview` works with: read-only.
pub(super) struct PreviewCx<'a> {
    pub host: &'a Host,
    pub plan: &'a PartitionPlan,
    /// None when the machine has no cpuset controller.
    pub layout: Option<&'a Layout>,
}

impl PreviewCx<'_> {
    pub fn report(&self, knob: KnobId, lines: Vec<String>) -> KnobReport {
        KnobReport {
            knob,
            available: true,
            lines,
        }
    }

    pub fn unavailable(&self, knob: KnobId, why: impl Into<String>) -> KnobReport {
        KnobReport {
            knob,
            available: false,
            lines: vec![why.into()],
        }
    }
}

/// The partition family of `step::Step`: a knob journals each item's old
/// state just before it changes it (in `apply`, `ApplyCx::set_file`: which
/// items there are is only known then), so its `snapshot` records nothing;
/// `undo` reads the whole journal.
pub(super) struct PartitionKnobs;

impl Family for PartitionKnobs {
    type Snapshot<'a> = ApplyCx<'a>;
    type Apply<'a> = ApplyCx<'a>;
    type Verify<'a> = VerifyCx<'a>;
    type Undo<'a> = UndoCx<'a>;
    type Error = super::PartitionError;
}

/// One thing a partition changes: a `Step` of the partition family (its
/// name is its `KnobId`'s), with what only a partition's knobs do besides.
pub(super) trait Knob: Step<PartitionKnobs> {
    fn id(&self) -> KnobId;
    /// What it is for, one paragraph (which seed or tuned reason).
    fn explain(&self) -> &'static str;
    /// Refuse the plan before anything changes (e.g. beside a program that
    /// would undo this knob and the plan says not to work with it).
    fn preflight(&self, _host: &Host, _plan: &PartitionPlan) -> Result<()> {
        Ok(())
    }
    /// What `apply` would do on this machine; changes nothing.
    fn preview(&self, cx: &PreviewCx<'_>) -> KnobReport;
    /// Put back what `verify` found drifted (this knob's items), journalled
    /// first as `apply` journals; how many items hold again.
    fn repair(&self, cx: &mut RepairCx<'_>, drift: &[&Drift]) -> Result<usize> {
        let mut n = 0;
        for d in drift {
            n += usize::from(drift::rewrite(cx.host, cx.journal, d, drift::same_value)?);
        }
        Ok(n)
    }
    /// After every knob's undo: what the kernel itself resets when cpusets
    /// change or go (task affinities).
    fn settle(&self, _cx: &mut UndoCx<'_>) {}
    /// The control files this knob may change on this machine, for any
    /// partition (snapshots compare them before and after).
    fn watched(&self, _host: &Host) -> Vec<PathBuf> {
        Vec::new()
    }
}
