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

/// Runnable without running for this many of its grant's periods (a
/// thread throttled after its budget waits at most one)…
pub const PERIODS: u64 = 4;
/// …and at least this long (a short period's thread may wait behind a
/// burst of interrupts, the kernel's own work, or the host's preemption of
/// the vCPU, ~10 ms here).
pub const MIN_NS: u64 = 50_000_000;
/// Look at most this often.
pub(in crate::daemon) const EVERY_NS: u64 = 20_000_000;

/// What was last seen of one thread.
#[derive(Debug, Clone, Copy)]
pub(in crate::daemon) struct Seen {
    exec_ns: u64,
    /// Since when it has been runnable without running.
    since_ns: u64,
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
    });
    if state != 'R' || e.exec_ns != exec_ns {
        *e = Seen {
            exec_ns,
            since_ns: now,
        };
        return None;
    }
    Some(now.saturating_sub(e.since_ns))
}

/// What the kernel says of a stranded thread, for its log line: its
/// deadline server's remaining runtime and its deadline, from
/// /proc/<tid>/sched (ns; the deadline on the scheduler's clock, which
/// follows CLOCK_MONOTONIC, `now_ns`). A deadline of 0 means the kernel has
/// not started the thread's server since its policy was set. Empty when
/// the kernel does not show them.
pub(in crate::daemon) fn kernel_view(host: &Host, tid: u32, now_ns: u64) -> String {
    let Some(sched) = host.read_opt(format!("/proc/{tid}/sched")) else {
        return String::new();
    };
    let field = |key: &str| -> Option<i64> {
        sched
            .lines()
            .find(|l| l.split_whitespace().next() == Some(key))?
            .rsplit(':')
            .next()?
            .trim()
            .parse()
            .ok()
    };
    let mut out = Vec::new();
    if let Some(rt) = field("dl.runtime") {
        out.push(format!("dl.runtime {:.3} ms", rt as f64 / 1e6));
    }
    match field("dl.deadline") {
        Some(0) => out.push("dl.deadline 0 (server not started)".into()),
        Some(dl) => out.push(format!(
            "dl.deadline {:+.1} ms from now",
            (dl as f64 - now_ns as f64) / 1e6
        )),
        None => {}
    }
    out.join(", ")
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

    /// The kernel's view of a stranded thread, read from /proc/<tid>/sched.
    #[test]
    fn the_kernel_view_gives_runtime_and_deadline() {
        let m = FakeMachine::new(2).task(300, "t").build();
        let host = m.host();
        assert_eq!(kernel_view(&host, 300, 0), "");
        let sched = |runtime: i64, deadline: u64| {
            format!("t (300, #threads: 1)\n---\nse.exec_start                                :      1000.500000\ndl.runtime                                   :               {runtime}\ndl.deadline                                  :           {deadline}\n")
        };
        host.write("/proc/300/sched", &sched(-25_000, 1_012_000_000))
            .unwrap();
        assert_eq!(
            kernel_view(&host, 300, 1_090_500_000),
            "dl.runtime -0.025 ms, dl.deadline -78.5 ms from now"
        );
        host.write("/proc/300/sched", &sched(100_000, 0)).unwrap();
        assert_eq!(
            kernel_view(&host, 300, 1_090_500_000),
            "dl.runtime 0.100 ms, dl.deadline 0 (server not started)"
        );
    }
}
