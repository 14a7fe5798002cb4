//! rtkit's MakeThreadHighPriority: a thread stays SCHED_OTHER (with
//! SCHED_RESET_ON_FORK) at a nice level no lower than MinNiceLevel. Not a
//! reservation (it takes no RT capacity): the thread's state before is kept
//! here and given back on ResetKnown, when the daemon stops, or when the
//! thread asks for real time instead. rtkit's checks come first, in `rules.rs`.

use super::bus::Fail;
use crate::daemon::manager::Manager;
use crate::tasks;
use rtmgr_sys::sched::{SchedAttr, SCHED_FLAG_RESET_ON_FORK, SCHED_OTHER};
use std::collections::BTreeMap;

/// A thread whose nice level rtkit raised, and what it was before.
#[derive(Debug, Clone)]
pub struct HighThread {
    pub uid: u32,
    pub pid: u32,
    pub start_time: u64,
    pub before: SchedAttr,
}

/// The threads at a raised nice level, by thread id.
#[derive(Debug, Default)]
pub struct HighThreads(BTreeMap<u32, HighThread>);

/// SCHED_OTHER at nice 0 (what rtkit resets a thread to).
pub fn normal() -> SchedAttr {
    SchedAttr {
        policy: SCHED_OTHER,
        ..SchedAttr::default()
    }
}

fn raised(nice: i32) -> SchedAttr {
    SchedAttr {
        policy: SCHED_OTHER,
        flags: SCHED_FLAG_RESET_ON_FORK,
        nice,
        ..SchedAttr::default()
    }
}

impl HighThreads {
    /// Put thread `tid` of process `pid` (user `uid`, whom rtkit's rules
    /// admitted) at nice level `nice`; its state before is kept the first time.
    pub fn raise(
        &mut self,
        m: &Manager,
        uid: u32,
        pid: u32,
        tid: u32,
        nice: i32,
    ) -> Result<(), Fail> {
        let start_time = tasks::info(&m.host, pid, tid)
            .map(|t| t.start_time)
            .ok_or_else(|| Fail::Failed(format!("No such process: thread {tid}")))?;
        if let std::collections::btree_map::Entry::Vacant(e) = self.0.entry(tid) {
            let before = m
                .host
                .get_attr(tid)
                .map_err(|e| Fail::Failed(format!("thread {tid}: {e}")))?;
            e.insert(HighThread {
                uid,
                pid,
                start_time,
                before,
            });
        }
        if let Err(e) = m.host.set_attr(tid, &raised(nice)) {
            self.lower(m, tid);
            return Err(Fail::Failed(format!("thread {tid}: {e}")));
        }
        // The thread may have exited and its id been reused meanwhile.
        if !tasks::same_task(&m.host, tid, start_time) {
            self.0.remove(&tid);
            return Err(Fail::Failed(format!("thread {tid} exited")));
        }
        tracing::info!("rtkit: thread {tid} of process {pid} (uid {uid}) at nice level {nice}");
        Ok(())
    }

    /// Give one thread's raised nice level back (if rtkit raised it).
    pub fn lower(&mut self, m: &Manager, tid: u32) -> Option<String> {
        let h = self.0.remove(&tid)?;
        if !tasks::same_task(&m.host, tid, h.start_time) {
            return None;
        }
        match m.host.set_attr(tid, &h.before) {
            Err(e) if !e.is_gone() => Some(format!("thread {tid} nice level: {e}")),
            _ => None,
        }
    }

    /// Give every raised nice level back; what could not be.
    pub fn lower_all(&mut self, m: &Manager) -> Vec<String> {
        let tids: Vec<u32> = self.0.keys().copied().collect();
        tids.into_iter().filter_map(|t| self.lower(m, t)).collect()
    }

    /// Forget raised nice levels of threads that are gone (rtkit's gc).
    pub fn forget_gone(&mut self, m: &Manager) {
        self.0
            .retain(|tid, h| tasks::same_task(&m.host, *tid, h.start_time));
    }

    /// (uid, pid, tid) of every thread at a raised nice level.
    pub fn known(&self) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        self.0.iter().map(|(tid, h)| (h.uid, h.pid, *tid))
    }
}
