//! Handles on the threads rtmgr grants to (DROPS §4.1: a grant belongs to a
//! task, not to a number the kernel may hand out again). A thread whose
//! request was checked is held by a thread pidfd, so that asking again
//! whether it is still that thread costs one poll(2) instead of a /proc read
//! and parse: a grant and its release ask a dozen times (issue 27). Its
//! /proc files read so far stay open, read again with one pread(2).

use rtmgr_sys::pidfd::Pidfd;
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// At most this many handles are held (a descriptor each); past it the
/// exited ones go, then all.
const HELD_AT_MOST: usize = 256;
/// At most this many of their /proc files are held open (`read`).
const FILES_AT_MOST: usize = 512;

/// Thread pidfds by tid, each with the start time it was matched with,
/// taken before that start time was read: a handle taken after could be
/// another task's that was given the number meanwhile. And the thread's
/// one-piece /proc files read so far, held open: read again with one
/// pread(2), not an open, a read and a close (a grant and its release read
/// a thread's `stat` half a dozen times).
#[derive(Debug, Default)]
pub struct TaskHandles(Mutex<HashMap<u32, Handle>>);

#[derive(Debug)]
struct Handle {
    start_time: u64,
    pidfd: Pidfd,
    /// Opened while the thread held its tid (seen alive after the open):
    /// each is that thread's file for as long as it lives.
    files: Vec<(PathBuf, Arc<File>)>,
}

/// How many files the handles hold open.
fn files(held: &HashMap<u32, Handle>) -> usize {
    held.values().map(|h| h.files.len()).sum()
}

impl TaskHandles {
    /// Is the task known as (tid, start time) alive? True only from a held
    /// handle that has not seen it exit; false says "not known", and the
    /// caller reads /proc (an exited thread may still be a zombie there).
    pub fn alive(&self, tid: u32, start_time: u64) -> bool {
        let mut held = self.lock();
        match held.get(&tid) {
            Some(h) if h.start_time == start_time && !h.pidfd.exited() => true,
            Some(h) if h.start_time == start_time => {
                held.remove(&tid);
                false
            }
            _ => false,
        }
    }

    /// Is a handle held on a thread that is `tid` now (alive)?
    pub fn holding(&self, tid: u32) -> bool {
        let held = self.lock();
        held.get(&tid).is_some_and(|h| !h.pidfd.exited())
    }

    /// Hold `handle`, taken before (tid, start time) was matched in /proc.
    pub fn keep(&self, tid: u32, start_time: u64, handle: Pidfd) {
        let mut held = self.lock();
        if held.len() >= HELD_AT_MOST {
            held.retain(|_, h| !h.pidfd.exited());
            if held.len() >= HELD_AT_MOST {
                held.clear();
            }
        }
        held.insert(
            tid,
            Handle {
                start_time,
                pidfd: handle,
                files: Vec::new(),
            },
        );
    }

    /// Keep only the handles of the threads `keep(tid, start time)` accepts.
    pub fn retain(&self, keep: impl Fn(u32, u64) -> bool) {
        self.lock().retain(|&tid, h| keep(tid, h.start_time));
    }

    /// A held thread's one-piece /proc file `abs` (`read::one_piece`; `real`
    /// where it is), as reading it by its path would give it: through the
    /// descriptor held open for it, else opened now and held while the
    /// thread lives. None when no thread with that tid is held, or the held
    /// one is gone (its handle is dropped): the caller reads the path.
    pub fn read(&self, abs: &Path, real: &Path) -> Option<std::io::Result<Vec<u8>>> {
        let tid = super::read::one_piece_of(abs)?;
        let open = {
            let held = self.lock();
            let h = held.get(&tid)?;
            h.files
                .iter()
                .find(|(p, _)| p == abs)
                .map(|(_, f)| f.clone())
        };
        if let Some(f) = open {
            // The thread gone, the number may be another's: by the path.
            return match super::read::read_again(&f) {
                Ok(text) if !text.is_empty() => Some(Ok(text)),
                _ => {
                    self.lock().remove(&tid);
                    None
                }
            };
        }
        let f = match File::open(real) {
            Ok(f) => Arc::new(f),
            Err(e) => return Some(Err(e)),
        };
        let text = super::read::read_again(&f);
        let mut held = self.lock();
        let room = files(&held) < FILES_AT_MOST && text.is_ok();
        let Some(h) = held.get_mut(&tid) else {
            return Some(text);
        };
        // Alive after the open: the file is that thread's.
        if h.pidfd.exited() {
            held.remove(&tid);
        } else if room {
            h.files.push((abs.to_path_buf(), f));
        }
        Some(text)
    }

    /// How many are held, and how many files they hold open.
    #[cfg(test)]
    pub fn len(&self) -> (usize, usize) {
        let held = self.lock();
        (held.len(), files(&held))
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<u32, Handle>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_handle(tid: u32) -> Option<Pidfd> {
        Pidfd::open_thread(tid)
            .map_err(|e| eprintln!("skipped: no thread pidfd here ({e})"))
            .ok()
    }

    #[test]
    fn a_held_thread_is_alive_until_it_exits_and_then_unknown() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            tx.send(rtmgr_sys::sched::gettid() as u32).unwrap();
            wait.recv().unwrap();
        });
        let tid = rx.recv().unwrap();
        let handles = TaskHandles::default();
        assert!(!handles.alive(tid, 7), "nothing held yet");
        let Some(h) = thread_handle(tid) else {
            go.send(()).unwrap();
            t.join().unwrap();
            return;
        };
        handles.keep(tid, 7, h);
        assert!(handles.alive(tid, 7));
        assert!(!handles.alive(tid, 8), "another start time is another task");
        go.send(()).unwrap();
        t.join().unwrap();
        assert!(!handles.alive(tid, 7), "exited: no longer known");
        assert_eq!(handles.len(), (0, 0), "and its handle is closed");
    }

    #[test]
    fn never_more_than_the_bound_are_held() {
        // Keys only: every handle is this thread's pidfd.
        let me = rtmgr_sys::sched::gettid() as u32;
        let handles = TaskHandles::default();
        for key in 0..(HELD_AT_MOST as u32 + 10) {
            let Some(h) = thread_handle(me) else { return };
            handles.keep(1_000_000 + key, 3, h);
            assert!(handles.len().0 <= HELD_AT_MOST);
        }
        assert!(
            handles.alive(1_000_000 + HELD_AT_MOST as u32 + 9, 3),
            "the newest is held"
        );
        let Some(h) = thread_handle(me) else { return };
        handles.keep(1_000_000 + HELD_AT_MOST as u32 + 9, 4, h);
        assert!(
            !handles.alive(1_000_000 + HELD_AT_MOST as u32 + 9, 3),
            "a tid held again is the new task's"
        );
    }

    /// A thread that wakes when told and counts its wake-ups.
    fn sleeper() -> (
        u32,
        std::sync::mpsc::Sender<bool>,
        std::thread::JoinHandle<()>,
    ) {
        let (tx, rx) = std::sync::mpsc::channel();
        let (go, wait) = std::sync::mpsc::channel::<bool>();
        let t = std::thread::spawn(move || {
            tx.send(rtmgr_sys::sched::gettid() as u32).unwrap();
            while wait.recv().unwrap() {}
        });
        (rx.recv().unwrap(), go, t)
    }

    fn field(text: &[u8], key: &str) -> u64 {
        let text = String::from_utf8_lossy(text);
        rtmgr_core::proctext::sched_field(&text, key).unwrap() as u64
    }

    #[test]
    fn a_held_thread_s_file_is_read_again_through_one_descriptor_and_fresh() {
        let (tid, go, t) = sleeper();
        let handles = TaskHandles::default();
        let path = PathBuf::from(format!("/proc/{tid}/sched"));
        assert!(
            handles.read(&path, &path).is_none(),
            "not held: by the path"
        );
        let Some(h) = thread_handle(tid) else {
            go.send(false).unwrap();
            t.join().unwrap();
            return;
        };
        handles.keep(tid, 1, h);
        let first = handles.read(&path, &path).unwrap().unwrap();
        assert_eq!(handles.len(), (1, 1), "its descriptor held");
        for _ in 0..20 {
            go.send(true).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let again = handles.read(&path, &path).unwrap().unwrap();
        assert_eq!(handles.len(), (1, 1), "the same descriptor, read again");
        assert!(
            field(&again, "nr_switches") >= field(&first, "nr_switches") + 20,
            "written afresh: {} then {}",
            field(&first, "nr_switches"),
            field(&again, "nr_switches")
        );
        let other = PathBuf::from(format!("/proc/{tid}/maps"));
        assert!(
            handles.read(&other, &other).is_none(),
            "not a one-piece file"
        );
        go.send(false).unwrap();
        t.join().unwrap();
        // join returns when the tid is cleared, a little before the exit.
        let gone = (0..1000).any(|_| {
            let read = handles.read(&path, &path);
            std::thread::sleep(std::time::Duration::from_millis(1));
            read.is_none()
        });
        assert!(
            gone,
            "exited: read by the path, which may be another task's now"
        );
        assert_eq!(handles.len(), (0, 0), "its handle and file closed");
    }
}
