//! Handles on the threads rtmgr grants to (DROPS §4.1: a grant belongs to a
//! task, not to a number the kernel may hand out again). A thread whose
//! request was checked is held by a thread pidfd, so that asking again
//! whether it is still that thread costs one poll(2) instead of a /proc read
//! and parse: a grant and its release ask a dozen times (issue 27).

use rtmgr_sys::pidfd::Pidfd;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

/// At most this many handles are held (a descriptor each); past it the
/// exited ones go, then all.
const HELD_AT_MOST: usize = 256;

/// Thread pidfds by (tid, start time), taken before the start time was read
/// and matched: a handle taken after could be another task's that was given
/// the number meanwhile.
#[derive(Debug, Default)]
pub struct TaskHandles(Mutex<HashMap<(u32, u64), Pidfd>>);

impl TaskHandles {
    /// Is the task known as (tid, start time) alive? True only from a held
    /// handle that has not seen it exit; false says "not known", and the
    /// caller reads /proc (an exited thread may still be a zombie there).
    pub fn alive(&self, tid: u32, start_time: u64) -> bool {
        let mut held = self.lock();
        match held.get(&(tid, start_time)) {
            Some(h) if !h.exited() => true,
            Some(_) => {
                held.remove(&(tid, start_time));
                false
            }
            None => false,
        }
    }

    /// Hold `handle`, taken before (tid, start time) was matched in /proc.
    pub fn keep(&self, tid: u32, start_time: u64, handle: Pidfd) {
        let mut held = self.lock();
        if held.len() >= HELD_AT_MOST {
            held.retain(|_, h| !h.exited());
            if held.len() >= HELD_AT_MOST {
                held.clear();
            }
        }
        held.insert((tid, start_time), handle);
    }

    /// Keep only the handles of the threads `keep(tid, start time)` accepts.
    pub fn retain(&self, keep: impl Fn(u32, u64) -> bool) {
        self.lock().retain(|&(tid, start), _| keep(tid, start));
    }

    /// How many are held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(u32, u64), Pidfd>> {
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
        assert_eq!(handles.len(), 0, "and its handle is closed");
    }

    #[test]
    fn never_more_than_the_bound_are_held() {
        let me = rtmgr_sys::sched::gettid() as u32;
        let handles = TaskHandles::default();
        for start in 0..(HELD_AT_MOST as u64 + 10) {
            let Some(h) = thread_handle(me) else { return };
            handles.keep(me, start, h);
            assert!(handles.len() <= HELD_AT_MOST);
        }
        assert!(
            handles.alive(me, HELD_AT_MOST as u64 + 9),
            "the newest is held"
        );
    }
}
