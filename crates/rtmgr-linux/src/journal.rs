//! The undo journal (docs/architecture.md: every change is first written to a journal and
//! can be undone exactly, also after a crash). One JSON record per line,
//! appended and fsync'd *before* the change it describes, so that after a
//! `kill -9` at any point the journal holds the old value of everything that
//! may have changed. A torn last line (killed mid-write) is ignored: its change
//! was never made.

use crate::cgroup::Layout;
use crate::host::{Host, HostError, Result};
use rtmgr_core::partition::{ApplyReport, PartitionPlan};
use rtmgr_core::CpuSet;
use rtmgr_sys::sched::SchedAttr;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};

pub const DEFAULT_JOURNAL: &str = "/run/rtmgr/journal.jsonl";
pub const JOURNAL_VERSION: u32 = 1;

/// What a task looked like before rtmgr touched it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskBefore {
    pub tid: u32,
    pub start_time: u64,
    /// cpuset cgroup, relative to the mount (None if unknown).
    pub cgroup: Option<String>,
    pub affinity: CpuSet,
}

/// What a task had before the live balancer first changed it (lent it an RT
/// CPU, or held an RT1+ task on the NRT CPUs): what giving it back restores.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lent {
    pub tid: u32,
    pub start_time: u64,
    pub affinity: CpuSet,
    /// The CPUs its cpuset allowed then (`cgroup::mask_to_give_back`).
    pub cpuset_cpus: Option<CpuSet>,
    /// Its cpuset cgroup directory (machine path).
    pub cgroup: Option<PathBuf>,
    /// Its policy, when the balancer changes it (a Linux guest at SCHED_IDLE).
    pub policy: Option<crate::sched::Policy>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Record {
    /// First record: what is being applied, and where.
    Begin {
        version: u32,
        plan: PartitionPlan,
        layout: Layout,
        rt_cgroup: PathBuf,
        nrt_cgroup: Option<PathBuf>,
    },
    /// A control file's old content (machine path), restored verbatim by the
    /// knob that wrote it (journals of older rtmgr versions name none).
    File {
        path: PathBuf,
        old: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        knob: Option<String>,
    },
    /// The cpuset controller about to be enabled in a v2 subtree_control; reset disables it.
    ControllerEnabled { path: PathBuf },
    /// A cgroup directory about to be created; reset removes it.
    CgroupCreated { path: PathBuf },
    /// Every task's cgroup and affinity, before any task was moved.
    Tasks { tasks: Vec<TaskBefore> },
    /// Every IRQ's raw smp_affinity mask, before any was changed.
    Irqs { masks: Vec<(u32, String)> },
    /// A process put into an rtmgr cpuset after apply (e.g. by `rtmgr run`).
    Entered {
        pid: u32,
        start_time: u64,
        from: Option<String>,
    },
    /// The CPUs a running irqbalance banned before rtmgr banned the RT CPUs
    /// through its socket; reset gives it back this ban (`NULL` = its own rules).
    Irqbalance {
        pid: u32,
        start_time: u64,
        socket: PathBuf,
        restore: String,
    },
    /// Apply finished; the partition is complete.
    Applied { report: ApplyReport },
    /// A file the kernel refused or did not keep at the value a knob wrote:
    /// its knob's `verify` does not expect that value there any more.
    Unheld { path: PathBuf, knob: String },
    /// A directory (the resctrl group of the `cache` resource knob) about to
    /// be created; reset removes it. (Also the record of an older rtmgr's
    /// resources.jsonl, which named no knob.)
    Dir {
        path: PathBuf,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        knob: Option<String>,
    },
    /// A kernel thread about to be boosted by the starvation guard, with its
    /// old scheduling attributes; reset puts them back unless `Unboost` follows.
    Boost {
        tid: u32,
        start_time: u64,
        old: SchedAttr,
    },
    /// That boost was put back.
    Unboost { tid: u32 },
    /// A task about to be changed by the live balancer, with what it had;
    /// reset (or the next run) gives it back unless `GivenBack` follows.
    Lend(Lent),
    /// That task was given back when its balancer run ended (or was found
    /// gone): nothing of it to undo.
    GivenBack { tid: u32 },
    /// A superblock option about to be added to the filesystem mounted at
    /// `mount_point` (cgroup2's `favordynmods`); reset removes it again.
    MountOption {
        mount_point: PathBuf,
        option: String,
        knob: String,
    },
}

/// Append-only writer.
pub struct Journal {
    file: std::fs::File,
    path: PathBuf,
}

impl Journal {
    /// Create a new journal; fails if one exists (a partition is applied).
    pub fn create(host: &Host, path: &Path) -> Result<Self> {
        let real = host.path(path);
        if let Some(dir) = real.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io("mkdir", dir, e))?;
        }
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&real)
            .map_err(|e| io("create", &real, e))?;
        Ok(Journal { file, path: real })
    }

    /// Open an existing journal to append (e.g. `Entered` records).
    pub fn append_to(host: &Host, path: &Path) -> Result<Self> {
        let real = host.path(path);
        let file = std::fs::OpenOptions::new()
            .append(true)
            .open(&real)
            .map_err(|e| io("open", &real, e))?;
        Ok(Journal { file, path: real })
    }

    /// Write one record durably before the change it describes is made.
    pub fn record(&mut self, rec: &Record) -> Result<()> {
        self.record_with(rec, Durability::Synced)
    }

    /// Write one record before its change, as durable as `durability` says.
    /// Every writer of a journal (the daemon, its starvation guard, the
    /// balancer) holds its own O_APPEND descriptor and writes a record in one
    /// write(2) of one line: records of concurrent writers never interleave.
    pub(crate) fn record_with(&mut self, rec: &Record, durability: Durability) -> Result<()> {
        append_line(&mut self.file, &self.path, rec, durability)
    }
}

/// Open (creating it and its directory) a journal file to append.
pub(crate) fn open_append(host: &Host, path: &Path) -> Result<(std::fs::File, PathBuf)> {
    let real = host.path(path);
    if let Some(dir) = real.parent() {
        std::fs::create_dir_all(dir).map_err(|e| io("mkdir", dir, e))?;
    }
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&real)
        .map_err(|e| io("open", &real, e))?;
    Ok((file, real))
}

/// How far a journal line must reach before the change it describes is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// On the disk (`fdatasync`): the partition journal, written when a
    /// partition is applied or reset, a knob repaired or a kernel thread
    /// boosted: never on a client's request path.
    Synced,
    /// In the kernel's page cache (`write(2)` returned): what a `kill -9`
    /// of the writer needs, since any later process reads the same cache.
    /// The grants journal, and the balancer's lends in the partition
    /// journal: they describe scheduling state that does not survive the
    /// machine itself, so a sync would buy nothing and cost a disk flush
    /// (1–10 ms on this VM's virtio disk) on every request or lend.
    Written,
}

/// Append one JSON record as a line, made as durable as `durability` says.
pub(crate) fn append_line(
    file: &mut std::fs::File,
    real: &Path,
    rec: &impl Serialize,
    durability: Durability,
) -> Result<()> {
    let mut line = serde_json::to_string(rec).map_err(|e| HostError::Parse {
        path: real.display().to_string(),
        msg: e.to_string(),
    })?;
    line.push('\n');
    file.write_all(line.as_bytes())
        .and_then(|_| match durability {
            Durability::Synced => file.sync_data(),
            Durability::Written => Ok(()),
        })
        .map_err(|e| io("write", real, e))
}

/// An I/O error on a journal file.
pub(crate) fn io(op: &'static str, p: &Path, source: std::io::Error) -> HostError {
    HostError::Io {
        op,
        path: p.display().to_string(),
        source,
    }
}

/// Read every complete record; None if there is no journal.
pub fn read(host: &Host, path: &Path) -> Result<Option<Vec<Record>>> {
    read_lines(host, path)
}

/// Every complete JSON record of a journal file, a torn last line ignored;
/// None if there is no such file.
pub(crate) fn read_lines<T: serde::de::DeserializeOwned>(
    host: &Host,
    path: &Path,
) -> Result<Option<Vec<T>>> {
    let real = host.path(path);
    let text = match std::fs::read_to_string(&real) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("read", &real, e)),
    };
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        match serde_json::from_str::<T>(line) {
            Ok(r) => out.push(r),
            // A torn final line: the process died while writing it.
            Err(_) if i + 1 == lines.len() && !text.ends_with('\n') => break,
            Err(e) => {
                return Err(HostError::Parse {
                    path: real.display().to_string(),
                    msg: format!("line {}: {e}", i + 1),
                })
            }
        }
    }
    Ok(Some(out))
}

/// Remove the journal and its directory when empty.
pub fn remove(host: &Host, path: &Path) -> Result<()> {
    let real = host.path(path);
    match std::fs::remove_file(&real) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("remove", &real, e)),
    }
    if let Some(dir) = real.parent() {
        let _ = std::fs::remove_dir(dir); // only succeeds when empty
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_torn_tail_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        let path = Path::new("/run/rtmgr/journal.jsonl");
        let mut j = Journal::create(&host, path).unwrap();
        let rec = Record::File {
            path: "/proc/irq/default_smp_affinity".into(),
            old: "3".into(),
            knob: Some("defaults".into()),
        };
        j.record(&rec).unwrap();
        assert!(
            Journal::create(&host, path).is_err(),
            "second journal must be refused"
        );
        drop(j);
        // Simulate a kill -9 in the middle of the next record.
        let real = host.path(path);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&real)
            .unwrap();
        f.write_all(b"{\"op\":\"irqs\",\"mas").unwrap();
        let recs = read(&host, path).unwrap().unwrap();
        assert_eq!(recs, vec![rec]);
        remove(&host, path).unwrap();
        assert!(read(&host, path).unwrap().is_none());
        assert!(!host.path("/run/rtmgr").exists());
    }

    /// A boost as rtmgr wrote it before `SchedAttr` was journalled itself:
    /// read and written back byte for byte.
    #[test]
    fn a_boost_record_of_the_earlier_form_round_trips_byte_identical() {
        let line = r#"{"op":"boost","tid":100,"start_time":1100,"old":{"policy":1,"flags":0,"nice":0,"priority":10,"runtime":0,"deadline":0,"period":0}}"#;
        let rec: Record = serde_json::from_str(line).unwrap();
        let Record::Boost { old, .. } = &rec else {
            panic!("{rec:?}")
        };
        assert_eq!((old.policy, old.priority), (1, 10));
        assert_eq!(serde_json::to_string(&rec).unwrap(), line);
    }

    #[test]
    fn corrupt_middle_line_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        let path = Path::new("/j.jsonl");
        std::fs::write(
            host.path(path),
            "garbage\n{\"op\":\"entered\",\"pid\":1,\"start_time\":2,\"from\":null}\n",
        )
        .unwrap();
        assert!(read(&host, path).is_err());
    }
}
