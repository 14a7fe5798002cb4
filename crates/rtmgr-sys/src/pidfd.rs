//! Process handles that cannot be confused with a later process of the same
//! id (DROPS §4.1: a resource granted to a task returns when the task goes;
//! rtkit checks pid plus start time, a pidfd does better): `pidfd_open`, the
//! peer of a Unix socket as a pidfd (SO_PEERPIDFD, Linux 6.5), and `poll`
//! over many descriptors.

use crate::io_err;
use rustix::event::{PollFd, PollFlags};
use rustix::process::{Pid, PidfdFlags};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// A process, held by a pidfd: readable once the process has exited.
#[derive(Debug)]
pub struct Pidfd(OwnedFd);

/// `PIDFD_THREAD` (Linux 6.9, include/uapi/linux/pidfd.h, = O_EXCL): a
/// pidfd for one thread, readable once that thread has exited.
const PIDFD_THREAD: u32 = libc::O_EXCL as u32;

impl Pidfd {
    /// `pidfd_open(pid)`: ESRCH when no such process.
    pub fn open(pid: u32) -> io::Result<Pidfd> {
        open_with(pid, PidfdFlags::empty())
    }

    /// `pidfd_open(tid, PIDFD_THREAD)`: one thread, leader or not, readable
    /// once that thread has exited (Linux 6.9; EINVAL before).
    pub fn open_thread(tid: u32) -> io::Result<Pidfd> {
        open_with(tid, PidfdFlags::from_bits_retain(PIDFD_THREAD))
    }

    /// Has the process exited (the pidfd is readable)?
    pub fn exited(&self) -> bool {
        matches!(poll_readable(&[self.0.as_fd()], 0), Ok(r) if r[0])
    }
}

fn open_with(pid: u32, flags: PidfdFlags) -> io::Result<Pidfd> {
    let raw = i32::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let pid = Pid::from_raw(raw).ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
    rustix::process::pidfd_open(pid, flags)
        .map(Pidfd)
        .map_err(io_err)
}

impl AsFd for Pidfd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// Wait up to `timeout_ms` (-1: forever) for any of `fds` to become readable
/// (or hang up); returns which are. EINTR counts as "none yet".
pub fn poll_readable(fds: &[BorrowedFd<'_>], timeout_ms: i32) -> io::Result<Vec<bool>> {
    let mut set: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(fd, PollFlags::IN))
        .collect();
    let timeout = (timeout_ms >= 0).then(|| rustix::event::Timespec {
        tv_sec: i64::from(timeout_ms / 1000),
        tv_nsec: i64::from(timeout_ms % 1000) * 1_000_000,
    });
    match rustix::event::poll(&mut set, timeout.as_ref()) {
        Ok(_) => {}
        Err(rustix::io::Errno::INTR) => return Ok(vec![false; fds.len()]),
        Err(e) => return Err(io_err(e)),
    }
    Ok(set
        .iter()
        .map(|p| {
            p.revents()
                .intersects(PollFlags::IN | PollFlags::HUP | PollFlags::ERR)
        })
        .collect())
}

/// Who is at the other end of a Unix socket (SO_PEERCRED, taken at connect).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCred {
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

pub fn peer_cred(sock: BorrowedFd<'_>) -> io::Result<PeerCred> {
    let c = rustix::net::sockopt::socket_peercred(sock).map_err(io_err)?;
    Ok(PeerCred {
        pid: c.pid.as_raw_nonzero().get() as u32,
        uid: c.uid.as_raw(),
        gid: c.gid.as_raw(),
    })
}

/// SO_PEERPIDFD (Linux ≥ 6.5): the peer as a pidfd, with no window in which
/// its pid could be reused. None on older kernels.
pub fn peer_pidfd(sock: BorrowedFd<'_>) -> io::Result<Option<Pidfd>> {
    const SO_PEERPIDFD: libc::c_int = 77;
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `fd`, a c_int.
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return match e.raw_os_error() {
            Some(libc::ENOPROTOOPT) | Some(libc::EINVAL) => Ok(None),
            _ => Err(e),
        };
    }
    if fd < 0 {
        return Ok(None);
    }
    // SAFETY: the kernel just gave us this descriptor; we own it.
    Ok(Some(Pidfd(unsafe { OwnedFd::from_raw_fd(fd) })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_child_is_watched_until_it_exits() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .unwrap();
        let fd = Pidfd::open(child.id()).unwrap();
        assert!(!fd.exited());
        let r = poll_readable(&[fd.as_fd()], 5000).unwrap();
        assert!(r[0]);
        assert!(fd.exited());
        child.wait().unwrap();
        assert!(Pidfd::open(u32::MAX).is_err());
    }

    #[test]
    fn a_thread_is_watched_until_it_exits_not_its_process() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(crate::sched::gettid() as u32).unwrap();
            wait.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        let fd = match Pidfd::open_thread(tid) {
            Ok(fd) => fd,
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                eprintln!("skipped: no PIDFD_THREAD before Linux 6.9 ({e})");
                go.send(()).unwrap();
                t.join().unwrap();
                return;
            }
            Err(e) => panic!("pidfd_open(PIDFD_THREAD): {e}"),
        };
        assert!(!fd.exited(), "the thread is alive");
        assert!(
            Pidfd::open(tid).is_err(),
            "without PIDFD_THREAD a non-leader is refused"
        );
        go.send(()).unwrap();
        t.join().unwrap();
        assert!(fd.exited(), "the thread has exited, its process has not");
    }

    #[test]
    fn socket_peers_are_known() {
        let (a, _b) = UnixStream::pair().unwrap();
        let c = peer_cred(a.as_fd()).unwrap();
        assert_eq!(c.pid, std::process::id());
        assert_eq!(c.uid, rustix::process::getuid().as_raw());
        if let Some(p) = peer_pidfd(a.as_fd()).unwrap() {
            assert!(!p.exited());
        }
    }
}
