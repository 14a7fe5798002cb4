//! The daemon's machine-wide `[resources]` settings as knobs (DROPS §4.1: the
//! manager owns memory, I/O and cache; §4.3 NRT I/O weight; §4.4 NRT memory
//! limit and the L3 split; RT throttling lifted beside the starvation guard):
//! each change journalled in the one partition journal under its knob's name
//! before it is made, verified and repaired like the partition's knobs, and
//! undone by `partition::reset` (`resource_records`).

use crate::drift::{self, Drift, Fix};
use crate::host::{Host, Result};
use crate::journal::{self, Journal, Record};
use crate::resource_records::{self, Source};
use rtmgr_core::partition::ResourceKnobId;
use rtmgr_core::resources::cache;
use std::path::{Path, PathBuf};

/// One value a resource knob keeps in a control file while the daemon runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub knob: ResourceKnobId,
    pub path: PathBuf,
    pub want: String,
    /// In a directory the knob created (the resctrl group): not journalled.
    pub owned: bool,
}

/// The kernel rounds a memory limit down to its page size (at most 64 KiB).
const PAGE_SLACK: u64 = 64 * 1024;

/// The number a control file shows: bare, or on its `default N` line
/// (`io.weight`, `io.bfq.weight` of cgroup v2).
fn number(text: &str) -> Option<u64> {
    let t = text.trim();
    t.parse().ok().or_else(|| {
        t.lines()
            .find_map(|l| l.trim().strip_prefix("default ")?.trim().parse().ok())
    })
}

/// Whether a resource file shows what was written to it: a schemata by its
/// L3 masks (the kernel pads them and shows other resources beside them), a
/// number as the kernel keeps it (weights on their `default` line, memory
/// limits rounded down to a page), anything else as the same text or CPUs.
fn holds(now: &str, want: &str) -> bool {
    if let Some(masks) = cache::l3_masks(want) {
        return cache::l3_masks(now) == Some(masks);
    }
    match (number(now), number(want)) {
        (Some(n), Some(w)) => n <= w && w - n < PAGE_SLACK,
        _ => drift::same_value(now, want),
    }
}

impl Held {
    fn drift(&self, host: &Host) -> Option<Drift> {
        let now = host.read_opt(&self.path)?;
        let held = holds(&now, &self.want);
        let (path, want) = (self.path.clone(), self.want.clone());
        (!held).then(|| Drift {
            knob: self.knob.name(),
            what: format!(
                "{}: {} (applied {})",
                self.path.display(),
                now.trim(),
                self.want
            ),
            fix: if self.owned {
                Fix::Owned { path, want }
            } else {
                Fix::File { path, want }
            },
        })
    }
}

/// Journal a control file's old content under `knob`, then write `new`.
/// Ok(None): no such file; else what it now holds.
pub fn set(
    host: &Host,
    j: &mut Journal,
    knob: ResourceKnobId,
    path: &Path,
    new: &str,
) -> Result<Option<Held>> {
    let Some(old) = host.read_opt(path) else {
        return Ok(None);
    };
    j.record(&Record::File {
        path: path.into(),
        old: old.trim().to_string(),
        knob: Some(knob.name().into()),
    })?;
    host.write(path, new)?;
    Ok(Some(Held {
        knob,
        path: path.into(),
        want: new.into(),
        owned: false,
    }))
}

/// What of `held` the machine no longer holds (files the kernel did not keep
/// are not expected to).
pub fn verify(host: &Host, partition_journal: &Path, held: &[Held]) -> Result<Vec<Drift>> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let records = journal::read(host, partition_journal)?.unwrap_or_default();
    let unheld = drift::unheld(&records);
    Ok(held
        .iter()
        .filter(|h| !unheld.contains(&h.path))
        .filter_map(|h| h.drift(host))
        .collect())
}

/// Write back what drifted, journalled first; how many items of each knob
/// hold again.
pub fn repair(
    host: &Host,
    partition_journal: &Path,
    drift: &[Drift],
) -> Result<Vec<(&'static str, usize)>> {
    if drift.is_empty() {
        return Ok(Vec::new());
    }
    let mut j = Journal::append_to(host, partition_journal)?;
    let mut out: Vec<(&'static str, usize)> = Vec::new();
    for d in drift {
        let n = usize::from(drift::rewrite(host, &mut j, d, holds)?);
        match out.iter_mut().find(|(k, _)| *k == d.knob) {
            Some((_, sum)) => *sum += n,
            None => out.push((d.knob, n)),
        }
    }
    Ok(out)
}

/// Undo the resource knobs' records of a partition journal (a predecessor's
/// leftovers at start, or an apply that failed half-way); the partition
/// itself stays. Boosts put back get their `Unboost`, and tasks a dead
/// balancer lent their `GivenBack`, so reset does not put them back twice.
/// Returns what could not be restored.
pub fn undo(host: &Host, partition_journal: &Path) -> Result<Vec<String>> {
    let Some(records) = journal::read(host, partition_journal)? else {
        return Ok(Vec::new());
    };
    let undone = resource_records::undo(host, &records, Source::PartitionJournal);
    if !undone.unboosted.is_empty() || !undone.given_back.is_empty() {
        let mut j = Journal::append_to(host, partition_journal)?;
        for tid in undone.unboosted {
            j.record(&Record::Unboost { tid })?;
        }
        for tid in undone.given_back {
            j.record(&Record::GivenBack { tid })?;
        }
    }
    Ok(undone.problems)
}

/// The resources journal an older rtmgr kept beside the partition journal.
pub fn legacy_path(partition_journal: &Path) -> PathBuf {
    partition_journal.with_file_name("resources.jsonl")
}

/// Undo a resources.jsonl an older rtmgr left beside the partition journal
/// (a daemon upgraded after `kill -9`), and remove it when all went back.
/// Returns what could not be restored (the file is kept then).
pub fn restore_legacy(host: &Host, partition_journal: &Path) -> Result<Vec<String>> {
    let path = legacy_path(partition_journal);
    let Some(records) = journal::read(host, &path)? else {
        return Ok(Vec::new());
    };
    let mut problems = resource_records::undo(host, &records, Source::Legacy).problems;
    if problems.is_empty() {
        let real = host.path(&path);
        if let Err(e) = std::fs::remove_file(&real) {
            if e.kind() != std::io::ErrorKind::NotFound {
                problems.push(format!("remove {}: {e}", real.display()));
            }
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::holds;

    #[test]
    fn resource_files_hold_what_the_kernel_shows_for_what_was_written() {
        assert!(holds("default 50\n8:0 200\n", "default 50"));
        assert!(holds("default 50\n", "50"));
        assert!(!holds("default 100\n", "default 50"));
        assert!(holds("999997440\n", "1000000000"));
        assert!(!holds("9223372036854771712\n", "4294967296"));
        assert!(holds("-1\n", "-1"));
        assert!(!holds("950000\n", "-1"));
        assert!(holds("    MB:0=100\n    L3:0=003ff\n", "L3:0=3ff"));
        assert!(!holds("L3:0=fffff", "L3:0=3ff"));
    }
}
