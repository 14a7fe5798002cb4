//! rtkit's MakeThreadHighPriority: a thread stays SCHED_OTHER (with
//! SCHED_RESET_ON_FORK) at a nice level no lower than MinNiceLevel. Not a
//! reservation (it takes no RT capacity): the thread's state before is kept
//! here and given back on ResetKnown, when the daemon stops, or when the
//! thread asks for real time instead.

use super::bus::{Caller, Fail};
use super::rules::{is_rtkit, Rtkit};
use crate::daemon::manager::Manager;
use crate::tasks;
use rtmgr_sys::sched::{SchedAttr, SCHED_FLAG_RESET_ON_FORK, SCHED_OTHER};

/// A thread whose nice level rtkit raised, and what it was before.
#[derive(Debug, Clone)]
pub struct HighThread {
    pub uid: u32,
    pub pid: u32,
    pub start_time: u64,
    pub before: SchedAttr,
}

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

impl Rtkit {
    pub(super) fn high_priority(
        &mut self,
        m: &mut Manager,
        caller: Caller,
        process: Option<u64>,
        thread: u64,
        nice: i32,
    ) -> Result<(), Fail> {
        let (pid, tid) = super::rules::ids(caller, process, thread)?;
        if !(-20..=19).contains(&nice) {
            return Err(Fail::Failed(format!(
                "Invalid argument: nice level {nice} is not within -20..19"
            )));
        }
        let min = self.cfg.min_nice_level;
        if nice < min {
            return Err(Fail::Denied(format!(
                "nice level {nice} is below MinNiceLevel {min}"
            )));
        }
        self.admit_caller(m, caller, pid, tid)?;
        // An RT thread of rtkit's goes back to SCHED_OTHER (as in rtkit);
        // one held by another rtmgr reservation is not rtkit's to change.
        let holder = m
            .grants()
            .find(|g| g.threads.iter().any(|t| t.tid == tid))
            .map(|g| (g.id, is_rtkit(g)));
        match holder {
            Some((id, false)) => {
                return Err(Fail::Denied(format!(
                    "thread {tid} holds rtmgr reservation {id}"
                )))
            }
            Some((id, true)) => {
                m.revoke_id(id);
            }
            None => {}
        }
        let start_time = tasks::info(&m.host, pid, tid)
            .map(|t| t.start_time)
            .ok_or_else(|| Fail::Failed(format!("No such process: thread {tid}")))?;
        if let std::collections::btree_map::Entry::Vacant(e) = self.high.entry(tid) {
            let before = m
                .host
                .get_attr(tid)
                .map_err(|e| Fail::Failed(format!("thread {tid}: {e}")))?;
            e.insert(HighThread {
                uid: caller.uid,
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
            self.high.remove(&tid);
            return Err(Fail::Failed(format!("thread {tid} exited")));
        }
        tracing::info!(
            "rtkit: thread {tid} of process {pid} (uid {}) at nice level {nice}",
            caller.uid
        );
        Ok(())
    }

    /// Give one thread's raised nice level back (if rtkit raised it).
    pub(super) fn lower(&mut self, m: &Manager, tid: u32) -> Option<String> {
        let h = self.high.remove(&tid)?;
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
        let tids: Vec<u32> = self.high.keys().copied().collect();
        tids.into_iter().filter_map(|t| self.lower(m, t)).collect()
    }
}
