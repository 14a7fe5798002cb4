//! Threads that left a hard grant with their budget spent, and when they may
//! be SCHED_DEADLINE again (budget-based RTAI §3.3: a hard reservation gets
//! its budget every period). The kernel leaves such a thread throttled
//! until its 0-lag time Z = deadline D + |runtime| × period / budget; set
//! SCHED_DEADLINE again between D and Z, it stays runnable and never runs
//! (docs/serve.md "Stranded threads", docs/repro/dl_throttled_regrant.c).
//! So a re-grant before Z waits, placed, at the thread's own policy (as the
//! kernel would keep it throttled; `grant::is_held`), and is switched after
//! it (`pending.rs`). From the re-grant on, not only from
//! D: set before D the thread would be throttled until D, its old server
//! going on; and with a hold from 2 ms before D only, alternated runs still
//! stranded one thread in four, none from the re-grant on
//! (bench/results/zero-lag-hold-ab-20261128).

use super::stranded::Server;
use crate::host::Host;
use std::collections::BTreeMap;

/// After Z, for the kernel's 0-lag timer to have fired.
pub const MARGIN_NS: u64 = 1_000_000;
/// A runnable thread goes on spending its budget between the daemon's read
/// of its server and its policy going back (a few µs to tens of µs; more
/// under load): with less left than this at the read, it is counted as
/// having spent it, this much over.
pub const RUNNING_MARGIN_NS: i64 = 200_000;

/// The server a thread will have left SCHED_DEADLINE with, from the one
/// read just before its switch alone (when its CPU time cannot be read to
/// do better, `spent_in_between`): a runnable thread with less than
/// `RUNNING_MARGIN_NS` left may spend it before the switch (/proc shows a
/// running thread's server up to a tick old), and one re-granted between
/// its deadline and its real 0-lag time is stranded. `runnable` is asked
/// only then.
pub fn as_it_leaves(s: Server, runnable: impl FnOnce() -> bool) -> Server {
    if s.runtime > 0 && s.runtime < RUNNING_MARGIN_NS && runnable() {
        Server {
            runtime: s.runtime - RUNNING_MARGIN_NS,
            ..s
        }
    } else {
        s
    }
}
/// The server a thread left SCHED_DEADLINE with, from the one read before
/// its switch (`read`, with its CPU time as of that read, `cpu_at_read`:
/// the kernel charges both at once) and its CPU time after the switch
/// (`cpu_after`; the switch charged it): what it ran in between came out
/// of that server, to the ns, however stale the read (a running thread's
/// /proc view is up to a tick old) and however long the daemon waited
/// for its CPU before the switch. (A server replenished in between gives
/// the same 0-lag time: each replenishment adds a budget and a period.)
pub fn spent_in_between(read: Server, cpu_at_read: u64, cpu_after: u64) -> Server {
    let ran = i64::try_from(cpu_after.saturating_sub(cpu_at_read)).unwrap_or(i64::MAX);
    Server {
        runtime: read.runtime.saturating_sub(ran),
        ..read
    }
}

/// The scheduler's clock offset is measured again when older than this
/// (its correction drifts by microseconds a minute).
pub const OFFSET_MAX_AGE_NS: u64 = 60_000_000_000;
/// Added when the offset cannot be measured (the clocks part by a few ms
/// a day; the stranded-thread repair catches a hold that ends too soon).
pub const UNKNOWN_OFFSET_SLACK_NS: u64 = 10_000_000;

/// The 0-lag time, CLOCK_MONOTONIC, of a server that spent its budget,
/// plus `MARGIN_NS`; None when it has budget left (not throttled) or was
/// never started (deadline 0). `offset_ns`: the scheduler's clock minus
/// CLOCK_MONOTONIC.
pub fn zero_lag_ns(s: Server, budget_ns: u64, period_ns: u64, offset_ns: i64) -> Option<u64> {
    if s.runtime > 0 || s.deadline == 0 || budget_ns == 0 {
        return None;
    }
    let lag = (u128::from(s.runtime.unsigned_abs()) * u128::from(period_ns) / u128::from(budget_ns))
        as i128;
    let z = i128::from(s.deadline) + lag - i128::from(offset_ns) + i128::from(MARGIN_NS);
    u64::try_from(z.max(0)).ok()
}

/// The threads held and the clock offset they are computed with.
#[derive(Debug, Default)]
pub struct ZeroLag {
    /// Thread → no SCHED_DEADLINE before this (CLOCK_MONOTONIC).
    until: BTreeMap<u32, u64>,
    /// (offset, measured at), or None: not measured yet.
    offset: Option<(Result<i64, String>, u64)>,
}

impl ZeroLag {
    /// The offset to convert a deadline with, measured when stale; an
    /// unknown one counts as `UNKNOWN_OFFSET_SLACK_NS` behind (later Z).
    fn offset_ns(&mut self, host: &Host, now_ns: u64) -> i64 {
        let stale = self
            .offset
            .as_ref()
            .is_none_or(|(_, at)| now_ns.saturating_sub(*at) > OFFSET_MAX_AGE_NS);
        if stale {
            let measured = host.sched_clock_offset();
            if let Err(why) = &measured {
                tracing::warn!(
                    "the scheduler clock's offset from CLOCK_MONOTONIC is unknown ({why}): a thread re-granted after spending its budget waits {} ms more than its 0-lag time",
                    UNKNOWN_OFFSET_SLACK_NS / 1_000_000
                );
            }
            self.offset = Some((measured, now_ns));
        }
        match &self.offset {
            Some((Ok(ns), _)) => *ns,
            _ => -(UNKNOWN_OFFSET_SLACK_NS as i64),
        }
    }

    /// `s` with its deadline moved from the scheduler's clock, where the
    /// kernel shows it, to CLOCK_MONOTONIC (an unknown offset counts as
    /// `UNKNOWN_OFFSET_SLACK_NS` later); a deadline of 0 (never started)
    /// stays 0.
    pub fn on_monotonic(&mut self, host: &Host, s: Server, now_ns: u64) -> Server {
        if s.deadline == 0 {
            return s;
        }
        let offset = self.offset_ns(host, now_ns);
        let deadline = (i128::from(s.deadline) - i128::from(offset)).max(1);
        Server {
            deadline: u64::try_from(deadline).unwrap_or(u64::MAX),
            ..s
        }
    }

    /// A thread leaves (or is taken off) SCHED_DEADLINE with `server`:
    /// hold it if it spent its budget. Its 0-lag time, when held.
    pub fn leaving(
        &mut self,
        host: &Host,
        tid: u32,
        server: Server,
        budget_ns: u64,
        period_ns: u64,
        now_ns: u64,
    ) -> Option<u64> {
        if server.runtime > 0 || server.deadline == 0 {
            tracing::debug!(
                "thread {tid} leaves SCHED_DEADLINE at {now_ns} with dl.runtime {} dl.deadline {}: not held",
                server.runtime,
                server.deadline
            );
            return None;
        }
        let offset = self.offset_ns(host, now_ns);
        let z = zero_lag_ns(server, budget_ns, period_ns, offset).filter(|&z| z > now_ns);
        tracing::debug!(
            "thread {tid} leaves SCHED_DEADLINE at {now_ns} with dl.runtime {} dl.deadline {} (clock offset {offset}): held until {z:?}",
            server.runtime,
            server.deadline
        );
        let z = z?;
        let until = self.until.entry(tid).or_insert(z);
        *until = (*until).max(z);
        Some(*until)
    }

    /// Until when this thread must not be SCHED_DEADLINE (None: it may).
    pub fn until(&self, tid: u32, now_ns: u64) -> Option<u64> {
        self.until.get(&tid).copied().filter(|&z| z > now_ns)
    }

    /// Forget the holds that are over.
    pub fn expire(&mut self, now_ns: u64) {
        self.until.retain(|_, z| *z > now_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeMachine;

    const MS: u64 = 1_000_000;

    fn put(m: &FakeMachine, offset: &str) {
        crate::host::write_fake_file(&m.host(), crate::host::FAKE_SCHED_CLOCK_OFFSET, offset);
    }

    fn spent(runtime: i64, deadline: u64) -> Server {
        Server { runtime, deadline }
    }

    /// Z = deadline + |runtime| × period / budget, moved to CLOCK_MONOTONIC
    /// by the offset, plus the margin; none with budget left.
    #[test]
    fn the_zero_lag_time_follows_the_overrun() {
        // 0.35 ms over a 1 ms budget every 10 ms: 3.5 ms after the deadline.
        let z = zero_lag_ns(spent(-350_000, 100 * MS), MS, 10 * MS, 0);
        assert_eq!(z, Some(100 * MS + 3_500_000 + MARGIN_NS));
        // The scheduler's clock 4 ms ahead: 4 ms sooner on CLOCK_MONOTONIC.
        let z = zero_lag_ns(spent(-350_000, 100 * MS), MS, 10 * MS, 4 * MS as i64);
        assert_eq!(z, Some(96 * MS + 3_500_000 + MARGIN_NS));
        // Exactly spent: Z is the deadline.
        assert_eq!(
            zero_lag_ns(spent(0, 100 * MS), MS, 10 * MS, 0),
            Some(100 * MS + MARGIN_NS)
        );
        assert_eq!(zero_lag_ns(spent(1, 100 * MS), MS, 10 * MS, 0), None);
        assert_eq!(zero_lag_ns(spent(-5, 0), MS, 10 * MS, 0), None);
    }

    /// Held until Z (the later of two holds), not after, and only a thread
    /// that spent its budget; the offset comes from the host.
    #[test]
    fn a_thread_is_held_until_its_zero_lag_time() {
        let m = FakeMachine::new(2).build();
        let host = m.host();
        put(&m, &(2 * MS).to_string());
        let mut z = ZeroLag::default();
        let now = 95 * MS;
        assert_eq!(
            z.leaving(&host, 7, spent(100, 100 * MS), MS, 10 * MS, now),
            None
        );
        let until = z.leaving(&host, 7, spent(-200_000, 100 * MS), MS, 10 * MS, now);
        assert_eq!(until, Some(98 * MS + 2 * MS + MARGIN_NS));
        // A shorter hold noted later does not shorten it.
        z.leaving(&host, 7, spent(-1, 96 * MS), MS, 10 * MS, now);
        assert_eq!(z.until(7, now), until);
        assert_eq!(z.until(8, now), None);
        let after = until.unwrap();
        assert_eq!(z.until(7, after), None);
        z.expire(after);
        assert!(z.until.is_empty());
        // A Z already past holds nothing.
        assert_eq!(z.leaving(&host, 9, spent(-1, MS), MS, 10 * MS, now), None);
    }

    /// What a thread ran between the read and the switch comes out of its
    /// server; a server with budget left after it is not held.
    #[test]
    fn what_ran_after_the_read_is_spent_from_the_server() {
        let read = Server {
            runtime: 300_000,
            deadline: 100 * MS,
        };
        let left = spent_in_between(read, 5_000_000, 7_500_000);
        assert_eq!(left.runtime, -2_200_000);
        assert_eq!(left.deadline, 100 * MS);
        // 2.2 ms over a 0.5 ms budget every 10 ms: 44 ms after D.
        assert_eq!(
            zero_lag_ns(left, 500_000, 10 * MS, 0),
            Some(100 * MS + 44 * MS + MARGIN_NS)
        );
        assert_eq!(
            spent_in_between(read, 5_000_000, 5_100_000).runtime,
            200_000
        );
        assert_eq!(
            zero_lag_ns(
                spent_in_between(read, 5_000_000, 5_100_000),
                500_000,
                10 * MS,
                0
            ),
            None
        );
        // A clock that went back (a reused tid) counts as nothing run.
        assert_eq!(spent_in_between(read, 5_000_000, 1_000).runtime, 300_000);
    }

    /// A runnable thread with little left is counted as having spent it
    /// (this much over); a sleeping one, or one with enough left, as read.
    #[test]
    fn a_runnable_thread_with_little_left_leaves_spent() {
        let s = |runtime| Server {
            runtime,
            deadline: 5 * MS,
        };
        assert_eq!(
            as_it_leaves(s(50_000), || true).runtime,
            50_000 - RUNNING_MARGIN_NS
        );
        assert_eq!(as_it_leaves(s(50_000), || false), s(50_000));
        assert_eq!(
            as_it_leaves(s(RUNNING_MARGIN_NS), || true),
            s(RUNNING_MARGIN_NS)
        );
        assert_eq!(as_it_leaves(s(-3), || true), s(-3));
    }

    /// An offset that cannot be read makes the hold longer, never shorter.
    #[test]
    fn an_unknown_offset_holds_longer() {
        let m = FakeMachine::new(2).build();
        let host = m.host();
        put(&m, "not a number");
        let mut z = ZeroLag::default();
        let until = z.leaving(&host, 7, spent(0, 100 * MS), MS, 10 * MS, 95 * MS);
        assert_eq!(until, Some(100 * MS + UNKNOWN_OFFSET_SLACK_NS + MARGIN_NS));
    }
}

#[cfg(test)]
#[path = "zero_lag_tests.rs"]
mod manager_tests;
