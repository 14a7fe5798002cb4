//! The daemon's own cgroup control files, held open (DROPS §4.1: the
//! resource manager answers while the kernel works; issue 27). A grant moves
//! its threads into an RT CPU's cpuset and reads the CPUs of the one they
//! leave, a release moves them back: held open, each is one pwrite(2) or
//! pread(2), not an open, the call and a close (docs/protocol.md, "How long
//! an answer takes").

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// At most this many files are held open; past it, all are closed and
/// opened again as they are used (the daemon uses a handful: `tasks` or
/// `cgroup.procs` and the CPUs of its NRT cgroup and of each RT CPU's).
const FILES_AT_MOST: usize = 64;

/// Files read through a held descriptor: the kernel writes these afresh for
/// each read at offset 0. Not a cgroup v1 `tasks` or `cgroup.procs` list: a
/// held descriptor gives the list it read last, for up to a second (the
/// kernel keeps it per open file; measured here, a thread moved in was not
/// in it).
const READ_AFRESH: &[&str] = &[
    "cpuset.effective_cpus",
    "cpuset.cpus",
    "cpuset.cpus.effective",
];

/// Control files under the directories named by `keep_under`, held open
/// once used: every file written, the CPU lists read (`READ_AFRESH`). A
/// held file whose cgroup was removed answers ENODEV: it is opened again by
/// its path, once, and the call made again.
#[derive(Debug, Default)]
pub struct KeptFiles {
    /// Directories (real paths) whose files are held; none until named.
    under: Mutex<Vec<PathBuf>>,
    files: Mutex<HashMap<(PathBuf, Access), Arc<File>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Access {
    Read,
    Write,
}

impl KeptFiles {
    /// Hold the files under `dirs` (real paths) from now on, and those only.
    pub fn keep_under(&self, dirs: impl IntoIterator<Item = PathBuf>) {
        *lock(&self.under) = dirs.into_iter().collect();
        lock(&self.files).clear();
    }

    /// Write `value` at offset 0 of `real` in one call, through its held
    /// descriptor; None when `real` is not under a directory named.
    pub fn write(&self, real: &Path, value: &str) -> Option<std::io::Result<()>> {
        self.covers(real).then(|| {
            self.with_file(real, Access::Write, |f| {
                let n = f.write_at(value.as_bytes(), 0)?;
                if n == value.len() {
                    Ok(())
                } else {
                    Err(std::io::Error::from(std::io::ErrorKind::WriteZero))
                }
            })
        })
    }

    /// The bytes of `real` read afresh from offset 0; None when it is not
    /// a CPU list (`READ_AFRESH`) under a directory named.
    pub fn read(&self, real: &Path) -> Option<std::io::Result<Vec<u8>>> {
        let afresh = real
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| READ_AFRESH.contains(&n));
        (afresh && self.covers(real))
            .then(|| self.with_file(real, Access::Read, super::read::read_again))
    }

    fn covers(&self, real: &Path) -> bool {
        lock(&self.under).iter().any(|d| real.starts_with(d))
    }

    /// `call` on the held file, opened if it is not; a file gone stale
    /// (its cgroup removed, and perhaps made again) is opened again once.
    fn with_file<T>(
        &self,
        real: &Path,
        access: Access,
        call: impl Fn(&File) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let key = (real.to_path_buf(), access);
        let held = lock(&self.files).get(&key).cloned();
        if let Some(f) = held {
            match call(&f) {
                Err(e) if e.raw_os_error() == Some(libc::ENODEV) => {}
                done => return done,
            }
        }
        let f = Arc::new(open(real, access)?);
        let out = call(&f);
        let mut files = lock(&self.files);
        if files.len() >= FILES_AT_MOST {
            files.clear();
        }
        files.insert(key, f);
        out
    }
}

fn open(real: &Path, access: Access) -> std::io::Result<File> {
    match access {
        Access::Read => File::open(real),
        Access::Write => std::fs::OpenOptions::new().write(true).open(real),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_under_the_directories_named_are_held() {
        let dir = tempfile::tempdir().unwrap();
        let kept = KeptFiles::default();
        let inside = dir.path().join("rtmgr-nrt");
        std::fs::create_dir(&inside).unwrap();
        let file = inside.join("cpuset.effective_cpus");
        std::fs::write(&file, "0\n").unwrap();
        assert!(kept.read(&file).is_none(), "nothing is named yet");
        kept.keep_under([inside.clone()]);
        let outside = dir.path().join("cpuset.effective_cpus");
        std::fs::write(&outside, "0-1\n").unwrap();
        assert!(kept.read(&outside).is_none());
        assert!(kept.write(&dir.path().join("tasks"), "1").is_none());
        assert_eq!(kept.read(&file).unwrap().unwrap(), b"0\n");
        // A task list read through a held descriptor would be stale.
        let tasks = inside.join("tasks");
        std::fs::write(&tasks, "1\n").unwrap();
        assert!(kept.read(&tasks).is_none());
    }

    #[test]
    fn a_held_file_is_read_afresh_and_written_at_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let kept = KeptFiles::default();
        kept.keep_under([dir.path().to_path_buf()]);
        let file = dir.path().join("cpuset.cpus");
        std::fs::write(&file, "").unwrap();
        kept.write(&file, "123").unwrap().unwrap();
        kept.write(&file, "456").unwrap().unwrap();
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "456");
        std::fs::write(&file, "0-1\n").unwrap();
        assert_eq!(kept.read(&file).unwrap().unwrap(), b"0-1\n");
    }

    #[test]
    fn a_missing_file_is_an_error_and_nothing_is_held() {
        let dir = tempfile::tempdir().unwrap();
        let kept = KeptFiles::default();
        kept.keep_under([dir.path().to_path_buf()]);
        let gone = dir.path().join("cpu9").join("tasks");
        let e = kept.write(&gone, "1").unwrap().unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
        assert!(lock(&kept.files).is_empty());
    }
}
