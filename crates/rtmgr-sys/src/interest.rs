//! Readiness of many descriptors, registered once (epoll): the daemon's loop
//! (DROPS §4.1, a resource manager answering many clients) waits on its
//! connections, its clients' pidfds and its front ends without handing the
//! kernel the whole set at every wake, as `poll` did (at 16 clients, ppoll
//! over ~35 descriptors was a seventh of the daemon's CPU per grant).
//!
//! Each descriptor is registered through a duplicate this set owns, so a
//! registration ends exactly when `sync` drops it, whatever the owner of the
//! original did with it (epoll forgets a descriptor only when every copy of
//! its open file is closed, and a closed number may be reused meanwhile).

use crate::io_err;
use rustix::buffer::spare_capacity;
use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags};
use rustix::io::{fcntl_dupfd_cloexec, Errno};
use std::collections::HashMap;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};

/// A set of descriptors watched for reading, each under a caller's key.
pub struct Interest {
    epoll: OwnedFd,
    /// Key → this set's duplicate of the registered descriptor.
    held: HashMap<u64, OwnedFd>,
    events: Vec<epoll::Event>,
}

impl Interest {
    pub fn new() -> io::Result<Interest> {
        Ok(Interest {
            epoll: epoll::create(CreateFlags::CLOEXEC).map_err(io_err)?,
            held: HashMap::new(),
            events: Vec::with_capacity(64),
        })
    }

    /// Watch exactly `wanted` from now on: a key not yet watched is added
    /// (its descriptor duplicated), a watched key not in `wanted` is removed
    /// (its duplicate closed). A key keeps the descriptor it was added with:
    /// keys name objects, not descriptor numbers.
    pub fn sync<'a>(
        &mut self,
        wanted: impl IntoIterator<Item = (u64, BorrowedFd<'a>)>,
    ) -> io::Result<()> {
        let mut seen: Vec<u64> = Vec::with_capacity(self.held.len() + 4);
        for (key, fd) in wanted {
            seen.push(key);
            if self.held.contains_key(&key) {
                continue;
            }
            let dup = fcntl_dupfd_cloexec(fd, 0).map_err(io_err)?;
            epoll::add(&self.epoll, &dup, EventData::new_u64(key), EventFlags::IN)
                .map_err(io_err)?;
            self.held.insert(key, dup);
        }
        let gone: Vec<u64> = self
            .held
            .keys()
            .filter(|k| !seen.contains(k))
            .copied()
            .collect();
        for key in gone {
            if let Some(dup) = self.held.remove(&key) {
                // Closing the only other copy this set has would do it too,
                // unless the owner's copy is still open: delete explicitly.
                epoll::delete(&self.epoll, &dup).map_err(io_err)?;
            }
        }
        Ok(())
    }

    /// How many descriptors are watched.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    /// Wait up to `timeout_ms` (-1: forever) for watched descriptors to be
    /// readable (or hung up, or in error); the keys of those that are.
    /// EINTR counts as "none yet".
    pub fn wait(&mut self, timeout_ms: i32) -> io::Result<Vec<u64>> {
        let timeout = (timeout_ms >= 0).then(|| rustix::event::Timespec {
            tv_sec: i64::from(timeout_ms / 1000),
            tv_nsec: i64::from(timeout_ms % 1000) * 1_000_000,
        });
        self.events.clear();
        let room = self.held.len().max(1);
        self.events.reserve(room);
        match epoll::wait(
            &self.epoll,
            spare_capacity(&mut self.events),
            timeout.as_ref(),
        ) {
            Ok(_) => {}
            Err(Errno::INTR) => return Ok(Vec::new()),
            Err(e) => return Err(io_err(e)),
        }
        Ok(self.events.iter().map(|e| e.data.u64()).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn a_readable_descriptor_is_reported_under_its_key_and_a_quiet_one_is_not() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let (_c, d) = UnixStream::pair().unwrap();
        let mut set = Interest::new().unwrap();
        set.sync([(7, b.as_fd()), (9, d.as_fd())]).unwrap();
        assert_eq!(set.wait(0).unwrap(), Vec::<u64>::new());
        a.write_all(b"x").unwrap();
        assert_eq!(set.wait(1000).unwrap(), vec![7]);
        // Level-triggered: still readable until read.
        assert_eq!(set.wait(0).unwrap(), vec![7]);
    }

    #[test]
    fn a_key_left_out_of_sync_is_no_longer_watched_even_while_its_descriptor_stays_open() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let mut set = Interest::new().unwrap();
        set.sync([(1, b.as_fd())]).unwrap();
        set.sync([]).unwrap();
        assert!(set.is_empty());
        a.write_all(b"x").unwrap();
        assert_eq!(set.wait(0).unwrap(), Vec::<u64>::new());
    }

    #[test]
    fn a_watched_key_outlives_its_owners_descriptor_until_sync_drops_it() {
        // The owner closes its copy (a client's pidfd forgotten, a
        // connection dropped): the set's own copy still holds the file, so
        // no reused number can be taken for it, and the hang-up is seen.
        let (a, b) = UnixStream::pair().unwrap();
        let mut set = Interest::new().unwrap();
        set.sync([(3, b.as_fd())]).unwrap();
        drop(b);
        drop(a);
        assert_eq!(set.wait(0).unwrap(), vec![3]);
        set.sync([]).unwrap();
        assert_eq!(set.wait(0).unwrap(), Vec::<u64>::new());
    }

    #[test]
    fn a_key_synced_again_keeps_its_first_descriptor() {
        let (mut a, b) = UnixStream::pair().unwrap();
        let (_c, d) = UnixStream::pair().unwrap();
        let mut set = Interest::new().unwrap();
        set.sync([(5, b.as_fd())]).unwrap();
        set.sync([(5, d.as_fd())]).unwrap();
        assert_eq!(set.len(), 1);
        a.write_all(b"x").unwrap();
        assert_eq!(set.wait(0).unwrap(), vec![5]);
    }
}
