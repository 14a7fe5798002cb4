//! Stranded deadline threads: a thread of a hard grant that stays runnable
//! (state R) without running (its `sum_exec_runtime` in
//! /proc/<tid>/schedstat does not advance) for several periods is put back
//! on its run queue by setting its policy again, counted (`status`
//! `stranded_repaired`, the metric `rtmgr_stranded_repairs`) and logged
//! (budget-based RTAI §3.3: a hard reservation's thread gets its budget
//! every period; docs/serve.md "Stranded threads").

use super::grants_journal::Grant;
use crate::host::Host;
use crate::tasks;
use std::collections::BTreeMap;

/// Runnable without running for this many of its grant's periods, unless
/// the kernel shows it throttled until a replenishment still to come
/// (`awaits_replenishment`)…
pub const PERIODS: u64 = 4;
/// …and at least this long (a short period's thread may wait behind a
/// burst of interrupts, the kernel's own work, or the host's preemption of
/// the vCPU, ~10 ms here).
pub const MIN_NS: u64 = 50_000_000;
/// Look at most this often.
pub(in crate::daemon) const EVERY_NS: u64 = 20_000_000;

/// A look this long after the last one (the daemon itself held up: its
/// loop was seen 54 ms in state D, in a kernel call, in a soak run)
/// restarts every thread's count: what they did meanwhile is unknown.
/// Four spinning soak clients, waiting for the held-up daemon's answers,
/// were taken for stranded at the look after it: their CPU time as
/// schedstat showed it had not moved (deadline threads that yield at each
/// replenishment), and their servers, read only once a thread has been
/// stuck for `OVERDUE_MIN_NS`, had not been read before the gap, so their
/// replenishments went unseen (`note_server`).
pub(in crate::daemon) const LATE_LOOK_NS: u64 = 2 * EVERY_NS;

/// Count every watched thread as stuck from `now` on, if at all.
pub(in crate::daemon) fn restart_watch(seen: &mut BTreeMap<u32, Seen>, now: u64) {
    for e in seen.values_mut() {
        e.since_ns = now;
        e.server = None;
    }
}

/// What was last seen of one thread.
#[derive(Debug, Clone, Copy)]
pub(in crate::daemon) struct Seen {
    exec_ns: u64,
    /// Since when it has been runnable without running, and without the
    /// kernel acting on its deadline server (`note_server`).
    since_ns: u64,
    /// Its deadline server at the last look that read it.
    server: Option<Server>,
}

/// The threads being watched and what they last showed.
#[derive(Debug, Default)]
pub struct StrandWatch {
    pub(in crate::daemon) seen: BTreeMap<u32, Seen>,
    pub(in crate::daemon) last_ns: u64,
    /// Threads repaired since the daemon started.
    pub repaired: u64,
}

/// One look at a thread: Some(how long it has been runnable without
/// running) while it is, None otherwise (asleep, stopped, running, gone).
pub(in crate::daemon) fn stuck_for(
    seen: &mut BTreeMap<u32, Seen>,
    host: &Host,
    tid: u32,
    now: u64,
) -> Option<u64> {
    let (Some(state), Some(exec_ns)) = (tasks::state(host, tid), tasks::exec_ns(host, tid)) else {
        seen.remove(&tid);
        return None;
    };
    let e = seen.entry(tid).or_insert(Seen {
        exec_ns,
        since_ns: now,
        server: None,
    });
    if state != 'R' || e.exec_ns != exec_ns {
        *e = Seen {
            exec_ns,
            since_ns: now,
            server: None,
        };
        return None;
    }
    Some(now.saturating_sub(e.since_ns))
}

/// A thread found stuck (`stuck_for`) has its deadline server read: if the
/// kernel changed it since the last read (a replenishment: its budget back,
/// its deadline moved on), the thread is counted as stuck from now on, as
/// if it had run. A thread paying for an overrun of many budgets waits
/// throttled for as many periods (`awaits_replenishment`); the look that
/// comes just after its replenishment, before it has run, saw it runnable
/// without running all that while and its budget back: taken for stranded
/// (the soak, 2026-11-28: 108 ms, 0.041 ms left, its deadline 20 ms
/// ahead), and its policy set again cut its penalty short. Returns how
/// long it has been stuck.
pub(in crate::daemon) fn note_server(
    seen: &mut BTreeMap<u32, Seen>,
    tid: u32,
    server: Option<Server>,
    now: u64,
) -> u64 {
    let Some(e) = seen.get_mut(&tid) else {
        return 0;
    };
    if e.server.is_some() && e.server != server {
        e.since_ns = now;
    }
    e.server = server;
    now.saturating_sub(e.since_ns)
}

/// A deadline thread's server as /proc/<tid>/sched shows it (ns; the
/// deadline on the scheduler's clock, which follows CLOCK_MONOTONIC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::daemon) struct Server {
    pub runtime: i64,
    /// 0: the kernel has not started the server since the policy was set.
    pub deadline: u64,
}

/// The thread's deadline server, None when the kernel does not show one.
pub(in crate::daemon) fn server(host: &Host, tid: u32) -> Option<Server> {
    server_and_cpu(host, tid).map(|(s, _)| s)
}

/// The thread's deadline server and, from the same read, its CPU time
/// (`se.sum_exec_runtime`, ns): the kernel charges both at once, so the
/// pair agrees even when the thread runs and both are up to a tick old.
pub(in crate::daemon) fn server_and_cpu(host: &Host, tid: u32) -> Option<(Server, Option<u64>)> {
    let sched = host.read_opt(format!("/proc/{tid}/sched"))?;
    let field = |key: &str| rtmgr_core::proctext::sched_field(&sched, key);
    let server = Server {
        runtime: field("dl.runtime")?,
        deadline: u64::try_from(field("dl.deadline")?).ok()?,
    };
    let cpu = rtmgr_core::proctext::sched_field_ms_as_ns(&sched, "se.sum_exec_runtime");
    Some((server, cpu))
}

/// What the kernel says of a stranded thread, for its log line.
pub(in crate::daemon) fn kernel_view(server: Option<Server>, now_ns: u64) -> String {
    let Some(s) = server else {
        return String::new();
    };
    let deadline = if s.deadline == 0 {
        "dl.deadline 0 (server not started)".to_string()
    } else {
        format!(
            "dl.deadline {:+.1} ms from now",
            (s.deadline as f64 - now_ns as f64) / 1e6
        )
    };
    format!("dl.runtime {:.3} ms, {deadline}", s.runtime as f64 / 1e6)
}

/// Runnable without running for at least this long, a thread whose
/// replenishment is overdue (`overdue`) is stranded before `limit_ns`.
pub const OVERDUE_MIN_NS: u64 = 20_000_000;
/// Overdue: this long past the start of the period after its deadline,
/// when the kernel replenishes a throttled server (one host preemption of
/// the vCPU, ~10 ms here, delays the replenishment timer too).
pub const OVERDUE_SLACK_NS: u64 = 10_000_000;

/// Is this hard grant's thread's replenishment overdue: its server's
/// deadline still the old one, well after the next period began? A
/// throttled thread is given its budget and a later deadline at the start
/// of its next period; one still runnable without running after that, its
/// deadline unchanged, waits for a replenishment that does not come.
pub(in crate::daemon) fn overdue(
    period_ns: u64,
    deadline_ns: u64,
    server: Option<Server>,
    now_ns: u64,
) -> bool {
    let Some(s) = server else {
        return false;
    };
    if s.deadline == 0 {
        return false;
    }
    let next_period = (s.deadline + period_ns).saturating_sub(deadline_ns);
    now_ns > next_period + OVERDUE_SLACK_NS
}

/// Is this hard grant's thread throttled with its replenishment still to
/// come (its budget spent, or its deadline still ahead; the start of the
/// period after its deadline not yet passed by more than the slack)? Then
/// it is waiting as the kernel's budget rules say, however long: a thread
/// that overran several budgets has its deadline pushed that many periods
/// on at each replenishment (seen here: 64 clients of 0.125 ms each, their
/// deadlines 25–190 ms ahead), and its policy set again would change
/// nothing. A deadline thread that calls sched_yield (rtmgr's client
/// library does while it waits for an answer) is throttled with budget
/// left until its deadline: after such a pushed replenishment, a soak
/// client waited 65 ms, 0.081 ms left and its deadline 31 ms ahead, and was
/// taken for stranded. A stranded thread's deadline is past (its server
/// is the one it had when it was stranded): `overdue` finds it.
pub(in crate::daemon) fn awaits_replenishment(
    period_ns: u64,
    deadline_ns: u64,
    server: Option<Server>,
    now_ns: u64,
) -> bool {
    server.is_some_and(|s| s.deadline != 0 && (s.runtime <= 0 || s.deadline > now_ns))
        && !overdue(period_ns, deadline_ns, server, now_ns)
}

/// How long a grant's thread may stay runnable without running.
pub fn limit_ns(g: &Grant) -> u64 {
    (g.demand.period_ns.saturating_mul(PERIODS)).max(MIN_NS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeMachine;

    fn put(host: &Host, tid: u32, state: char, exec_ns: u64) {
        let stat = format!("{tid} (t) {state} 1 {tid} {tid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n", 1000 + tid);
        host.write(format!("/proc/{tid}/stat"), &stat).unwrap();
        host.write(
            format!("/proc/{tid}/schedstat"),
            &format!("{exec_ns} 0 0\n"),
        )
        .unwrap();
    }

    /// Runnable and not running: stuck since the first look; running,
    /// asleep or gone: not stuck, and the clock starts again.
    #[test]
    fn a_thread_is_stuck_only_while_runnable_without_running() {
        let m = FakeMachine::new(2).task(300, "t").build();
        let host = m.host();
        let mut seen = BTreeMap::new();
        put(&host, 300, 'R', 5);
        assert_eq!(stuck_for(&mut seen, &host, 300, 1_000), Some(0));
        assert_eq!(stuck_for(&mut seen, &host, 300, 9_000), Some(8_000));
        // It ran: not stuck, and counted from now on.
        put(&host, 300, 'R', 6);
        assert_eq!(stuck_for(&mut seen, &host, 300, 10_000), None);
        assert_eq!(stuck_for(&mut seen, &host, 300, 12_000), Some(2_000));
        // Asleep: not stuck however long.
        put(&host, 300, 'S', 6);
        assert_eq!(stuck_for(&mut seen, &host, 300, 99_000), None);
        // Woken since: counted from the last look that saw it asleep.
        put(&host, 300, 'R', 6);
        assert_eq!(stuck_for(&mut seen, &host, 300, 100_000), Some(1_000));
        assert_eq!(stuck_for(&mut seen, &host, 300, 100_500), Some(1_500));
        // Gone: forgotten.
        std::fs::remove_file(host.path("/proc/300/schedstat")).unwrap();
        assert_eq!(stuck_for(&mut seen, &host, 300, 200_000), None);
        assert!(seen.is_empty());
    }

    fn sched_file(runtime: i64, deadline: u64) -> String {
        format!("t (300, #threads: 1)\n---\nse.exec_start                                :      1000.500000\ndl.runtime                                   :               {runtime}\ndl.deadline                                  :           {deadline}\n")
    }

    /// The kernel's view of a stranded thread, read from /proc/<tid>/sched.
    #[test]
    fn the_kernel_view_gives_runtime_and_deadline() {
        let m = FakeMachine::new(2).task(300, "t").build();
        let host = m.host();
        assert_eq!(server(&host, 300), None);
        assert_eq!(kernel_view(server(&host, 300), 0), "");
        host.write("/proc/300/sched", &sched_file(-25_000, 1_012_000_000))
            .unwrap();
        assert_eq!(
            kernel_view(server(&host, 300), 1_090_500_000),
            "dl.runtime -0.025 ms, dl.deadline -78.5 ms from now"
        );
        host.write("/proc/300/sched", &sched_file(100_000, 0))
            .unwrap();
        assert_eq!(
            kernel_view(server(&host, 300), 1_090_500_000),
            "dl.runtime 0.100 ms, dl.deadline 0 (server not started)"
        );
    }

    /// Overdue only once the period after the deadline began more than the
    /// slack ago; a constrained deadline's next period is later than it.
    #[test]
    fn a_replenishment_is_overdue_only_after_the_next_period_and_the_slack() {
        let at = |deadline| {
            Some(Server {
                runtime: -20_000,
                deadline,
            })
        };
        const MS: u64 = 1_000_000;
        // Implicit deadline (10 ms every 10 ms): replenished at the deadline.
        assert!(!overdue(10 * MS, 10 * MS, at(100 * MS), 105 * MS));
        assert!(!overdue(10 * MS, 10 * MS, at(100 * MS), 110 * MS));
        assert!(overdue(10 * MS, 10 * MS, at(100 * MS), 111 * MS));
        // Constrained (2 ms every 10 ms): the next period starts 8 ms later.
        assert!(!overdue(10 * MS, 2 * MS, at(100 * MS), 118 * MS));
        assert!(overdue(10 * MS, 2 * MS, at(100 * MS), 119 * MS));
        // Not started, or not shown: never.
        assert!(!overdue(10 * MS, 10 * MS, at(0), 500 * MS));
        assert!(!overdue(10 * MS, 10 * MS, None, 500 * MS));
    }
}
