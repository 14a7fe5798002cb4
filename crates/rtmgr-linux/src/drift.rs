//! Drift: what a knob finds changed behind its back since it applied (DROPS
//! §4.1: the resource manager keeps what it set; ARTiS §2.1: the RT CPUs stay
//! clear), and the shared repair of a control file — journal the value found,
//! write the wanted one again, and journal `Unheld` if the kernel will not keep it.

use crate::host::{Host, Result};
use crate::journal::{Journal, Record};
use rtmgr_core::CpuSet;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One thing a knob applied that the machine no longer holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Drift {
    /// The knob's name (a partition knob, a `[resources]` knob, or a grant step).
    pub knob: &'static str,
    /// For people: what is no longer as applied.
    pub what: String,
    pub fix: Fix,
}

/// How a drift is repaired.
#[derive(Debug, Clone, PartialEq)]
pub enum Fix {
    /// A control file: journal the value found under the knob, write `want`.
    File { path: PathBuf, want: String },
    /// A file of a directory rtmgr created (removed at reset): write `want`
    /// again, nothing to journal.
    Owned { path: PathBuf, want: String },
    /// An IRQ's affinity back to `target` (its mask is in the `Irqs` record).
    Irq { irq: u32, target: CpuSet },
    /// A task allowed on RT and NRT CPUs at once: journal its affinity
    /// (`affinity`), narrow it to its NRT part.
    Task {
        tid: u32,
        start_time: u64,
        affinity: CpuSet,
    },
    /// An irqbalance that does not ban the RT CPUs (started after apply).
    Irqbalance { pid: u32, start_time: u64 },
    /// A grant step (`daemon::grant`, the knob's name is the step's):
    /// applied again from the grant's record.
    Step,
    /// Said, not repaired while the partition runs (reset and apply again).
    Report,
}

/// Whether a control file's value is the wanted one: the same text, or the
/// same CPUs as a mask or a list (the kernel pads masks and folds lists).
pub fn same_value(now: &str, want: &str) -> bool {
    let (now, want) = (now.trim(), want.trim());
    if now == want {
        return true;
    }
    let as_mask = |s: &str| CpuSet::parse_mask(s).ok();
    let as_list = |s: &str| CpuSet::parse_list(s).ok();
    (as_mask(now).is_some() && as_mask(now) == as_mask(want))
        || (as_list(now).is_some() && as_list(now) == as_list(want))
}

/// The drift of one control file: None when it is as wanted or not there.
pub fn file(
    host: &Host,
    knob: &'static str,
    label: &str,
    path: &Path,
    want: &str,
) -> Option<Drift> {
    let now = host.read_opt(path)?;
    (!same_value(&now, want)).then(|| Drift {
        knob,
        what: format!("{label}: {} (applied {want})", now.trim()),
        fix: Fix::File {
            path: path.into(),
            want: want.into(),
        },
    })
}

/// The files the kernel refused or did not keep (`Unheld` records).
pub fn unheld(records: &[Record]) -> BTreeSet<PathBuf> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Unheld { path, .. } => Some(path.clone()),
            _ => None,
        })
        .collect()
}

/// How a knob compares what a file shows with what it wrote (`same_value`
/// for the partition's files).
pub type Holds = fn(&str, &str) -> bool;

/// After a knob wrote `want` to `path` (`written` the write's outcome):
/// journal `Unheld` unless the file holds it now. Ok(true): it does.
pub fn check_held(
    host: &Host,
    journal: &mut Journal,
    (knob, path, want): (&str, &Path, &str),
    written: bool,
    holds: Holds,
) -> Result<bool> {
    let held = written && host.read_opt(path).is_some_and(|now| holds(&now, want));
    if !held {
        journal.record(&Record::Unheld {
            path: path.into(),
            knob: knob.into(),
        })?;
    }
    Ok(held)
}

/// Repair a `File` or `Owned` drift: Ok(true) when the file holds the wanted
/// value again (compared by `holds`); other fixes are the knob's own
/// (Ok(false) here).
pub fn rewrite(host: &Host, journal: &mut Journal, d: &Drift, holds: Holds) -> Result<bool> {
    match &d.fix {
        Fix::Owned { path, want } => Ok(host.write(path, want).is_ok()),
        Fix::File { path, want } => {
            let Some(old) = host.read_opt(path) else {
                return Ok(false);
            };
            journal.record(&Record::File {
                path: path.clone(),
                old: old.trim().to_string(),
                knob: Some(d.knob.into()),
            })?;
            let written = host.write(path, want).is_ok();
            check_held(host, journal, (d.knob, path, want), written, holds)
        }
        _ => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_compare_as_text_masks_or_lists() {
        assert!(same_value("0\n", "0"));
        assert!(same_value("00000003", "3"));
        assert!(same_value("0-1", "0,1"));
        assert!(!same_value("1", "0"));
        assert!(!same_value("powersave", "performance"));
    }

    #[test]
    fn a_file_is_journalled_rewritten_and_an_unkept_value_is_said_unheld() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        let path = Path::new("/proc/sys/kernel/timer_migration");
        std::fs::create_dir_all(host.path("/proc/sys/kernel")).unwrap();
        std::fs::write(host.path(path), "1\n").unwrap();
        let jp = Path::new("/run/rtmgr/journal.jsonl");
        let mut j = Journal::create(&host, jp).unwrap();
        assert!(file(&host, "timer_migration", "t", path, "1").is_none());
        let d = file(&host, "timer_migration", "t", path, "0").unwrap();
        assert!(rewrite(&host, &mut j, &d, same_value).unwrap());
        assert_eq!(host.read(path).unwrap().trim(), "0");
        assert!(file(&host, "timer_migration", "t", path, "0").is_none());
        // A value the kernel does not keep: Unheld, once.
        let tm = ("timer_migration", path, "5");
        assert!(!check_held(&host, &mut j, tm, true, same_value).unwrap());
        let recs = crate::journal::read(&host, jp).unwrap().unwrap();
        assert_eq!(recs.len(), 2, "{recs:?}");
        assert!(unheld(&recs).contains(path));
    }
}
