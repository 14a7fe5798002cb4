//! File descriptors the kernel makes for us: anonymous memory files (memfd),
//! POSIX shared-memory objects, and eventfd counters (budget-based RTAI §2:
//! RTAI_SHM segments; DROPS §5.3: the periodicity experiment's wake-ups).

use crate::io_err;
use rustix::fs::{MemfdFlags, SealFlags};
use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};

/// A fresh anonymous memory file (close-on-exec); `sealable` allows
/// [`seal_size`] on it.
pub fn memfd(name: &str, sealable: bool) -> io::Result<OwnedFd> {
    let mut flags = MemfdFlags::CLOEXEC;
    if sealable {
        flags |= MemfdFlags::ALLOW_SEALING;
    }
    rustix::fs::memfd_create(name, flags).map_err(io_err)
}

/// Set the size of the file behind `fd`.
pub fn truncate(fd: BorrowedFd<'_>, len: u64) -> io::Result<()> {
    rustix::fs::ftruncate(fd, len).map_err(io_err)
}

/// Forbid shrinking and growing the file (a memfd made sealable); files that
/// cannot be sealed refuse with EINVAL.
pub fn seal_size(fd: BorrowedFd<'_>) -> io::Result<()> {
    rustix::fs::fcntl_add_seals(fd, SealFlags::SHRINK | SealFlags::GROW).map_err(io_err)
}

/// Size in bytes of the file behind `fd`.
pub fn file_size(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let st = rustix::fs::fstat(fd).map_err(io_err)?;
    Ok(st.st_size.max(0) as u64)
}

/// `shm_open(name, O_RDWR | O_CLOEXEC [| O_CREAT | O_EXCL], 0600)`: open, or
/// create (failing if it exists), a POSIX shared-memory object.
pub fn shm_open(name: &CStr, create: bool) -> io::Result<OwnedFd> {
    let flags = if create {
        libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC
    } else {
        libc::O_RDWR | libc::O_CLOEXEC
    };
    // SAFETY: name is a valid NUL-terminated string.
    let fd = unsafe { libc::shm_open(name.as_ptr(), flags, 0o600) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Remove a POSIX shared-memory object (open descriptors keep working).
pub fn shm_unlink(name: &CStr) -> io::Result<()> {
    // SAFETY: name is a valid NUL-terminated string.
    if unsafe { libc::shm_unlink(name.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// An eventfd: a kernel counter one thread adds to and another sleeps on.
#[derive(Debug)]
pub struct EventCounter(OwnedFd);

impl EventCounter {
    pub fn new() -> io::Result<Self> {
        rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC)
            .map(EventCounter)
            .map_err(io_err)
    }

    /// Add `v` to the counter (wakes a waiter).
    pub fn add(&self, v: u64) {
        let _ = rustix::io::write(self.0.as_fd(), &v.to_ne_bytes());
    }

    /// Sleep until the counter is non-zero; return and reset it.
    pub fn wait(&self) -> u64 {
        let mut b = [0u8; 8];
        loop {
            if rustix::io::read(self.0.as_fd(), &mut b) == Ok(8) {
                return u64::from_ne_bytes(b);
            }
        }
    }
}

/// Wait until one of `fds` is readable or `timeout_ns` passes; true if one is.
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout_ns: u64) -> io::Result<bool> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut set: Vec<PollFd<'_>> = fds.iter().map(|f| PollFd::new(f, PollFlags::IN)).collect();
    let t = Timespec {
        tv_sec: (timeout_ns / 1_000_000_000) as _,
        tv_nsec: (timeout_ns % 1_000_000_000) as _,
    };
    match poll(&mut set, Some(&t)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memfd_size_and_seals() {
        let fd = memfd("rtmgr-sys-test", true).unwrap();
        truncate(fd.as_fd(), 4096).unwrap();
        assert_eq!(file_size(fd.as_fd()).unwrap(), 4096);
        seal_size(fd.as_fd()).unwrap();
        assert_eq!(
            truncate(fd.as_fd(), 10).unwrap_err().raw_os_error(),
            Some(libc::EPERM)
        );
        let plain = memfd("rtmgr-sys-test", false).unwrap();
        assert!(seal_size(plain.as_fd()).is_err());
    }

    #[test]
    fn shm_objects_are_created_once_and_unlinked() {
        let name =
            std::ffi::CString::new(format!("/rtmgr-sys-test-{}", std::process::id())).unwrap();
        let name = name.as_c_str();
        let _ = shm_unlink(name);
        let fd = shm_open(name, true).unwrap();
        assert_eq!(
            shm_open(name, true).unwrap_err().raw_os_error(),
            Some(libc::EEXIST)
        );
        drop(shm_open(name, false).unwrap());
        shm_unlink(name).unwrap();
        assert_eq!(
            shm_open(name, false).unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
        drop(fd);
    }

    #[test]
    fn event_counter_adds_up() {
        let e = EventCounter::new().unwrap();
        e.add(2);
        e.add(3);
        assert_eq!(e.wait(), 5);
    }

    #[test]
    fn wait_readable_times_out_then_sees_data() {
        use std::io::Write;
        let (r, mut w) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(!wait_readable(&[r.as_fd()], 1_000_000).unwrap());
        w.write_all(b"x").unwrap();
        assert!(wait_readable(&[r.as_fd()], 1_000_000_000).unwrap());
    }
}
