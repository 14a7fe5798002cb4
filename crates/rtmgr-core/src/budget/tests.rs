//! Tests of the budget account under a fake clock (budget-based RTAI §3.2:
//! catch-up and ignored waits, `if_wait` saturation; §3.3: the soft variants).

use super::*;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

/// A fake thread: wall clock and its own CPU clock.
struct Fake {
    now: u64,
    cpu: u64,
    acct: BudgetAccount,
    records: Vec<PeriodRecord>,
}

impl Fake {
    fn new(p: u64, w: Option<u64>, enf: Enforcer, cap: u32) -> Self {
        let res = Reservation::new(10 * MS, p, w, None).unwrap();
        let mut f = Fake {
            now: 0,
            cpu: 0,
            acct: BudgetAccount::new(res, enf, cap).unwrap(),
            records: vec![],
        };
        f.now = f.acct.first_release();
        let mut sink = |r| f.records.push(r);
        assert_eq!(
            f.acct.released(f.now, f.cpu, &mut sink),
            WaitOutcome::OnTime
        );
        f
    }
    /// Run `d` ns of CPU, with perfect soft enforcement (the timer fires
    /// exactly when asked, handler cost `late` ns of CPU).
    fn run(&mut self, mut d: u64, late: u64) {
        loop {
            let mut recs = vec![];
            let e = self.acct.poll(self.now, self.cpu, &mut |r| recs.push(r));
            self.records.extend(recs);
            match e {
                Enforce::Idle => {
                    self.now += d;
                    self.cpu += d;
                    return;
                }
                Enforce::Arm(a) => {
                    if a >= d {
                        self.now += d;
                        self.cpu += d;
                        return;
                    }
                    self.now += a + late;
                    self.cpu += a + late;
                    d = d.saturating_sub(a + late);
                    if d == 0 {
                        return;
                    }
                }
                Enforce::Spin { cpu_ns, .. } => {
                    let s = cpu_ns - self.cpu;
                    self.now += s;
                    self.cpu += s;
                    d = d.saturating_sub(s);
                }
                Enforce::Suspend(t) => {
                    self.now = t;
                    let mut recs = vec![];
                    self.acct
                        .released(self.now, self.cpu, &mut |r| recs.push(r));
                    self.records.extend(recs);
                    if d == 0 {
                        return;
                    }
                }
            }
        }
    }
    fn wait(&mut self) -> WaitOutcome {
        let mut recs = vec![];
        let a = self
            .acct
            .wait_period(self.now, self.cpu, &mut |r| recs.push(r));
        self.records.extend(recs);
        match a {
            WaitAction::Return(o) => o,
            WaitAction::SleepUntil(t) => {
                assert!(t > self.now);
                self.now = t;
                let mut recs = vec![];
                let o = self
                    .acct
                    .released(self.now, self.cpu, &mut |r| recs.push(r));
                self.records.extend(recs);
                o
            }
        }
    }
}

#[test]
fn rejects_bad_parameters() {
    assert_eq!(
        Reservation::new(0, 0, None, None),
        Err(BudgetError::ZeroPeriod)
    );
    assert_eq!(
        Reservation::new(0, 10, Some(0), None),
        Err(BudgetError::ZeroBudget)
    );
    assert!(matches!(
        Reservation::new(0, 10, Some(11), None),
        Err(BudgetError::BudgetExceedsPeriod { .. })
    ));
    assert!(matches!(
        Reservation::new(0, 10, Some(5), Some(4)),
        Err(BudgetError::Deadline { .. })
    ));
    assert!(matches!(
        Reservation::new(0, 10, Some(5), Some(11)),
        Err(BudgetError::Deadline { .. })
    ));
    assert_eq!(
        Reservation::new(u64::MAX, 10, None, None),
        Err(BudgetError::Overflow)
    );
    let r = Reservation::new(0, 10, Some(5), None).unwrap();
    assert_eq!(
        BudgetAccount::new(r, Enforcer::Kernel, 0).unwrap_err(),
        BudgetError::ZeroCap
    );
    assert!("bogus".parse::<SoftVariant>().is_err());
    assert_eq!(
        "early-spin".parse::<SoftVariant>(),
        Ok(SoftVariant::EarlySpin)
    );
}

#[test]
fn within_budget_is_plain_periodic() {
    for enf in [
        Enforcer::None,
        Enforcer::Soft(SoftVariant::Rearm),
        Enforcer::Soft(SoftVariant::EarlySpin),
    ] {
        let w = if enf == Enforcer::None {
            None
        } else {
            Some(MS)
        };
        let mut f = Fake::new(4 * MS, w, enf, 10);
        for k in 1..=20u64 {
            f.run(900 * US, 0);
            assert_eq!(f.wait(), WaitOutcome::OnTime);
            assert_eq!(f.now, 10 * MS + k * 4 * MS, "absolute releases, no drift");
        }
        assert_eq!(f.records.len(), 20);
        assert!(f
            .records
            .iter()
            .all(|r| r.received_ns == 900 * US && !r.exhausted));
        assert_eq!(f.acct.totals().exhaustions, 0);
    }
}

#[test]
fn overrun_catches_up_and_ignores_delayed_wait() {
    let mut f = Fake::new(4 * MS, Some(MS), Enforcer::Soft(SoftVariant::Rearm), 10);
    // Job 0 needs 1.5 ms: suspended at 1 ms, continues in window 1.
    f.run(1500 * US, 0);
    assert_eq!(f.acct.window(), 1);
    assert_eq!(f.now, 14 * MS + 500 * US);
    assert_eq!(f.acct.if_wait(), 1);
    // The wait that belonged to window 0 is ignored: returns at once.
    let t = f.now;
    assert_eq!(f.wait(), WaitOutcome::Ignored);
    assert_eq!(f.now, t);
    // Job 1 is short: the next wait sleeps to release 2.
    f.run(300 * US, 0);
    assert_eq!(f.wait(), WaitOutcome::OnTime);
    assert_eq!(f.now, 18 * MS);
    let r0 = f.records[0];
    assert!(r0.exhausted && r0.received_ns == MS);
    assert_eq!(f.records[1].received_ns, 800 * US);
    assert_eq!(f.records[1].ignored_waits, 1);
    assert_eq!(f.records[1].latency_ns, Some(0));
}

#[test]
fn several_ignored_waits_in_a_row() {
    let mut f = Fake::new(2 * MS, Some(MS), Enforcer::Soft(SoftVariant::Rearm), 10);
    // One job of 3.5 ms: exhausts windows 0,1,2, finishes in window 3.
    f.run(3500 * US, 0);
    assert_eq!(f.acct.if_wait(), 3);
    assert_eq!(f.acct.window(), 3);
    // Three delayed waits are ignored in a row, the fourth sleeps.
    for _ in 0..3 {
        let t = f.now;
        assert_eq!(f.wait(), WaitOutcome::Ignored);
        assert_eq!(f.now, t);
    }
    assert_eq!(f.wait(), WaitOutcome::OnTime);
    assert_eq!(f.acct.totals().ignored_waits, 3);
    assert!(f.records[..3]
        .iter()
        .all(|r| r.exhausted && r.received_ns == MS));
}

#[test]
fn runaway_stays_within_budget_and_if_wait_saturates() {
    let cap = 5;
    let mut f = Fake::new(MS, Some(250 * US), Enforcer::Soft(SoftVariant::Rearm), cap);
    f.run(100 * MS, 0); // never calls wait_period
    assert!(f.records.len() >= 99);
    for r in &f.records {
        assert!(r.exhausted);
        assert_eq!(r.received_ns, 250 * US, "{r:?}");
    }
    assert_eq!(f.acct.if_wait(), cap);
    let t = f.acct.totals();
    assert_eq!(t.if_wait_saturated, t.exhaustions - cap as u64);
    // At the cap: `cap` waits are ignored, then the task sleeps again.
    for _ in 0..cap {
        assert_eq!(f.wait(), WaitOutcome::Ignored);
    }
    assert_eq!(f.wait(), WaitOutcome::OnTime);
}

#[test]
fn late_signal_overshoots_rearm_but_not_early_spin() {
    let late = 30 * US;
    let mut rearm = Fake::new(MS, Some(250 * US), Enforcer::Soft(SoftVariant::Rearm), 100);
    rearm.run(50 * MS, late);
    assert!(rearm.records.iter().all(|r| r.received_ns == 280 * US));
    let mut spin = Fake::new(
        MS,
        Some(250 * US),
        Enforcer::Soft(SoftVariant::EarlySpin),
        100,
    );
    spin.run(50 * MS, late);
    // After a few periods of learning the margin covers the delay.
    let tail = &spin.records[10..];
    assert!(
        tail.iter().all(|r| r.received_ns.abs_diff(250 * US) <= US),
        "{:?}",
        &tail[..3]
    );
    assert!(spin.acct.margin_ns() >= late);
}

#[test]
fn early_spin_learns_the_suspend_tail() {
    // Every suspension costs 8 µs of CPU after the decision (charged to
    // the window): the spin learns to stop that much early.
    let mut f = Fake::new(
        MS,
        Some(250 * US),
        Enforcer::Soft(SoftVariant::EarlySpin),
        100,
    );
    for _ in 0..60 {
        let mut recs = vec![];
        let e = f.acct.poll(f.now, f.cpu, &mut |r| recs.push(r));
        f.records.extend(recs);
        match e {
            Enforce::Arm(a) => {
                f.now += a;
                f.cpu += a;
            }
            Enforce::Spin { cpu_ns, .. } => {
                f.now += cpu_ns - f.cpu;
                f.cpu = cpu_ns;
            }
            Enforce::Suspend(t) => {
                f.cpu += 8 * US;
                f.now = t;
                let mut recs = vec![];
                f.acct.released(f.now, f.cpu, &mut |r| recs.push(r));
                f.records.extend(recs);
            }
            Enforce::Idle => unreachable!(),
        }
    }
    let last = f.records.last().unwrap();
    assert!(last.received_ns.abs_diff(250 * US) <= US, "{last:?}");
    assert!(f.acct.spin_bias_ns() >= 6 * US);
}

#[test]
fn compensate_charges_overshoot_to_next_window() {
    let mut f = Fake::new(
        MS,
        Some(250 * US),
        Enforcer::Soft(SoftVariant::Compensate),
        100,
    );
    f.run(20 * MS, 30 * US);
    // Average received over the run converges on W.
    let n = f.records.len() as u64;
    let total: u64 = f.records.iter().map(|r| r.received_ns).sum();
    let avg = total / n;
    assert!(avg.abs_diff(250 * US) <= 20 * US, "avg {avg}");
    assert!(f.records[1].budget_ns < 250 * US);
}

#[test]
fn preempted_task_reports_missed_releases() {
    let mut f = Fake::new(MS, None, Enforcer::None, 10);
    f.run(200 * US, 0);
    // Preempted for 2.5 ms (wall time passes, no CPU).
    f.now += 2500 * US;
    let o = f.wait();
    assert_eq!(o, WaitOutcome::Missed(2));
    // Next job belongs to window 2; its wait sleeps to release 3.
    assert_eq!(f.wait(), WaitOutcome::OnTime);
    assert_eq!(f.now, 10 * MS + 3 * MS);
    assert_eq!(f.acct.totals().missed, 2);
}

#[test]
fn kernel_enforcer_counts_throttled_windows() {
    let mut f = Fake::new(2 * MS, Some(MS), Enforcer::Kernel, 10);
    // Simulate the kernel: the task runs 1 ms, is throttled to the next
    // period, runs 0.5 ms and calls wait_period.
    f.now += MS;
    f.cpu += MS;
    f.now = 12 * MS;
    let mut recs = vec![];
    f.acct.observe(f.now, f.cpu, &mut |r| recs.push(r));
    f.records.extend(recs);
    f.now += 500 * US;
    f.cpu += 500 * US;
    assert_eq!(f.wait(), WaitOutcome::Ignored);
    assert!(f.records[0].exhausted);
    f.run(100 * US, 0);
    assert_eq!(f.wait(), WaitOutcome::OnTime);
    assert_eq!(f.now, 14 * MS);
}

#[test]
fn external_enforcer_suspends_on_request() {
    let mut f = Fake::new(4 * MS, Some(MS), Enforcer::External, 10);
    f.run(3 * MS, 0); // poll is Idle: the group decides
    assert_eq!(f.acct.totals().exhaustions, 0);
    let mut recs = vec![];
    let until = f.acct.suspend(f.now, f.cpu, &mut |r| recs.push(r));
    assert_eq!(until, 14 * MS);
    f.now = until;
    f.acct.released(f.now, f.cpu, &mut |r| recs.push(r));
    f.records.extend(recs);
    assert!(f.records[0].exhausted);
    assert_eq!(f.wait(), WaitOutcome::Ignored);
    assert_eq!(f.wait(), WaitOutcome::OnTime);
}

#[test]
fn rate_percent() {
    let r = PeriodRecord {
        budget_ns: 1000,
        received_ns: 990,
        ..Default::default()
    };
    assert_eq!(r.rate_percent(), Some(99.0));
    assert_eq!(PeriodRecord::default().rate_percent(), None);
}
