//! The second half of revoking a SCHED_DEADLINE grant whose threads live on
//! (budget-based RTAI §3.3: hard reservations as SCHED_DEADLINE). A thread
//! leaving SCHED_DEADLINE keeps its bandwidth until its 0-lag time, and the
//! kernel then gives it back to the root domain of the CPU the thread is on
//! at that moment: moved off its RT CPU at once, the bandwidth would leak
//! from the RT CPU's root domain and later grants there would be refused
//! (EBUSY). So the policy goes back at once (`grant::revoke_policy`) and the
//! cpuset, affinity, limits and IRQ mask a period later, journalled as
//! `Revoking` then `Release`. A thread re-granted in between carries its
//! wait into the new grant.

use super::grant;
use super::grants_journal::{Grant, ThreadBefore};
use super::manager::{Deferred, Manager};
use crate::resources::grant::IoprioChange;
use rtmgr_sys::time::mono_ns;

/// Margin after the period for the kernel's inactive timer.
pub(super) const MARGIN_NS: u64 = 2_000_000;

impl Manager {
    /// When the placement of a grant being revoked may go back: None = now.
    /// A deadline grant waits a period; so does any grant holding a thread
    /// that left an earlier deadline grant less than a period ago (a soft
    /// grant taking over such a thread and released at once would otherwise
    /// move it off its RT CPU before the kernel returned the bandwidth).
    pub(super) fn placement_due(&self, g: &Grant) -> Option<u64> {
        let now = mono_ns();
        let own = grant::must_wait(&self.host, g).then(|| now + g.demand.period_ns + MARGIN_NS);
        let inherited = g
            .threads
            .iter()
            .filter_map(|t| self.leaving.get(&t.tid).copied())
            .filter(|&due| due > now);
        own.into_iter().chain(inherited).max()
    }

    pub(super) fn defer(&mut self, grant: Grant, due_ns: u64) {
        for t in &grant.threads {
            let due = self.leaving.entry(t.tid).or_insert(due_ns);
            *due = (*due).max(due_ns);
        }
        self.deferred.push(Deferred { due_ns, grant });
    }

    /// Does the process hold a grant, one being applied, or one waiting out
    /// its period? (Not one whose placement the worker gives back now: that
    /// one's undo was told already whether it restores the limits.)
    pub(super) fn pid_busy(&self, pid: u32) -> bool {
        self.grants.values().any(|g| g.pid == pid)
            || self.deferred.iter().any(|d| d.grant.pid == pid)
            || self.in_flight_grants().any(|g| g.pid == pid)
    }

    /// A new grant for a thread still leaving an earlier one: it takes over
    /// the thread's before-state, and the earlier grant no longer moves it.
    /// With `takes_io` (the new grant sets an I/O priority) the thread's I/O
    /// change goes along too: its `old` is the priority from before the
    /// earlier grant, and the earlier grant's second half no longer restores
    /// it over the new grant's.
    pub(super) fn take_deferred_thread(
        &mut self,
        tid: u32,
        takes_io: bool,
    ) -> Option<(ThreadBefore, Option<IoprioChange>)> {
        for d in &mut self.deferred {
            if let Some(i) = d.grant.threads.iter().position(|t| t.tid == tid) {
                let io = &mut d.grant.resources.ioprio;
                let change = match io.iter().position(|c| c.tid == tid) {
                    Some(j) if takes_io => Some(io.remove(j)),
                    _ => None,
                };
                return Some((d.grant.threads.remove(i), change));
            }
        }
        None
    }

    /// Finish the half-revocations that are due (the server calls it often).
    pub fn finish_deferred(&mut self) -> Vec<String> {
        let now = mono_ns();
        self.leaving.retain(|_, due| *due > now);
        let mut problems = Vec::new();
        // Looked at each pass of the loop: the records move only when one is due.
        if self.deferred.iter().any(|d| d.due_ns <= now) {
            let (due, wait): (Vec<Deferred>, Vec<Deferred>) = std::mem::take(&mut self.deferred)
                .into_iter()
                .partition(|d| d.due_ns <= now);
            self.deferred = wait;
            for d in due {
                let g = d.grant;
                let last_of_pid = !self.pid_busy(g.pid);
                problems.extend(self.undo_placement(g, last_of_pid, Vec::new(), None));
            }
            self.compact();
        }
        self.rebuild_due();
        problems
    }

    /// Wait for every half-revocation and finish it (stop).
    pub fn finish_all_deferred(&mut self) -> Vec<String> {
        if let Some(last) = self.deferred.iter().map(|d| d.due_ns).max() {
            rtmgr_sys::time::sleep_until(last);
        }
        let problems = self.finish_deferred();
        self.dl_leak.rebuild_all(&self.host, &self.domains);
        problems
    }
}

#[cfg(test)]
#[path = "regrant_tests.rs"]
pub(super) mod regrant_tests;
