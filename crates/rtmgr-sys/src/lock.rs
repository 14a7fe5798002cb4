//! One machine-wide lock for everything that changes the partition, IRQs or
//! runs latency measurements, so that two rtmgr processes (or two tests) never
//! interleave their changes (docs/architecture.md "Measuring": one measurement at a time).
//! An flock on /run/lock/rtmgr.lock, removed on release.

use rustix::fs::FlockOperation;
use rustix::io::Errno;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

pub const DEFAULT_LOCK_PATH: &str = "/run/lock/rtmgr.lock";

/// Held while alive; dropping it unlocks and removes the file.
pub struct MachineLock {
    file: File,
    path: PathBuf,
}

impl MachineLock {
    /// Block until the lock is ours.
    pub fn acquire(path: &Path) -> std::io::Result<Self> {
        Self::take(path, true).map(|l| l.expect("blocking lock"))
    }

    /// Take the lock if free, else None.
    pub fn try_acquire(path: &Path) -> std::io::Result<Option<Self>> {
        Self::take(path, false)
    }

    fn take(path: &Path, block: bool) -> std::io::Result<Option<Self>> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        loop {
            let file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(path)?;
            let op = if block {
                FlockOperation::LockExclusive
            } else {
                FlockOperation::NonBlockingLockExclusive
            };
            match rustix::fs::flock(&file, op) {
                Ok(()) => {}
                Err(Errno::WOULDBLOCK) => return Ok(None),
                Err(e) => return Err(crate::io_err(e)),
            }
            // The previous holder may have unlinked the file between our open and
            // our flock: then we hold a lock on a dead inode; start over.
            let same = match std::fs::metadata(path) {
                Ok(m) => m.ino() == file.metadata()?.ino(),
                Err(_) => false,
            };
            if same {
                return Ok(Some(MachineLock {
                    file,
                    path: path.to_path_buf(),
                }));
            }
        }
    }
}

impl Drop for MachineLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        // The flock goes with the descriptor when `file` drops.
        let _ = &self.file;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_taker_waits_and_file_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/rtmgr.lock");
        let first = MachineLock::acquire(&path).unwrap();
        assert!(MachineLock::try_acquire(&path).unwrap().is_none());
        drop(first);
        assert!(!path.exists());
        let again = MachineLock::try_acquire(&path).unwrap();
        assert!(again.is_some());
    }
}
