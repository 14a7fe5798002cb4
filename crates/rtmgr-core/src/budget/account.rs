//! The budget account of one periodic task (budget-based RTAI §3.2 semantics
//! and §3.3 soft enforcement): per-window CPU accounting, suspension on
//! exhaustion, catch-up with ignored delayed waits, and the enforcer's decisions.

use super::{
    BudgetError, Enforce, Enforcer, PeriodRecord, Reservation, SoftVariant, Totals, WaitAction,
    WaitOutcome,
};

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
