//! The grants journal (docs/architecture.md: every change is journalled before it is
//! made; DROPS §4.1: the manager knows everything it handed out): one JSON
//! record per line, fsync'd before the grant it describes takes effect, with
//! the old value of everything a grant changes (policy, cpuset, affinity,
//! limits, IRQ mask). After a `kill -9` the next daemon (or `rtmgr partition
//! reset`) reads it to re-adopt or revoke. It lives beside the partition
//! journal and is compacted so that released grants do not pile up.

use crate::host::{Host, Limit, LimitKind, Result};
use crate::journal::io;
use rtmgr_core::admission::Demand;
use rtmgr_core::CpuSet;
use rtmgr_sys::sched::SchedAttr;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const GRANTS_VERSION: u32 = 1;
/// Compact the file once this many released grants are in it. A
/// compaction holds the request loop ~0.3 ms (rewrite, rename, reopen;
/// ext4 here), whatever the count; the file it replaced is closed off the
/// loop (`Retired`).
const COMPACT_AFTER: usize = 64;

/// One thread before its grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadBefore {
    pub tid: u32,
    pub start_time: u64,
    pub attr: SchedAttr,
    pub affinity: CpuSet,
    /// Its cpuset cgroup, relative to the mount (None: unknown, or v2).
    pub cgroup: Option<String>,
    /// The CPUs that cpuset allowed at the grant (None: unknown, or a
    /// record written before issue 30): an `affinity` covering them was the
    /// kernel's, not the program's, and is not written back (`grant::placement`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpuset_cpus: Option<CpuSet>,
    /// No SCHED_DEADLINE for it before this (CLOCK_MONOTONIC, ns): it left
    /// an earlier hard grant with its budget spent, and its old server's
    /// 0-lag time was still ahead at this grant (`daemon/zero_lag.rs`).
    /// Journalled so that a daemon restarted during the hold keeps it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_until_ns: Option<u64>,
}

/// A limit before and after the grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitChange {
    pub kind: LimitKind,
    pub old: Limit,
    pub new: Limit,
}

/// Everything one grant changes, with the old values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    pub id: u64,
    pub pid: u32,
    pub pid_start: u64,
    pub uid: u32,
    pub name: Option<String>,
    pub cpu: u32,
    /// "rt0" or "rt1:PRIO".
    pub class: String,
    pub demand: Demand,
    pub threads: Vec<ThreadBefore>,
    pub limits: Vec<LimitChange>,
    /// (IRQ, its raw smp_affinity before).
    pub irq: Option<(u32, String)>,
    /// The cpuset the threads were put in (machine path), if any.
    pub cgroup: Option<PathBuf>,
    pub response_ns: u64,
    /// Locked memory, I/O class, cache group (issue 13).
    #[serde(default, skip_serializing_if = "is_default")]
    pub resources: crate::resources::grant::GrantResources,
}

fn is_default(r: &crate::resources::grant::GrantResources) -> bool {
    *r == Default::default()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Record {
    /// First record: a daemon started and owns the partition of this journal.
    Serve {
        version: u32,
        partition_journal: PathBuf,
        started_unix_s: u64,
    },
    /// The partition journal it applied (its inode), written right after apply.
    Owned { inode: u64 },
    /// A grant about to take effect.
    Grant(Box<Grant>),
    /// A grant whose policies were given back; its placement follows a
    /// period later (see `grant::revoke_policy`).
    Revoking { id: u64 },
    /// A grant about to be revoked (or fully revoked after `Revoking`).
    Release { id: u64 },
}

/// What a grants journal says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JournalState {
    /// The partition journal the writing daemon owned.
    pub partition_journal: Option<PathBuf>,
    pub owned_inode: Option<u64>,
    /// Grants not released, oldest first.
    pub live: Vec<Grant>,
    /// Grants half revoked (policies given back, placement not yet).
    pub releasing: Vec<Grant>,
    pub released: usize,
    pub max_id: u64,
}

impl JournalState {
    /// Every grant not fully released, oldest first.
    pub fn all(&self) -> Vec<Grant> {
        let mut v: Vec<Grant> = self.live.iter().chain(&self.releasing).cloned().collect();
        v.sort_by_key(|g| g.id);
        v
    }
}

/// Append-only writer.
pub struct GrantJournal {
    file: std::fs::File,
    real: PathBuf,
    released: usize,
    /// Files that compaction replaced, closed on a thread of their own.
    retired: Option<Retired>,
}

/// The thread that closes the files compaction replaced. The last close
/// of a file renamed over frees its inode, and on ext4 waits for its
/// pages' writeback: 0.5–0.9 ms measured on this VM's disk (where /run is
/// not tmpfs), once every `COMPACT_AFTER` releases, with every client's
/// answer waiting behind it on the request loop. At SCHED_OTHER (the loop
/// forks with SCHED_RESET_ON_FORK), so that it runs when the loop waits.
struct Retired {
    to_close: std::sync::mpsc::Sender<std::fs::File>,
    thread: std::thread::JoinHandle<()>,
}

impl Retired {
    fn spawn() -> std::io::Result<Retired> {
        let (to_close, closing) = std::sync::mpsc::channel::<std::fs::File>();
        let thread = std::thread::Builder::new()
            .name("rtmgr-close".into())
            .spawn(move || closing.iter().for_each(drop))?;
        Ok(Retired { to_close, thread })
    }
}

impl Drop for GrantJournal {
    /// Every replaced file is closed when the journal is.
    fn drop(&mut self) {
        if let Some(r) = self.retired.take() {
            drop(r.to_close);
            let _ = r.thread.join();
        }
    }
}

impl GrantJournal {
    /// Open (creating if needed) to append.
    pub fn open(host: &Host, path: &Path) -> Result<Self> {
        let (file, real) = crate::journal::open_append(host, path)?;
        Ok(GrantJournal {
            file,
            real,
            released: 0,
            retired: None,
        })
    }

    /// Write one record before the change it describes: into the page
    /// cache, not synced (`journal::Durability::Written`: a later daemon or
    /// `partition reset` reads it after a `kill -9`; after a crash of the
    /// machine there is no grant left to undo).
    pub fn record(&mut self, rec: &Record) -> Result<()> {
        use crate::journal::{append_line, Durability};
        append_line(&mut self.file, &self.real, rec, Durability::Written)?;
        if matches!(rec, Record::Release { .. }) {
            self.released += 1;
        }
        Ok(())
    }

    /// Compact when enough released grants accumulated: rewrite the file
    /// with `header` and `live` only (a new file renamed over the old one,
    /// so a crash leaves either the old or the new, never half).
    pub fn maybe_compact(
        &mut self,
        header: &[Record],
        live: &[&Grant],
        releasing: &[&Grant],
    ) -> Result<bool> {
        if self.released < COMPACT_AFTER {
            return Ok(false);
        }
        self.rewrite(header, live, releasing)?;
        Ok(true)
    }

    pub fn rewrite(
        &mut self,
        header: &[Record],
        live: &[&Grant],
        releasing: &[&Grant],
    ) -> Result<()> {
        let tmp = self.real.with_extension("jsonl.tmp");
        let mut text = String::new();
        let grants = live
            .iter()
            .chain(releasing)
            .map(|g| Record::Grant(Box::new((*g).clone())));
        let half = releasing.iter().map(|g| Record::Revoking { id: g.id });
        for r in header.iter().cloned().chain(grants).chain(half) {
            text.push_str(&serde_json::to_string(&r).expect("records serialize"));
            text.push('\n');
        }
        let mut f = std::fs::File::create(&tmp).map_err(|e| io("create", &tmp, e))?;
        // Renamed over the old file: a reader sees the old or the new one
        // whole, after a `kill -9` too (no sync, as `record`).
        f.write_all(text.as_bytes())
            .map_err(|e| io("write", &tmp, e))?;
        std::fs::rename(&tmp, &self.real).map_err(|e| io("rename", &self.real, e))?;
        let new = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.real)
            .map_err(|e| io("open", &self.real, e))?;
        drop(f);
        let old = std::mem::replace(&mut self.file, new);
        self.released = 0;
        self.retire(old);
        Ok(())
    }

    /// Close a replaced file off this thread (`Retired`); here when no
    /// thread can be had.
    fn retire(&mut self, old: std::fs::File) {
        if self.retired.is_none() {
            self.retired = Retired::spawn()
                .map_err(|e| tracing::debug!("replaced journal files closed inline: {e}"))
                .ok();
        }
        if let Some(r) = &self.retired {
            // Sent or not (the thread gone), it is closed.
            let _ = r.to_close.send(old);
        }
    }
}

/// Read a grants journal; None when there is none. A torn last line (the
/// writer was killed mid-write) is ignored: its change was never made.
pub fn read(host: &Host, path: &Path) -> Result<Option<JournalState>> {
    let Some(records) = crate::journal::read_lines::<Record>(host, path)? else {
        return Ok(None);
    };
    let mut st = JournalState::default();
    for rec in records {
        match rec {
            Record::Serve {
                partition_journal, ..
            } => {
                st.partition_journal = Some(partition_journal);
                st.owned_inode = None;
            }
            Record::Owned { inode } => st.owned_inode = Some(inode),
            Record::Grant(g) => {
                st.max_id = st.max_id.max(g.id);
                st.live.push(*g);
            }
            Record::Revoking { id } => {
                if let Some(i) = st.live.iter().position(|g| g.id == id) {
                    st.releasing.push(st.live.remove(i));
                }
            }
            Record::Release { id } => {
                st.live.retain(|g| g.id != id);
                st.releasing.retain(|g| g.id != id);
                st.released += 1;
            }
        }
    }
    Ok(Some(st))
}

/// Remove the journal (a clean stop with nothing granted).
pub fn remove(host: &Host, path: &Path) -> Result<()> {
    let real = host.path(path);
    match std::fs::remove_file(&real) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io("remove", &real, e)),
    }
}

/// The inode of a file (which partition journal a daemon applied).
pub fn inode(host: &Host, path: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(host.path(path)).ok().map(|m| m.ino())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtmgr_core::admission::Kind;

    pub(crate) fn grant(id: u64) -> Grant {
        Grant {
            id,
            pid: 10,
            pid_start: 5,
            uid: 0,
            name: None,
            cpu: 1,
            class: "rt0".into(),
            demand: Demand::new(4_000_000, 1_000_000, None, Kind::Hard).unwrap(),
            threads: vec![],
            limits: vec![],
            irq: Some((41, "3".into())),
            cgroup: None,
            response_ns: 0,
            resources: Default::default(),
        }
    }

    #[test]
    fn grants_fold_compact_and_survive_a_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        let path = Path::new("/run/rtmgr/grants.jsonl");
        let mut j = GrantJournal::open(&host, path).unwrap();
        let header = [
            Record::Serve {
                version: GRANTS_VERSION,
                partition_journal: "/run/rtmgr/journal.jsonl".into(),
                started_unix_s: 1,
            },
            Record::Owned { inode: 77 },
        ];
        for r in &header {
            j.record(r).unwrap();
        }
        let last = COMPACT_AFTER as u64 + 6;
        for id in 1..=last {
            j.record(&Record::Grant(Box::new(grant(id)))).unwrap();
            if id != last {
                j.record(&Record::Release { id }).unwrap();
            }
        }
        let st = read(&host, path).unwrap().unwrap();
        assert_eq!(st.live.len(), 1);
        assert_eq!(
            (st.max_id, st.released, st.owned_inode),
            (last, last as usize - 1, Some(77))
        );
        let keep = st.live[0].clone();
        assert!(j.maybe_compact(&header, &[&keep], &[]).unwrap());
        let text = std::fs::read_to_string(host.path(path)).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert!(
            j.retired.is_some(),
            "the replaced file went to the closing thread"
        );
        // A torn record after compaction: ignored.
        std::fs::OpenOptions::new()
            .append(true)
            .open(host.path(path))
            .unwrap()
            .write_all(b"{\"op\":\"grant\",\"id\":")
            .unwrap();
        let st = read(&host, path).unwrap().unwrap();
        assert_eq!(st.live, vec![keep]);
        remove(&host, path).unwrap();
        assert!(read(&host, path).unwrap().is_none());
    }

    /// The files compaction replaced are closed by the time the journal
    /// is (on their own thread meanwhile): none is left open, deleted.
    #[test]
    fn the_files_compaction_replaced_are_closed() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        let path = Path::new("/grants.jsonl");
        let mut j = GrantJournal::open(&host, path).unwrap();
        for id in 1..=3 * COMPACT_AFTER as u64 {
            j.record(&Record::Grant(Box::new(grant(id)))).unwrap();
            j.record(&Record::Release { id }).unwrap();
            j.maybe_compact(&[], &[], &[]).unwrap();
        }
        let real = host.path(path);
        let open_here = || {
            std::fs::read_dir("/proc/self/fd")
                .unwrap()
                .filter_map(|e| std::fs::read_link(e.unwrap().path()).ok())
                .filter(|l| l.to_string_lossy().starts_with(&*real.to_string_lossy()))
                .count()
        };
        let closed_meanwhile = (0..1000).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(1));
            open_here() == 1
        });
        assert!(
            closed_meanwhile,
            "the journal's file, not those it replaced"
        );
        drop(j);
        assert_eq!(open_here(), 0);
    }

    /// Issue 30: a revocation is `Revoking`, undo, `Release`. Killed after
    /// the first record, or its undo failed (no `Release`), the grant is
    /// still there for the next daemon or `partition reset` to finish.
    #[test]
    fn a_revocation_without_its_release_is_left_to_finish() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        let path = Path::new("/grants.jsonl");
        let mut j = GrantJournal::open(&host, path).unwrap();
        for id in [1, 2] {
            j.record(&Record::Grant(Box::new(grant(id)))).unwrap();
            j.record(&Record::Revoking { id }).unwrap();
        }
        j.record(&Record::Release { id: 2 }).unwrap();
        let st = read(&host, path).unwrap().unwrap();
        assert!(st.live.is_empty());
        assert_eq!(st.all(), vec![grant(1)]);
    }

    #[test]
    fn a_corrupt_line_before_the_last_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        let path = Path::new("/grants.jsonl");
        std::fs::write(host.path(path), "{\"op\":\"owned\",\"inode\":7}\ngarbage\n").unwrap();
        let e = read(&host, path).unwrap_err().to_string();
        assert!(e.contains("line 2"), "{e}");
    }

    /// A thread's old attributes as rtmgr wrote them before `SchedAttr`
    /// was journalled itself: read and written back byte for byte.
    #[test]
    fn a_thread_record_of_the_earlier_form_round_trips_byte_identical() {
        let line = r#"{"tid":500,"start_time":9,"attr":{"policy":6,"flags":1,"nice":-5,"priority":0,"runtime":1000,"deadline":2000,"period":3000},"affinity":"0-1","cgroup":"/"}"#;
        let t: ThreadBefore = serde_json::from_str(line).unwrap();
        assert_eq!((t.attr.policy, t.attr.nice, t.attr.period), (6, -5, 3000));
        assert_eq!(serde_json::to_string(&t).unwrap(), line);
    }
}
