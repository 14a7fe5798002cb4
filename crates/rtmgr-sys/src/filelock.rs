//! Advisory file locks for the kernel-lock load (ARTiS §3.1 "kernel locks"):
//! whole-file `flock` and byte-range open-file-description (OFD) `fcntl`
//! locks. Both belong to an open file description, not to a process, so two
//! threads that opened the same file separately contend for them.

use crate::io_err;
use rustix::fs::FlockOperation;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;

/// Take (waiting for it) or drop an exclusive `flock` on the whole file.
pub fn flock_exclusive(file: &File, lock: bool) -> io::Result<()> {
    let op = if lock {
        FlockOperation::LockExclusive
    } else {
        FlockOperation::Unlock
    };
    rustix::fs::flock(file, op).map_err(io_err)
}

/// Take (waiting for it) or drop an exclusive OFD lock on bytes
/// `start..start + len` (`F_OFD_SETLKW`, Linux ≥ 3.15).
pub fn ofd_lock_range(file: &File, start: u64, len: u64, lock: bool) -> io::Result<()> {
    // SAFETY: `flock` is a plain C struct for which all-zero bytes are valid.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_type = if lock { libc::F_WRLCK } else { libc::F_UNLCK } as _;
    fl.l_whence = libc::SEEK_SET as _;
    fl.l_start = start as _;
    fl.l_len = len as _;
    fl.l_pid = 0; // required by OFD locks
    loop {
        // SAFETY: F_OFD_SETLKW reads the `flock` we own and pass by pointer;
        // the descriptor is valid while `file` is borrowed.
        let r = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLKW, &fl) };
        if r == 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    /// Two descriptions of one file exclude each other; a holder's unlock lets the waiter in.
    fn excludes(lock: fn(&File, bool) -> io::Result<()>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l");
        let a = File::create(&path).unwrap();
        lock(&a, true).unwrap();
        let got = Arc::new(AtomicBool::new(false));
        let (p, g) = (path.clone(), got.clone());
        let t = std::thread::spawn(move || {
            let b = std::fs::OpenOptions::new().write(true).open(p).unwrap();
            lock(&b, true).unwrap();
            g.store(true, Ordering::SeqCst);
            lock(&b, false).unwrap();
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(
            !got.load(Ordering::SeqCst),
            "second description got the lock"
        );
        lock(&a, false).unwrap();
        t.join().unwrap();
        assert!(got.load(Ordering::SeqCst));
    }

    #[test]
    fn flock_excludes_another_description() {
        excludes(flock_exclusive);
    }

    #[test]
    fn ofd_lock_excludes_another_description_in_the_same_process() {
        excludes(|f, lock| ofd_lock_range(f, 0, 1, lock));
    }
}
