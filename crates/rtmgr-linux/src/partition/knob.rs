//! One thing a partition changes, applied and undone by one type, as tuned has
//! one plugin per knob (ARTiS §2.1, McKenney §2.1: what must be moved off a
//! real-time CPU). A knob journals the old state before each change; `undo`
//! puts it back from the journal, also after a `kill -9` of the applier.

use super::{ResetReport, Result};
use crate::cgroup::Layout;
use crate::journal::{Journal, Record};
use crate::Host;
use rtmgr_core::partition::{ApplyReport, PartitionPlan};
use std::path::Path;

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
    pub fn restore_files(&mut self, knob: Option<&str>) {
        for r in self.records.iter().rev() {
            if let Record::File { path, old, knob: k } = r {
                if k.as_deref() != knob {
                    continue;
                }
                if let Err(e) = self.host.write(path, old) {
                    if !e.is_gone() {
                        self.problems
                            .push(format!("restore {}: {e}", path.display()));
                    }
                }
            }
        }
    }
}

pub(super) trait Knob: Sync {
    /// Its name in the journal (and the crash test's point after it).
    fn name(&self) -> &'static str;
    /// Journal, then change.
    fn apply(&self, cx: &mut ApplyCx<'_>) -> Result<()>;
    /// Put back what `apply` changed (reset runs the knobs in reverse).
    fn undo(&self, cx: &mut UndoCx<'_>) {
        cx.restore_files(Some(self.name()));
    }
    /// After every knob's undo: what the kernel itself resets when cpusets
    /// change or go (task affinities).
    fn settle(&self, _cx: &mut UndoCx<'_>) {}
}
