//! The resources journal (DESIGN.md: every change journalled before it takes
//! effect, undone exactly on stop, reset and after `kill -9`): the machine-wide
//! changes the daemon makes beside its partition — NRT memory limits and I/O
//! weights, the resctrl group and schemata, RT throttling, starvation boosts.
//! One JSON record per line, fsync'd before the change; a torn last line is
//! ignored (its change was never made). Per-grant changes (ioprio, cache
//! group membership) live in the grant's own record.

use crate::host::{Host, Result};
use crate::saved_attr::SavedAttr;
use crate::tasks;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Record {
    /// A control file's old content (machine path), written back verbatim.
    File { path: PathBuf, old: String },
    /// A directory (resctrl group) about to be created; removed on undo.
    Dir { path: PathBuf },
    /// A thread about to be boosted (starvation guard), with its old attributes.
    Boost {
        tid: u32,
        start_time: u64,
        old: SavedAttr,
    },
    /// That boost was put back.
    Unboost { tid: u32 },
}

/// The resources journal beside a partition journal.
pub fn path_beside(partition_journal: &Path) -> PathBuf {
    partition_journal.with_file_name("resources.jsonl")
}

/// Append-only writer.
pub struct ResourceJournal {
    file: std::fs::File,
    real: PathBuf,
}

impl ResourceJournal {
    pub fn open(host: &Host, path: &Path) -> Result<Self> {
        let (file, real) = crate::journal::open_append(host, path)?;
        Ok(ResourceJournal { file, real })
    }

    /// Write one record durably.
    pub fn record(&mut self, rec: &Record) -> Result<()> {
        crate::journal::append_line(&mut self.file, &self.real, rec)
    }

    /// Journal a file's old content, then write `new`. Ok(false): no such file.
    pub fn set_file(&mut self, host: &Host, path: &Path, new: &str) -> Result<bool> {
        let Some(old) = host.read_opt(path) else {
            return Ok(false);
        };
        self.record(&Record::File {
            path: path.into(),
            old: old.trim().to_string(),
        })?;
        host.write(path, new)?;
        Ok(true)
    }
}

/// The records of a resources journal; None when there is none.
pub fn read(host: &Host, path: &Path) -> Result<Option<Vec<Record>>> {
    crate::journal::read_lines(host, path)
}

/// Undo everything a resources journal records, newest first, and remove it
/// when all went back. Returns what could not be restored (journal kept).
pub fn restore(host: &Host, path: &Path) -> Result<Vec<String>> {
    let Some(records) = read(host, path)? else {
        return Ok(Vec::new());
    };
    let mut problems = Vec::new();
    let mut note = |what: String, r: Result<()>| {
        if let Err(e) = r {
            if !e.is_gone() {
                problems.push(format!("{what}: {e}"));
            }
        }
    };
    let unboosted: Vec<u32> = records
        .iter()
        .filter_map(|r| match r {
            Record::Unboost { tid } => Some(*tid),
            _ => None,
        })
        .collect();
    for r in records.iter().rev() {
        match r {
            Record::File { path, old } => {
                note(format!("restore {}", path.display()), host.write(path, old))
            }
            Record::Dir { path } => {
                if host.exists(path) {
                    note(format!("remove {}", path.display()), host.rmdir(path));
                }
            }
            Record::Boost {
                tid,
                start_time,
                old,
            } => {
                if !unboosted.contains(tid) && tasks::same_task(host, *tid, *start_time) {
                    note(
                        format!("thread {tid} policy"),
                        host.set_attr(*tid, &(*old).into()),
                    );
                }
            }
            Record::Unboost { .. } => {}
        }
    }
    if problems.is_empty() {
        let real = host.path(path);
        match std::fs::remove_file(&real) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                problems.push(format!("remove {}: {e}", real.display()))
            }
            _ => {}
        }
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn files_and_dirs_go_back_newest_first_and_a_torn_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        let knob = Path::new("/sys/fs/cgroup/memory/a/memory.limit_in_bytes");
        std::fs::create_dir_all(host.path(knob.parent().unwrap())).unwrap();
        std::fs::write(host.path(knob), "9223372036854771712\n").unwrap();
        let jp = Path::new("/run/rtmgr/resources.jsonl");
        let mut j = ResourceJournal::open(&host, jp).unwrap();
        assert!(j.set_file(&host, knob, "1073741824").unwrap());
        assert!(j.set_file(&host, knob, "2147483648").unwrap());
        assert!(!j.set_file(&host, Path::new("/nope"), "1").unwrap());
        std::fs::OpenOptions::new()
            .append(true)
            .open(host.path(jp))
            .unwrap()
            .write_all(b"{\"op\":\"fi")
            .unwrap();
        assert_eq!(read(&host, jp).unwrap().unwrap().len(), 2);
        assert!(restore(&host, jp).unwrap().is_empty());
        assert_eq!(
            std::fs::read_to_string(host.path(knob)).unwrap().trim(),
            "9223372036854771712"
        );
        assert!(read(&host, jp).unwrap().is_none());
    }
}
