//! Budget accounting for periodic tasks (budget-based RTAI §3.2–§3.3): the
//! pure state machine behind `rtmgr-rt`'s `wait_period()` and its soft/hard
//! enforcement. It is driven by readings of CLOCK_MONOTONIC (`now`) and of the
//! task's thread CPU clock (`cpu`), both in ns, and never reads a clock itself,
//! so it runs unchanged under a fake clock in tests.
//!
//! Windows: period `k` is the half-open interval `[start + k·P, start + (k+1)·P)`.
//! The budget W is replenished at every release; CPU time is charged to the
//! window in which it was observed.
//!
//! Seed semantics (§3.2): while a job needs C ≤ W, `wait_period` behaves like
//! plain `make_periodic`. When the task exhausts W before calling `wait_period`,
//! it is suspended until the next release and continues its unfinished job
//! there with a fresh budget; the delayed `wait_period` (the one that belonged
//! to the earlier period) is then ignored and returns at once. Delayed waits
//! are counted in `if_wait`, which saturates at a cap (see [`BudgetAccount::new`]).

use serde::{Deserialize, Serialize};

/// Default cap on `if_wait`, the number of pending delayed `wait_period` calls.
/// The seed uses 30 000 and then resets the counter to 2; we saturate instead.
pub const DEFAULT_IF_WAIT_CAP: u32 = 30_000;

/// Bad reservation parameters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BudgetError {
    #[error("period must be > 0 ns")]
    ZeroPeriod,
    #[error("budget must be > 0 ns")]
    ZeroBudget,
    #[error("budget {budget} ns exceeds period {period} ns")]
    BudgetExceedsPeriod { budget: u64, period: u64 },
    #[error(
        "deadline {deadline} ns must satisfy budget {budget} ns <= deadline <= period {period} ns"
    )]
    Deadline {
        budget: u64,
        deadline: u64,
        period: u64,
    },
    #[error("if_wait cap must be >= 1")]
    ZeroCap,
    #[error("release times overflow u64 ns")]
    Overflow,
}

/// How the soft (user-space) enforcer decides when the budget is used up
/// (seed §3.3.2–§3.3.3). The hard mode (SCHED_DEADLINE) does not use these.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum SoftVariant {
    /// Arm a CLOCK_MONOTONIC timer for the remaining budget; when it fires,
    /// read the thread CPU clock and re-arm for the rest if the task was
    /// preempted meanwhile. Overshoot = signal delivery delay.
    Rearm,
    /// As `Rearm`, but fire early by a learned margin and finish the budget
    /// exactly by spinning on the thread CPU clock inside the handler.
    #[default]
    EarlySpin,
    /// As `Rearm`, and charge the overshoot of a window to the next window
    /// (seed §3.3.3: measure the loss and compensate it).
    Compensate,
}

impl std::str::FromStr for SoftVariant {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "rearm" => Ok(Self::Rearm),
            "early-spin" => Ok(Self::EarlySpin),
            "compensate" => Ok(Self::Compensate),
            _ => Err(format!(
                "unknown soft variant {s:?}: expected rearm, early-spin or compensate"
            )),
        }
    }
}

/// Who enforces the budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Enforcer {
    /// No budget: plain `make_periodic`.
    None,
    /// User space (signal handler) drives [`BudgetAccount::poll`].
    Soft(SoftVariant),
    /// The kernel throttles the task (SCHED_DEADLINE); a window that closes
    /// while the task was running with (almost) its whole budget consumed is
    /// counted as an exhaustion.
    Kernel,
    /// Someone else decides when the budget is used up (a group budget
    /// shared by several tasks) and calls [`BudgetAccount::suspend`].
    External,
}

/// A validated reservation. Times in ns on CLOCK_MONOTONIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reservation {
    /// First release (absolute).
    pub start_ns: u64,
    pub period_ns: u64,
    /// Budget W per period; `None` for a plain periodic task.
    pub budget_ns: Option<u64>,
    /// Relative deadline D (hard mode); defaults to the period.
    pub deadline_ns: u64,
}

impl Reservation {
    /// Check the parameters: P > 0, 0 < W ≤ D ≤ P.
    pub fn new(
        start_ns: u64,
        period_ns: u64,
        budget_ns: Option<u64>,
        deadline_ns: Option<u64>,
    ) -> Result<Self, BudgetError> {
        if period_ns == 0 {
            return Err(BudgetError::ZeroPeriod);
        }
        let deadline = deadline_ns.unwrap_or(period_ns);
        if let Some(w) = budget_ns {
            if w == 0 {
                return Err(BudgetError::ZeroBudget);
            }
            if w > period_ns {
                return Err(BudgetError::BudgetExceedsPeriod {
                    budget: w,
                    period: period_ns,
                });
            }
            if deadline < w || deadline > period_ns {
                return Err(BudgetError::Deadline {
                    budget: w,
                    deadline,
                    period: period_ns,
                });
            }
        } else if deadline == 0 || deadline > period_ns {
            return Err(BudgetError::Deadline {
                budget: 0,
                deadline,
                period: period_ns,
            });
        }
        start_ns
            .checked_add(period_ns)
            .ok_or(BudgetError::Overflow)?;
        Ok(Self {
            start_ns,
            period_ns,
            budget_ns,
            deadline_ns: deadline,
        })
    }

    /// Absolute release time of window `k` (saturating).
    pub fn release(&self, k: u64) -> u64 {
        self.start_ns
            .saturating_add(k.saturating_mul(self.period_ns))
    }

    /// Index of the window containing `now` (0 before the first release).
    pub fn window_of(&self, now: u64) -> u64 {
        now.saturating_sub(self.start_ns) / self.period_ns
    }

    /// Utilisation W/P (1.0 without budget).
    pub fn utilisation(&self) -> f64 {
        self.budget_ns.unwrap_or(self.period_ns) as f64 / self.period_ns as f64
    }
}

/// What one period (window) looked like; pushed to the statistics ring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PeriodRecord {
    /// Window index k.
    pub index: u64,
    /// Absolute release time of window k.
    pub release_ns: u64,
    /// Budget assigned for this window (0 without budget).
    pub budget_ns: u64,
    /// CPU time the task received in this window.
    pub received_ns: u64,
    /// Wake-up time − release time, when the task was waiting for this release.
    pub latency_ns: Option<u64>,
    /// The budget ran out in this window (the task was suspended / throttled).
    pub exhausted: bool,
    /// `wait_period` calls ignored in this window.
    pub ignored_waits: u32,
    /// Releases reported missed by `wait_period` in this window.
    pub missed: u32,
}

impl PeriodRecord {
    /// Budget rate = received / assigned, in percent; `None` without budget.
    pub fn rate_percent(&self) -> Option<f64> {
        (self.budget_ns > 0).then(|| self.received_ns as f64 * 100.0 / self.budget_ns as f64)
    }
}

/// What `wait_period` reports for one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum WaitOutcome {
    /// Slept until the next release, woke in that period.
    OnTime,
    /// This many releases passed without a `wait_period`; returned at once,
    /// the next job belongs to the current period.
    Missed(u64),
    /// A delayed wait belonging to an earlier period: returned at once (§3.2).
    Ignored,
}

/// What the caller of [`BudgetAccount::wait_period`] must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitAction {
    /// Return this outcome at once.
    Return(WaitOutcome),
    /// Sleep until this absolute time, then call [`BudgetAccount::released`].
    SleepUntil(u64),
}

/// What the soft enforcer must do after a [`BudgetAccount::poll`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforce {
    /// Nothing to enforce (no budget, or the task is asleep).
    Idle,
    /// Arm the budget timer to fire after this many ns of wall time.
    Arm(u64),
    /// Spin until the thread CPU clock reaches `cpu_ns` or CLOCK_MONOTONIC
    /// reaches `until_ns` (window end), then poll again.
    Spin { cpu_ns: u64, until_ns: u64 },
    /// Budget used up: sleep until this absolute time (next release), then
    /// call [`BudgetAccount::released`] and poll again.
    Suspend(u64),
}

/// Totals over the task's life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Totals {
    pub periods: u64,
    pub exhaustions: u64,
    pub ignored_waits: u64,
    pub missed: u64,
    /// Exhaustions that found `if_wait` at its cap (not counted there).
    pub if_wait_saturated: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the first release, or inside `wait_period`.
    Sleeping,
    Running,
    /// Suspended by the enforcer until the next release.
    Suspended,
}

/// Early-fire margin bounds for [`SoftVariant::EarlySpin`].
const MIN_MARGIN_NS: u64 = 2_000;
const INITIAL_MARGIN_NS: u64 = 20_000;

/// The accounting state of one periodic task.
#[derive(Debug, Clone)]
pub struct BudgetAccount {
    res: Reservation,
    enforcer: Enforcer,
    cap: u32,
    if_wait: u32,
    state: State,
    /// Window whose job the task is running.
    job_window: u64,
    /// Window being accounted.
    win: u64,
    /// Window whose release the sleeping task waits for.
    waiting_for: u64,
    /// The first release has happened.
    started: bool,
    /// Thread CPU clock when the window was opened.
    win_cpu0: u64,
    /// Budget of the current window (W, or W − carried overshoot).
    win_budget: u64,
    cur: PeriodRecord,
    /// Consumed-in-window level the armed timer aims at (EarlySpin learning).
    armed_at: Option<u64>,
    margin_ns: u64,
    /// EarlySpin: CPU charged after the spin ends (suspend path), learned
    /// from the overshoot of exhausted windows; the spin stops this early.
    spin_bias_ns: u64,
    totals: Totals,
}

impl BudgetAccount {
    /// A new account; the task is asleep until `res.start_ns`.
    /// `cap` bounds `if_wait`: at the cap further exhaustions are still
    /// enforced (the task is still suspended) but not remembered, so later
    /// that many delayed waits sleep instead of being ignored (the task stops
    /// catching up; counted in [`Totals::if_wait_saturated`]).
    pub fn new(res: Reservation, enforcer: Enforcer, cap: u32) -> Result<Self, BudgetError> {
        if cap == 0 {
            return Err(BudgetError::ZeroCap);
        }
        let enforcer = if res.budget_ns.is_none() {
            Enforcer::None
        } else {
            enforcer
        };
        let w = res.budget_ns.unwrap_or(0);
        Ok(Self {
            res,
            enforcer,
            cap,
            if_wait: 0,
            state: State::Sleeping,
            job_window: 0,
            win: 0,
            waiting_for: 0,
            started: false,
            win_cpu0: 0,
            win_budget: w,
            cur: PeriodRecord {
                index: 0,
                release_ns: res.start_ns,
                budget_ns: w,
                ..Default::default()
            },
            armed_at: None,
            spin_bias_ns: 0,
            margin_ns: INITIAL_MARGIN_NS.min(w / 4).max(MIN_MARGIN_NS.min(w / 4)),
            totals: Totals::default(),
        })
    }

    pub fn reservation(&self) -> &Reservation {
        &self.res
    }
    pub fn enforcer(&self) -> Enforcer {
        self.enforcer
    }
    pub fn if_wait(&self) -> u32 {
        self.if_wait
    }
    pub fn totals(&self) -> Totals {
        self.totals
    }
    /// The learned early-fire margin (EarlySpin).
    pub fn margin_ns(&self) -> u64 {
        self.margin_ns
    }
    /// EarlySpin's learned tail cost (the spin ends this much early).
    pub fn spin_bias_ns(&self) -> u64 {
        self.spin_bias_ns
    }
    /// The window being accounted.
    pub fn window(&self) -> u64 {
        self.win
    }
    /// CPU time consumed in the current window at thread CPU clock `cpu`.
    pub fn consumed(&self, cpu: u64) -> u64 {
        cpu.saturating_sub(self.win_cpu0)
    }

    /// When to wake for the first release: sleep until the returned time, then
    /// call [`released`](Self::released).
    pub fn first_release(&self) -> u64 {
        self.res.start_ns
    }

    fn count_exhaustion(&mut self) {
        self.cur.exhausted = true;
        self.totals.exhaustions += 1;
        if self.if_wait < self.cap {
            self.if_wait += 1;
        } else {
            self.totals.if_wait_saturated += 1;
        }
    }

    /// Close every window that ended before `now`, emitting its record.
    fn advance(&mut self, now: u64, cpu: u64, sink: &mut impl FnMut(PeriodRecord)) {
        let target = self.res.window_of(now);
        while self.win < target {
            let received = cpu.saturating_sub(self.win_cpu0);
            self.cur.received_ns = received;
            if self.enforcer == Enforcer::Kernel
                && self.state == State::Running
                && !self.cur.exhausted
                && received.saturating_add(self.win_budget / 10) >= self.win_budget
            {
                // The kernel throttled the task at its budget (or it ran right
                // to the end of its budget when the period ended).
                self.count_exhaustion();
            }
            let w = self.res.budget_ns.unwrap_or(0);
            let overshoot = received.saturating_sub(self.win_budget);
            if self.enforcer == Enforcer::Soft(SoftVariant::EarlySpin) && self.cur.exhausted {
                // Learn the tail cost: move a quarter of the error, at most W/10.
                let err = received as i64 - self.win_budget as i64;
                let b = self.spin_bias_ns as i64 + err / 4;
                self.spin_bias_ns = b.clamp(0, (w / 10) as i64) as u64;
            }
            sink(self.cur);
            self.totals.periods += 1;
            self.win += 1;
            self.win_cpu0 = cpu;
            self.win_budget = match self.enforcer {
                Enforcer::Soft(SoftVariant::Compensate) if self.cur.exhausted => {
                    // Charge the overshoot to the next window, at most W/2.
                    w - overshoot.min(w / 2)
                }
                _ => w,
            };
            self.cur = PeriodRecord {
                index: self.win,
                release_ns: self.res.release(self.win),
                budget_ns: self.win_budget,
                ..Default::default()
            };
            self.armed_at = None;
        }
    }

    /// The task woke up after sleeping (first release, `wait_period`, or a
    /// budget suspension). Returns OnTime if it woke in the window it waited
    /// for, or Missed(n) if n later releases had already passed.
    pub fn released(
        &mut self,
        now: u64,
        cpu: u64,
        sink: &mut impl FnMut(PeriodRecord),
    ) -> WaitOutcome {
        let waited_for = self.waiting_for;
        let was_suspended = self.state == State::Suspended;
        if !self.started {
            // Nothing before the first release is charged to the task.
            self.started = true;
            self.win_cpu0 = cpu;
        }
        self.advance(now, cpu, sink);
        self.state = State::Running;
        if now >= self.res.release(self.win) && self.cur.latency_ns.is_none() {
            self.cur.latency_ns = Some(now - self.res.release(self.win));
        }
        self.job_window = self.win;
        if self.win > waited_for && !was_suspended {
            let n = self.win - waited_for;
            self.cur.missed += n as u32;
            self.totals.missed += n;
            WaitOutcome::Missed(n)
        } else {
            WaitOutcome::OnTime
        }
    }

    /// The task called `wait_period()` at `now`.
    pub fn wait_period(
        &mut self,
        now: u64,
        cpu: u64,
        sink: &mut impl FnMut(PeriodRecord),
    ) -> WaitAction {
        self.advance(now, cpu, sink);
        if self.if_wait > 0 {
            self.if_wait -= 1;
            self.cur.ignored_waits += 1;
            self.totals.ignored_waits += 1;
            self.job_window = self.win;
            return WaitAction::Return(WaitOutcome::Ignored);
        }
        if self.job_window < self.win {
            let n = self.win - self.job_window;
            self.job_window = self.win;
            self.cur.missed += n as u32;
            self.totals.missed += n;
            return WaitAction::Return(WaitOutcome::Missed(n));
        }
        self.state = State::Sleeping;
        self.waiting_for = self.win + 1;
        WaitAction::SleepUntil(self.res.release(self.win + 1))
    }

    /// Observe the clocks without enforcing (hard mode's per-period sampler):
    /// closes finished windows.
    pub fn observe(&mut self, now: u64, cpu: u64, sink: &mut impl FnMut(PeriodRecord)) {
        self.advance(now, cpu, sink);
    }

    /// An external enforcer (a group budget) found the budget used up: count
    /// the exhaustion (seed §3.2: the pending wait will be ignored) and return
    /// when to resume (the next release); then call [`released`](Self::released).
    pub fn suspend(&mut self, now: u64, cpu: u64, sink: &mut impl FnMut(PeriodRecord)) -> u64 {
        self.advance(now, cpu, sink);
        if self.state == State::Running {
            self.count_exhaustion();
            self.state = State::Suspended;
        }
        self.res.release(self.win + 1)
    }

    /// The soft enforcer's timer fired (or the budget is being set up): decide.
    pub fn poll(&mut self, now: u64, cpu: u64, sink: &mut impl FnMut(PeriodRecord)) -> Enforce {
        self.advance(now, cpu, sink);
        let variant = match self.enforcer {
            Enforcer::Soft(v) => v,
            _ => return Enforce::Idle,
        };
        if self.state != State::Running {
            return Enforce::Idle;
        }
        let consumed = self.consumed(cpu);
        let budget = self.win_budget;
        let to_boundary = self.res.release(self.win + 1).saturating_sub(now).max(1);
        if variant == SoftVariant::EarlySpin {
            if let Some(aim) = self.armed_at.take() {
                // Learn how late the timer's signal reached us. If the task was
                // preempted, consumed < aim and there is nothing to learn.
                if consumed > aim {
                    let late = consumed - aim;
                    let want = late + late / 2 + MIN_MARGIN_NS;
                    self.margin_ns = if want > self.margin_ns {
                        want
                    } else {
                        // Decay slowly towards what we see.
                        self.margin_ns - (self.margin_ns - want) / 16
                    };
                    self.margin_ns = self
                        .margin_ns
                        .min(budget / 2)
                        .max(MIN_MARGIN_NS.min(budget / 4));
                }
            }
        }
        let end = match variant {
            SoftVariant::EarlySpin => budget.saturating_sub(self.spin_bias_ns),
            _ => budget,
        };
        if consumed >= end {
            self.count_exhaustion();
            self.state = State::Suspended;
            return Enforce::Suspend(self.res.release(self.win + 1));
        }
        let remaining = budget - consumed;
        if variant != SoftVariant::EarlySpin {
            return Enforce::Arm(remaining.min(to_boundary));
        }
        if remaining <= self.margin_ns {
            let target = budget.saturating_sub(self.spin_bias_ns).max(consumed);
            return Enforce::Spin {
                cpu_ns: self.win_cpu0 + target,
                until_ns: self.res.release(self.win + 1),
            };
        }
        let fire_in = remaining - self.margin_ns;
        if fire_in < to_boundary {
            self.armed_at = Some(consumed + fire_in);
            Enforce::Arm(fire_in)
        } else {
            Enforce::Arm(to_boundary)
        }
    }
}

#[cfg(test)]
mod tests {
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
}
