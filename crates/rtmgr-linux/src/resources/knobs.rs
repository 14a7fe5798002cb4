//! The daemon's machine-wide `[resources]` settings as knobs (DROPS §4.1: the
//! manager owns memory, I/O and cache; §4.3 NRT I/O weight; §4.4 NRT memory
//! limit and the L3 split; RT throttling lifted beside the starvation guard):
//! each `ResourceKnobId` is a `step::Step` of the resources family, its plan
//! data (`Setting`): journalled in the one partition journal under its name
//! before it is changed, verified and repaired like the partition's knobs,
//! and undone from the journal by `partition::reset` (`undo_records`).

use crate::drift::{self, Drift, Fix};
use crate::host::{Host, HostError, Result};
use crate::journal::{self, Journal, Record};
use crate::resource_records::{self, Source, Undone};
use crate::step::{Family, Step};
use rtmgr_core::partition::ResourceKnobId;
use rtmgr_core::resources::cache;
use std::collections::BTreeSet;
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

/// The resources family of `step::Step`.
pub struct ResourceKnobs;

/// Control files and their values, (path, value), in order.
pub type Files = [(PathBuf, String)];

/// What a resource knob changes: control files to set (journalled), and a
/// directory to create with files in it to write.
pub type Plan<'a> = (&'a Files, Option<(&'a Path, &'a Files)>);

/// What one resource knob changes, and what it keeps once applied.
pub struct Setting<'a> {
    pub host: &'a Host,
    pub journal: &'a mut Journal,
    /// Control files to set; one that is not there is skipped.
    pub files: &'a Files,
    /// A directory to create, and files in it to write (not journalled:
    /// removing the directory undoes them).
    pub dir: Option<(&'a Path, &'a Files)>,
    /// What the knob keeps from now on (verified at each reconcile).
    pub held: &'a mut Vec<Held>,
}

/// What a resource knob keeps, and the files the kernel would not keep.
pub struct Holding<'a> {
    pub host: &'a Host,
    pub held: &'a [Held],
    pub unheld: &'a BTreeSet<PathBuf>,
}

/// The partition journal's records a resource knob is undone from.
pub struct Records<'a> {
    pub host: &'a Host,
    pub records: &'a [Record],
}

impl Family for ResourceKnobs {
    type Snapshot<'a> = Setting<'a>;
    type Apply<'a> = Setting<'a>;
    type Verify<'a> = Holding<'a>;
    type Undo<'a> = Records<'a>;
    type Error = HostError;
}

impl Step<ResourceKnobs> for ResourceKnobId {
    fn name(&self) -> &'static str {
        ResourceKnobId::name(*self)
    }

    /// Each control file's old content, and the directory to be created.
    fn snapshot(&self, cx: &mut Setting<'_>) -> Result<()> {
        for (path, _) in cx.files {
            if let Some(old) = cx.host.read_opt(path) {
                cx.journal.record(&Record::File {
                    path: path.clone(),
                    old: old.trim().to_string(),
                    knob: Some(Step::name(self).into()),
                })?;
            }
        }
        if let Some((dir, _)) = cx.dir {
            cx.journal.record(&Record::Dir {
                path: dir.into(),
                knob: Some(Step::name(self).into()),
            })?;
        }
        Ok(())
    }

    fn apply(&self, cx: &mut Setting<'_>) -> Result<()> {
        let held = |path: &Path, want: &str, owned: bool| Held {
            knob: *self,
            path: path.into(),
            want: want.into(),
            owned,
        };
        for (path, new) in cx.files {
            // Only what `snapshot` could read, and so journalled.
            if cx.host.read_opt(path).is_some() {
                cx.host.write(path, new)?;
                cx.held.push(held(path, new, false));
            }
        }
        if let Some((dir, files)) = cx.dir {
            cx.host.mkdir(dir)?;
            for (path, want) in files {
                cx.host.write(path, want)?;
                cx.held.push(held(path, want, true));
            }
        }
        Ok(())
    }

    fn verify(&self, cx: &Holding<'_>) -> Vec<Drift> {
        (cx.held.iter())
            .filter(|h| h.knob == *self && !cx.unheld.contains(&h.path))
            .filter_map(|h| h.drift(cx.host))
            .collect()
    }

    /// Newest first: its control files' old contents, then the directory
    /// it created goes.
    fn undo(&self, cx: &mut Records<'_>) -> Vec<String> {
        let mine = |k: &Option<String>| k.as_deref() == Some(Step::name(self));
        let mut problems = Vec::new();
        for r in cx.records.iter().rev() {
            let (what, done) = match r {
                Record::File { path, old, knob } if mine(knob) => (
                    format!("restore {}", path.display()),
                    cx.host.write(path, old),
                ),
                Record::Dir { path, knob } if mine(knob) && cx.host.exists(path) => {
                    (format!("remove {}", path.display()), cx.host.rmdir(path))
                }
                _ => continue,
            };
            if let Err(e) = done {
                if !e.is_gone() {
                    problems.push(format!("{what}: {e}"));
                }
            }
        }
        problems
    }
}

/// Apply resource knob `knob`'s `files` and `dir` (snapshot, then apply):
/// what it keeps is added to `held`.
pub fn put(
    host: &Host,
    journal: &mut Journal,
    knob: ResourceKnobId,
    (files, dir): Plan<'_>,
    held: &mut Vec<Held>,
) -> Result<()> {
    let mut cx = Setting {
        host,
        journal,
        files,
        dir,
        held,
    };
    knob.snapshot(&mut cx)?;
    knob.apply(&mut cx)
}

/// One control file of `knob`, journalled then set. Ok(None): no such file;
/// else what it now holds.
pub fn set(
    host: &Host,
    j: &mut Journal,
    knob: ResourceKnobId,
    path: &Path,
    new: &str,
) -> Result<Option<Held>> {
    let mut held = Vec::new();
    put(
        host,
        j,
        knob,
        (&[(path.into(), new.into())], None),
        &mut held,
    )?;
    Ok(held.pop())
}

/// What of `held` the machine no longer holds (files the kernel did not keep
/// are not expected to).
pub fn verify(host: &Host, partition_journal: &Path, held: &[Held]) -> Result<Vec<Drift>> {
    if held.is_empty() {
        return Ok(Vec::new());
    }
    let records = journal::read(host, partition_journal)?.unwrap_or_default();
    let unheld = drift::unheld(&records);
    let cx = Holding {
        host,
        held,
        unheld: &unheld,
    };
    Ok(ResourceKnobId::ALL
        .iter()
        .flat_map(|k| k.verify(&cx))
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
    let undone = undo_records(host, &records);
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

/// Undo every resource knob of a partition journal's records, the last
/// applied first, then the records of what runs beside them (the
/// starvation guard's boosts, a balancer's lends: `resource_records`).
pub fn undo_records(host: &Host, records: &[Record]) -> Undone {
    let mut cx = Records { host, records };
    let problems: Vec<String> = (ResourceKnobId::ALL.iter().rev())
        .flat_map(|k| k.undo(&mut cx))
        .collect();
    let mut out = resource_records::undo(host, records, Source::PartitionJournal);
    out.problems.splice(0..0, problems);
    out
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
