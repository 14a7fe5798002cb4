//! The request loop's share of its NRT CPU, bounded (ARTiS §2: the NRT
//! CPUs run ordinary work; DROPS §4.1: the manager serves every client).
//! At SCHED_FIFO the loop preempts ordinary work, and a flood of requests
//! kept it busy without a break: 16 clients asking in a closed loop starved
//! every SCHED_OTHER task on the NRT CPU, the daemon's own clients waiting
//! to send their next request among them (up to 434 ms), the kernel's
//! `rcu_preempt` and kworkers too (60 ms), until the kernel's fair server
//! let them in. So the daemon runs at SCHED_FIFO for at most `BUDGET_NS`
//! of CPU time in each `WINDOW_NS`; past it the loop drops to SCHED_OTHER
//! until the window ends. Alone on its CPU it keeps running: nothing waits
//! that need not.

use crate::host::Host;

/// The window the daemon's CPU time is counted in.
pub const WINDOW_NS: u64 = 10_000_000;
/// Its CPU time at SCHED_FIFO in a window, at most (the request loop and
/// the grant worker, the whole process: `process_cpu_ns`).
pub const BUDGET_NS: u64 = 8_000_000;

/// What the loop does with its policy now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Past its budget: SCHED_OTHER until the window ends.
    Yield,
    /// A new window: back to SCHED_FIFO.
    Resume,
    Keep,
}

/// The current window and whether the loop yielded in it. Pure: the
/// caller reads the clocks and sets the policy.
#[derive(Debug, Clone)]
pub struct LoopShare {
    window_ns: u64,
    budget_ns: u64,
    start_ns: u64,
    start_cpu_ns: u64,
    yielded: bool,
    /// Windows in which the loop yielded, since start (`status`).
    pub yields: u64,
}

impl LoopShare {
    pub fn new(window_ns: u64, budget_ns: u64, now_ns: u64, cpu_ns: u64) -> Self {
        LoopShare {
            window_ns,
            budget_ns,
            start_ns: now_ns,
            start_cpu_ns: cpu_ns,
            yielded: false,
            yields: 0,
        }
    }

    /// One look, each pass of the loop: the monotonic time and the
    /// daemon's CPU time now.
    pub fn look(&mut self, now_ns: u64, cpu_ns: u64) -> Change {
        if now_ns.saturating_sub(self.start_ns) >= self.window_ns {
            self.start_ns = now_ns;
            self.start_cpu_ns = cpu_ns;
            if std::mem::take(&mut self.yielded) {
                return Change::Resume;
            }
            return Change::Keep;
        }
        if !self.yielded && cpu_ns.saturating_sub(self.start_cpu_ns) > self.budget_ns {
            self.yielded = true;
            self.yields += 1;
            return Change::Yield;
        }
        Change::Keep
    }

    /// While yielded: wake by the window's end at the latest (ms, rounded
    /// up), to resume SCHED_FIFO on time even with nothing to do.
    pub fn wake_within_ms(&self, now_ns: u64) -> Option<u64> {
        self.yielded.then(|| {
            let end = self.start_ns + self.window_ns;
            end.saturating_sub(now_ns).div_ceil(1_000_000).max(1)
        })
    }
}

/// The loop's bound, live: its `LoopShare` and the SCHED_FIFO priority it
/// goes back to.
#[derive(Debug)]
pub struct Bound {
    pub share: LoopShare,
    priority: u32,
}

impl Bound {
    /// For a loop at SCHED_FIFO `priority` (None for 0: at SCHED_OTHER it
    /// preempts nobody).
    pub fn new(priority: u32) -> Option<Self> {
        (priority > 0).then(|| Bound {
            share: LoopShare::new(
                WINDOW_NS,
                BUDGET_NS,
                rtmgr_sys::time::mono_ns(),
                rtmgr_sys::time::process_cpu_ns(),
            ),
            priority,
        })
    }

    /// Look, and change the calling thread's policy if it is time; what
    /// it changed.
    pub fn look(&mut self, host: &Host) -> Change {
        let change = self.share.look(
            rtmgr_sys::time::mono_ns(),
            rtmgr_sys::time::process_cpu_ns(),
        );
        match change {
            Change::Yield => super::loop_priority::lower(host),
            Change::Resume => super::loop_priority::set_fifo(host, self.priority),
            Change::Keep => {}
        }
        change
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_loop_within_its_budget_keeps_its_policy() {
        let mut s = LoopShare::new(10 * MS, 8 * MS, 0, 0);
        for k in 1..100 {
            // 7 ms of CPU in every 10 ms, looked at every ms.
            let (now, cpu) = (k * MS, k * 7 * MS / 10);
            assert_eq!(s.look(now, cpu), Change::Keep, "at {k} ms");
            assert_eq!(s.wake_within_ms(now), None);
        }
        assert_eq!(s.yields, 0);
    }

    #[test]
    fn a_busy_loop_yields_past_its_budget_and_resumes_at_the_next_window() {
        let mut s = LoopShare::new(10 * MS, 8 * MS, 0, 0);
        // Busy: its CPU time follows the clock.
        for k in 1..=8 {
            assert_eq!(s.look(k * MS, k * MS), Change::Keep, "at {k} ms");
        }
        assert_eq!(s.look(8 * MS + 1, 8 * MS + 1), Change::Yield);
        assert_eq!(s.wake_within_ms(8 * MS + 1), Some(2));
        // Yielded once a window, however often it looks.
        assert_eq!(s.look(9 * MS, 9 * MS), Change::Keep);
        assert_eq!(s.look(10 * MS, 10 * MS), Change::Resume);
        assert_eq!(s.wake_within_ms(10 * MS), None);
        assert_eq!(s.yields, 1);
        // The next window counts from its own start.
        assert_eq!(s.look(17 * MS, 17 * MS), Change::Keep);
        assert_eq!(s.look(18 * MS + 1, 18 * MS + 1), Change::Yield);
        assert_eq!(s.yields, 2);
    }

    #[test]
    fn time_the_host_takes_from_the_vcpu_is_not_the_loops() {
        // 30 ms of wall time, 3 ms of CPU: a preempted vCPU, not a busy loop.
        let mut s = LoopShare::new(10 * MS, 8 * MS, 0, 0);
        assert_eq!(s.look(9 * MS, 3 * MS), Change::Keep);
        assert_eq!(s.look(30 * MS, 3 * MS), Change::Keep);
        assert_eq!(s.yields, 0);
    }

    #[test]
    fn a_yielded_loop_wakes_by_the_windows_end_at_least_a_ms_ahead() {
        let mut s = LoopShare::new(10 * MS, 8 * MS, 0, 0);
        assert_eq!(s.look(9 * MS + MS / 2, 9 * MS), Change::Yield);
        assert_eq!(s.wake_within_ms(9 * MS + MS / 2), Some(1));
        assert_eq!(s.wake_within_ms(10 * MS + 5), Some(1));
    }

    #[test]
    fn a_loop_at_sched_other_is_not_bounded() {
        assert!(Bound::new(0).is_none());
        assert!(Bound::new(1).is_some());
    }
}
