//! The Manager's side of stranded threads (`daemon/stranded.rs`: how a
//! thread is watched; budget-based RTAI §3.3): a hard grant's thread
//! runnable without running for several periods gets its policy set again.

use super::Manager;
use crate::daemon::grant;
use crate::daemon::stranded::Server;
use crate::daemon::stranded::{
    awaits_replenishment, kernel_view, limit_ns, note_server, overdue, server, stuck_for, EVERY_NS,
    LATE_LOOK_NS, OVERDUE_MIN_NS,
};
use crate::tasks;
use rtmgr_sys::sched::SchedAttr;

/// A hard grant's thread found stranded, and what its repair needs.
struct Stuck {
    id: u64,
    cpu: u32,
    tid: u32,
    /// Its own policy, from before the grant.
    before: SchedAttr,
    for_ns: u64,
    /// Its deadline server as the kernel showed it (its deadline on the
    /// scheduler's clock).
    server: Option<Server>,
    /// The same, its deadline on CLOCK_MONOTONIC.
    seen: Option<Server>,
}

impl Manager {
    /// Look at the hard grants' threads (the server calls it often; it looks
    /// every `EVERY_NS`) and repair the stranded ones. Returns the threads
    /// repaired now.
    pub fn repair_stranded(&mut self, now_ns: u64) -> Vec<u32> {
        let since_last = now_ns.saturating_sub(self.stranded.last_ns);
        if since_last < EVERY_NS {
            return Vec::new();
        }
        if self.stranded.last_ns != 0 && since_last > LATE_LOOK_NS {
            crate::daemon::stranded::restart_watch(&mut self.stranded.seen, now_ns);
        }
        self.stranded.last_ns = now_ns;
        let mut watched = Vec::new();
        let mut stuck = Vec::new();
        for g in self.grants.values().filter(|g| g.demand.is_hard()) {
            // A pending thread (SCHED_FIFO 1) is `pending.rs`'s.
            for t in g.threads.iter() {
                if self.pending.threads.contains_key(&t.tid) {
                    continue;
                }
                watched.push(t.tid);
                let Some(for_ns) = stuck_for(&mut self.stranded.seen, &self.host, t.tid, now_ns)
                else {
                    continue;
                };
                if for_ns < OVERDUE_MIN_NS {
                    continue;
                }
                // Only a thread already runnable without running for a
                // while has its server read; one the kernel replenished
                // since the last look counts from now.
                let server = server(&self.host, t.tid);
                let for_ns = note_server(&mut self.stranded.seen, t.tid, server, now_ns);
                if for_ns < OVERDUE_MIN_NS {
                    continue;
                }
                // Its deadline against now on one clock: the scheduler's
                // runs behind CLOCK_MONOTONIC (4 ms on one boot of this
                // VM, 12 ms on another), and a thread still waiting for
                // its replenishment was taken for stranded when compared
                // without it.
                let seen = server.map(|s| self.zero_lag.on_monotonic(&self.host, s, now_ns));
                let (period, deadline) = (g.demand.period_ns, g.demand.deadline_ns);
                let stranded = overdue(period, deadline, seen, now_ns)
                    || (for_ns >= limit_ns(g)
                        && !awaits_replenishment(period, deadline, seen, now_ns));
                if stranded && tasks::same_task(&self.host, t.tid, t.start_time) {
                    stuck.push(Stuck {
                        id: g.id,
                        cpu: g.cpu,
                        tid: t.tid,
                        before: t.attr,
                        for_ns,
                        server,
                        seen,
                    });
                }
            }
        }
        self.stranded.seen.retain(|tid, _| watched.contains(tid));
        let mut repaired = Vec::new();
        for Stuck {
            id,
            cpu,
            tid,
            before,
            for_ns,
            server,
            seen,
        } in stuck
        {
            let Some(g) = self.grants.get(&id) else {
                continue;
            };
            let (want, demand) = (grant::granted_attr(&g.demand), g.demand);
            // Throttled before its 0-lag time: SCHED_DEADLINE set again now
            // would leave it throttled (`zero_lag.rs`); its own policy until
            // then, held and pending (the hold in the grant's record in
            // memory, so that a look for drift takes it for what it is; not
            // journalled). Else the same attributes again change nothing
            // in the kernel: the thread's own policy for a moment, then the
            // grant's (it is on its RT CPU's run queue, where the kernel
            // admits it).
            let hold = server.and_then(|s| {
                let (budget, period) = (demand.budget_ns, demand.period_ns);
                self.zero_lag
                    .leaving(&self.host, tid, s, budget, period, now_ns)
            });
            if let (Some(z), Some(g)) = (hold, self.grants.get_mut(&id)) {
                for t in g.threads.iter_mut().filter(|t| t.tid == tid) {
                    t.hold_until_ns = Some(z);
                }
            }
            // Read before the repair, which may let it finish exiting.
            let exiting = match tasks::exiting(&self.host, tid) {
                Some(true) => ", exiting",
                _ => "",
            };
            let r = match hold {
                Some(_) => self.host.set_attr(tid, &before),
                None => self
                    .host
                    .set_attr(tid, &before)
                    .and_then(|()| self.host.set_attr(tid, &want)),
            };
            match r {
                Ok(()) => {
                    let how = match hold {
                        Some(z) => {
                            self.pending.held += 1;
                            self.hold_pending(tid, id, cpu, Some(z), now_ns);
                            format!(
                                "its own policy until its 0-lag time, {:.1} ms from now, then SCHED_DEADLINE",
                                z.saturating_sub(now_ns) as f64 / 1e6
                            )
                        }
                        None => "its policy was set again".to_string(),
                    };
                    let kernel = match kernel_view(seen, now_ns) {
                        v if v.is_empty() => v,
                        v => format!(" ({v})"),
                    };
                    tracing::warn!(
                        "reservation {id}: thread {tid} on CPU {cpu} was runnable without running for {} ms{kernel}{exiting}; {how}",
                        for_ns / 1_000_000
                    );
                    self.stranded.repaired += 1;
                    self.stranded.seen.remove(&tid);
                    #[cfg(feature = "metrics")]
                    if let Some(mx) = &self.metrics {
                        mx.stranded(cpu);
                    }
                    repaired.push(tid);
                }
                Err(e) => tracing::warn!(
                    "reservation {id}: thread {tid} on CPU {cpu} is stranded (runnable, not running for {} ms) and could not be repaired: {e}",
                    for_ns / 1_000_000
                ),
            }
        }
        repaired
    }
}

#[cfg(test)]
mod tests {
    use crate::daemon::manager::Manager;
    use crate::daemon::pending::pending_tests::reserve_hard;
    use crate::daemon::release::regrant_tests::{manager, PID};
    use crate::fake::FakeMachine;
    use crate::host::Host;

    const MS: u64 = 1_000_000;

    /// The client's thread runnable (R), its CPU time at `exec_ns`, its
    /// deadline server's deadline at `deadline_ns`.
    fn runnable_not_running(host: &Host, exec_ns: u64, deadline_ns: u64) {
        let path = format!("/proc/{PID}/stat");
        let stat = host.read(&path).unwrap();
        let (head, tail) = stat.split_at(stat.rfind(')').unwrap() + 1);
        let mut fields: Vec<String> = tail.split_whitespace().map(String::from).collect();
        fields[0] = "R".into();
        host.write(&path, &format!("{head} {}\n", fields.join(" ")))
            .unwrap();
        host.write(
            format!("/proc/{PID}/schedstat"),
            &format!("{exec_ns} 0 0\n"),
        )
        .unwrap();
        host.write(
            format!("/proc/{PID}/sched"),
            &format!("client ({PID}, #threads: 1)\n---\npolicy : 6\ndl.runtime : -20000\ndl.deadline : {deadline_ns}\n"),
        )
        .unwrap();
    }

    fn hard_grant(m: &FakeMachine) -> Manager {
        let mut d = manager(m);
        reserve_hard(&mut d, m);
        d
    }

    /// A throttled thread whose replenishment is overdue (its deadline 30 ms
    /// past, a 10 ms period) is repaired after 20 ms runnable without
    /// running, not 50.
    #[test]
    fn a_thread_whose_replenishment_is_overdue_is_repaired_after_20_ms() {
        let m = FakeMachine::new(2).task(PID, "client").build();
        let mut d = hard_grant(&m);
        let t0 = 1_000 * MS;
        runnable_not_running(&m.host(), 5, t0 - 30 * MS);
        assert!(d.repair_stranded(t0).is_empty(), "first look");
        assert_eq!(d.repair_stranded(t0 + 25 * MS), vec![PID]);
        assert_eq!(d.status().stranded_repaired, 1);
    }

    /// The scheduler's clock 12 ms behind CLOCK_MONOTONIC (as on one boot
    /// of this VM): a throttled thread whose deadline, on that clock, is 11
    /// ms before now is 1 ms from its replenishment, waiting, not stranded.
    /// Compared on one clock only: the soak's threads were repaired so, a
    /// few ms before their replenishment.
    #[test]
    fn a_deadline_is_compared_with_now_on_one_clock() {
        let m = FakeMachine::new(2).task(PID, "client").build();
        let mut d = hard_grant(&m);
        let host = m.host();
        let offset = host.path(crate::host::FAKE_SCHED_CLOCK_OFFSET);
        std::fs::create_dir_all(offset.parent().unwrap()).unwrap();
        std::fs::write(&offset, "-12000000").unwrap();
        let t0 = 1_000 * MS;
        runnable_not_running(&host, 5, t0 + 25 * MS - 11 * MS);
        assert!(d.repair_stranded(t0).is_empty(), "first look");
        assert!(
            d.repair_stranded(t0 + 25 * MS).is_empty(),
            "1 ms before its replenishment"
        );
        assert_eq!(
            d.repair_stranded(t0 + 50 * MS),
            vec![PID],
            "overdue on CLOCK_MONOTONIC too"
        );
    }

    /// A throttled thread whose next period has not begun (its deadline
    /// ahead: after a long overrun the kernel pushes it several periods on)
    /// is waiting, not stranded, past the limit (4 periods, at least
    /// 50 ms); repaired once that replenishment is overdue.
    #[test]
    fn a_thread_waiting_for_its_next_period_is_left_until_it_is_overdue() {
        let m = FakeMachine::new(2).task(PID, "client").build();
        let mut d = hard_grant(&m);
        let t0 = 1_000 * MS;
        runnable_not_running(&m.host(), 5, t0 + 45 * MS);
        assert!(d.repair_stranded(t0).is_empty(), "first look");
        assert!(d.repair_stranded(t0 + 25 * MS).is_empty(), "throttled");
        assert!(
            d.repair_stranded(t0 + 50 * MS).is_empty(),
            "still throttled"
        );
        assert_eq!(d.status().stranded_repaired, 0);
        assert_eq!(d.repair_stranded(t0 + 70 * MS), vec![PID]);
        assert_eq!(d.status().stranded_repaired, 1);
    }

    /// A hard grant's thread runnable without running, its server showing
    /// `runtime` left and `deadline_ns`.
    fn stuck_with_budget(runtime: i64, deadline_ns: u64) -> (FakeMachine, Manager) {
        let m = FakeMachine::new(2).task(PID, "client").build();
        let d = hard_grant(&m);
        let host = m.host();
        runnable_not_running(&host, 5, deadline_ns);
        let sched = format!("/proc/{PID}/sched");
        let text = host
            .read(&sched)
            .unwrap()
            .replace("-20000", &runtime.to_string());
        host.write(&sched, &text).unwrap();
        (m, d)
    }

    /// Runnable without running past the limit with budget left (or no
    /// server shown): stranded.
    #[test]
    fn a_thread_with_budget_left_is_repaired_at_the_limit() {
        let t0 = 1_000 * MS;
        let (_m, mut d) = stuck_with_budget(300_000, t0 + 45 * MS);
        assert!(d.repair_stranded(t0).is_empty(), "first look");
        assert!(d.repair_stranded(t0 + 25 * MS).is_empty());
        assert_eq!(d.repair_stranded(t0 + 50 * MS), vec![PID]);
    }

    /// Budget left and its deadline ahead (a thread that yielded, throttled
    /// until its deadline, here one a replenishment pushed 30 ms on):
    /// waiting, not stranded, past the limit; repaired once overdue.
    #[test]
    fn a_thread_throttled_with_budget_left_until_its_deadline_is_left() {
        let t0 = 1_000 * MS;
        let (_m, mut d) = stuck_with_budget(81_000, t0 + 85 * MS);
        for at in [0, 25, 50, 75] {
            assert!(
                d.repair_stranded(t0 + at * MS).is_empty(),
                "deadline ahead at +{at} ms"
            );
        }
        assert_eq!(d.repair_stranded(t0 + 100 * MS), vec![PID], "overdue");
    }

    /// The daemon held up 54 ms between two looks (its loop in a kernel
    /// call): the look after it cannot tell what the thread did meanwhile
    /// and restarts its count; still stuck at the next look (its deadline
    /// long past), it is repaired then.
    #[test]
    fn a_look_after_the_daemon_was_held_up_restarts_the_count() {
        let t0 = 1_000 * MS;
        let (_m, mut d) = stuck_with_budget(300_000, t0 + 45 * MS);
        assert!(d.repair_stranded(t0).is_empty(), "first look");
        assert!(d.repair_stranded(t0 + 54 * MS).is_empty(), "after the gap");
        assert_eq!(d.repair_stranded(t0 + 80 * MS), vec![PID]);
    }

    /// A thread paying for a long overrun, replenished by the kernel just
    /// before a look and not yet run: its budget back and its deadline
    /// ahead after 75 ms runnable without running. Not stranded (its policy
    /// set again would cut its penalty short); counted from that
    /// replenishment, and repaired only if it then stays stuck.
    #[test]
    fn a_thread_just_replenished_after_a_long_penalty_is_not_stranded() {
        let m = FakeMachine::new(2).task(PID, "client").build();
        let mut d = hard_grant(&m);
        let host = m.host();
        let t0 = 1_000 * MS;
        runnable_not_running(&host, 5, t0 + 55 * MS);
        for at in [0, 25, 50] {
            assert!(
                d.repair_stranded(t0 + at * MS).is_empty(),
                "throttled at +{at} ms"
            );
        }
        // Replenished at +62 ms: budget back, the deadline a period on.
        let sched = format!("/proc/{PID}/sched");
        let text = host
            .read(&sched)
            .unwrap()
            .replace("-20000", "41000")
            .replace(&(t0 + 55 * MS).to_string(), &(t0 + 72 * MS).to_string());
        host.write(&sched, &text).unwrap();
        assert!(
            d.repair_stranded(t0 + 75 * MS).is_empty(),
            "just replenished"
        );
        assert_eq!(d.status().stranded_repaired, 0);
        // Still not run, its server as it was: stranded after all.
        let repaired: Vec<u32> = [100, 125]
            .iter()
            .flat_map(|at| d.repair_stranded(t0 + at * MS))
            .collect();
        assert_eq!(repaired, vec![PID]);
    }
}
