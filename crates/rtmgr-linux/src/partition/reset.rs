//! `reset`: undo everything a partition journal records — first what the
//! daemon's `[resources]` knobs journalled there (`resources::knobs::undo_records`), then
//! knob by knob in the reverse order of `apply` — then let each knob settle
//! what the kernel resets when cpusets go (affinities). Idempotent: with no journal it removes only
//! rtmgr cgroups left without one (`orphans`);
//! after a partial reset it finishes the job; it keeps the journal while
//! anything could not be restored.

use super::knob::UndoCx;
use super::{PartitionError, ResetReport, Result, KNOBS};
use crate::journal::{self, Record};
use crate::resources;
use crate::Host;
use std::path::Path;

pub fn reset(host: &Host, journal_path: &Path) -> Result<ResetReport> {
    let mut rep = ResetReport::default();
    let Some(records) = journal::read(host, journal_path)? else {
        super::orphans::remove(host, &mut rep)?;
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
    // The daemon's machine-wide settings were applied after the partition.
    let mut problems = resources::knobs::undo_records(host, &records).problems;
    let mut cx = UndoCx {
        host,
        layout: &layout,
        records: &records,
        report: &mut rep,
        problems: &mut problems,
    };
    // Files journalled before knobs were named (an older rtmgr applied it).
    let mut left = cx.restore_files(None);
    for knob in KNOBS.iter().rev() {
        left.extend(knob.undo(&mut cx));
    }
    cx.problems.extend(left);
    for knob in KNOBS {
        knob.settle(&mut cx);
    }
    if problems.is_empty() {
        journal::remove(host, journal_path)?;
        Ok(rep)
    } else {
        Err(PartitionError::Incomplete(problems.join("; ")))
    }
}
