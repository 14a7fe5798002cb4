//! Budget enforcement in the task's own thread and its signal handler
//! (budget-based RTAI §3.3: soft enforcement by SIGBUDGET, §3.3.3
//! compensation; hard mode's SIGXCPU and sampler): the state the two share,
//! the handlers, and the soft and group enforcers they run.

use super::signal;
use super::stats::{Counters, TaskShared};
use super::{os, Group, PeriodRecord, TaskError};
use rtmgr_core::budget::{BudgetAccount, Enforce};
use rtmgr_sys::errno;
use rtmgr_sys::time::{mono_ns, process_cpu_ns, sleep_until, thread_cpu_ns};
use std::cell::{Cell, UnsafeCell};
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Plain,
    Soft,
    Hard,
    Group,
}

/// State touched by the task's thread and its signal handler, never by two
/// at once: main-line code sets `in_cs` around every access; a handler that
/// finds it set only records `pending`, which main-line code then serves.
pub(super) struct Inner {
    pub(super) acct: UnsafeCell<BudgetAccount>,
    pub(super) in_cs: AtomicBool,
    pub(super) pending: AtomicBool,
    pub(super) kind: Kind,
    pub(super) timer: Option<signal::ThreadTimer>,
    pub(super) signo: i32,
    /// Absolute expiry the one-shot timer was armed for (0: not armed).
    pub(super) armed_abs: AtomicU64,
    /// Utilisation held (ppm) in hard mode, returned on drop.
    pub(super) dl_ppm: u64,
    /// The shared budget (Kind::Group).
    pub(super) group: Option<Arc<Group>>,
    pub(super) shared: Arc<TaskShared>,
}

impl Inner {
    /// # Safety
    /// Only from the owning thread: main-line code with `in_cs` set, or the
    /// signal handler when it found `in_cs` clear.
    #[allow(clippy::mut_from_ref)]
    pub(super) unsafe fn acct(&self) -> &mut BudgetAccount {
        // SAFETY: per the function's contract there is one accessor at a time.
        unsafe { &mut *self.acct.get() }
    }
    pub(super) fn enter(&self) {
        self.in_cs.store(true, Relaxed);
        compiler_fence(SeqCst);
    }
    /// Leave the critical section; true if a signal arrived meanwhile.
    pub(super) fn leave(&self) -> bool {
        compiler_fence(SeqCst);
        self.in_cs.store(false, Relaxed);
        compiler_fence(SeqCst);
        self.pending.swap(false, Relaxed)
    }
}

thread_local! {
    /// The task of this thread (for SIGXCPU, which carries no pointer).
    pub(super) static CURRENT: Cell<*const Inner> = const { Cell::new(std::ptr::null()) };
}

/// Sum of the SCHED_DEADLINE utilisation this process holds, in ppm.
pub(super) static DL_HELD_PPM: AtomicU64 = AtomicU64::new(0);
/// SIGXCPU received by the process (any thread).
pub(super) static SIGXCPU_COUNT: AtomicU64 = AtomicU64::new(0);
/// Signals for which our handler is installed (bit n = signal n).
pub(super) static INSTALLED: AtomicU64 = AtomicU64::new(0);

pub(super) fn ensure_handler(signo: i32, h: signal::SigAction) -> Result<(), TaskError> {
    let bit = 1u64 << signo;
    if INSTALLED.load(Acquire) & bit == 0 {
        signal::install_handler(signo, h).map_err(os("sigaction"))?;
        INSTALLED.fetch_or(bit, AcqRel);
    }
    Ok(())
}

/// Total SIGXCPU signals the process received from SCHED_DEADLINE overruns.
pub fn sigxcpu_count() -> u64 {
    SIGXCPU_COUNT.load(Relaxed)
}

pub(super) fn max_atomic(a: &AtomicU64, v: u64) {
    a.fetch_max(v, Relaxed);
}

/// Add one handler invocation's CPU cost to the counters.
pub(super) fn account_handler(c: &Counters, used: u64, spin: u64) {
    c.handler_cpu_sum.fetch_add(used, Relaxed);
    max_atomic(&c.handler_cpu_max, used);
    c.spin_cpu_sum.fetch_add(spin, Relaxed);
}

/// Run the soft enforcer (from the handler, or main-line with `in_cs` clear
/// and no armed timer). `entry`: handler entry (mono, thread cpu), reused as
/// the first reading (each thread-CPU-clock read is a system call).
///
/// Handler cost accounted = its thread CPU time minus the deliberate spin to
/// the budget end and minus the suspension (from the decision to sleep until
/// the wake-up, which a task calling `wait_period` pays as well).
pub(super) fn enforce(inner: &Inner, entry: Option<(u64, u64)>) {
    let Some(timer) = &inner.timer else { return };
    let c = &inner.shared.c;
    let (mut now, mut cpu) = entry.unwrap_or_else(|| (mono_ns(), thread_cpu_ns()));
    let c0 = cpu;
    let mut excluded = 0u64;
    let mut spin = 0u64;
    let mut sink = |r: rtmgr_core::budget::PeriodRecord| inner.shared.ring.push(&r);
    // SAFETY: we are the handler with in_cs clear, or main-line code with no
    // timer armed (so no handler can run concurrently).
    let acct = unsafe { inner.acct() };
    loop {
        match acct.poll(now, cpu, &mut sink) {
            Enforce::Idle => {
                inner.shared.mirror(acct);
                break;
            }
            Enforce::Arm(after) => {
                inner.shared.mirror(acct);
                if entry.is_some() {
                    let used = thread_cpu_ns().saturating_sub(c0);
                    account_handler(c, used.saturating_sub(excluded), spin);
                }
                let at = now + after;
                inner.armed_abs.store(at, Relaxed);
                // Last access to the state: the signal may fire right away.
                timer.arm_abs(at, 0);
                return;
            }
            Enforce::Spin { cpu_ns, until_ns } => {
                let s0 = cpu;
                while cpu < cpu_ns && now < until_ns {
                    cpu = thread_cpu_ns();
                    now = mono_ns();
                }
                spin += cpu - s0;
                excluded += cpu - s0;
            }
            Enforce::Suspend(until) => {
                let before = cpu;
                (now, cpu) = suspend_until(inner, acct, until, &mut sink);
                excluded += cpu.saturating_sub(before);
            }
        }
    }
    if entry.is_some() {
        let used = thread_cpu_ns().saturating_sub(c0);
        account_handler(c, used.saturating_sub(excluded), spin);
    }
}

/// Suspend the task (in its handler, or main-line with no timer armed) until
/// its release at `until`, and release it there; returns (mono, thread CPU)
/// read at the wake-up.
fn suspend_until(
    inner: &Inner,
    acct: &mut BudgetAccount,
    until: u64,
    sink: &mut impl FnMut(PeriodRecord),
) -> (u64, u64) {
    inner.armed_abs.store(0, Relaxed);
    inner.shared.mirror(acct);
    sleep_until(until);
    let (now, cpu) = (mono_ns(), thread_cpu_ns());
    acct.released(now, cpu, sink);
    (now, cpu)
}

/// Shortest re-arm of a group member's timer, and the retry delay when
/// another member holds the group state.
const GROUP_MIN_ARM_NS: u64 = 5_000;
/// Group members fire this early (per member's share of the remaining
/// budget) and spin on the process CPU clock to the exact end of the group
/// budget, as `SoftVariant::EarlySpin` does for one task (fixed margin: the
/// ≈20-25 µs timer-to-handler delay measured on the development VM, doubled).
const GROUP_SPIN_MARGIN_NS: u64 = 50_000;

/// The group-budget enforcer of one member (see [`group`]): same contract
/// and cost accounting as [`enforce`].
pub(super) fn enforce_group(inner: &Inner, entry: Option<(u64, u64)>) {
    let (Some(timer), Some(group)) = (&inner.timer, &inner.group) else {
        return;
    };
    let c = &inner.shared.c;
    let (mut now, mut cpu) = entry.unwrap_or_else(|| (mono_ns(), thread_cpu_ns()));
    let c0 = cpu;
    let mut excluded = 0u64;
    let mut sink = |r: PeriodRecord| inner.shared.ring.push(&r);
    // SAFETY: as in `enforce`.
    let acct = unsafe { inner.acct() };
    let res = *group.reservation();
    loop {
        acct.observe(now, cpu, &mut sink);
        let at = match group.seen(now, process_cpu_ns()) {
            None => now + GROUP_MIN_ARM_NS,
            Some(s) if s.consumed >= group.spin_end() => {
                group.count_exhaustion();
                let until = acct.suspend(now, cpu, &mut sink);
                let before = cpu;
                (now, cpu) = suspend_until(inner, acct, until, &mut sink);
                excluded += cpu.saturating_sub(before);
                continue;
            }
            Some(s) => {
                let left = group.spin_end() - s.consumed;
                let rem = left / group.members().max(1);
                let boundary = res.release(s.window + 1).max(now + 1);
                if rem <= GROUP_SPIN_MARGIN_NS {
                    // Spin (this is the group's budget, not overhead) until the
                    // group has used its budget or the period ends, then decide.
                    let target = process_cpu_ns() + left;
                    let c1 = cpu;
                    while process_cpu_ns() < target && now < boundary {
                        now = mono_ns();
                    }
                    cpu = thread_cpu_ns();
                    excluded += cpu.saturating_sub(c1);
                    continue;
                }
                (now + (rem - GROUP_SPIN_MARGIN_NS).max(GROUP_MIN_ARM_NS)).min(boundary)
            }
        };
        inner.shared.mirror(acct);
        if entry.is_some() {
            let used = thread_cpu_ns().saturating_sub(c0);
            account_handler(c, used.saturating_sub(excluded), 0);
        }
        inner.armed_abs.store(at, Relaxed);
        // Last access to the state: the signal may fire right away.
        timer.arm_abs(at, 0);
        return;
    }
}

pub(super) extern "C" fn on_budget_signal(
    _sig: libc::c_int,
    info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    // errno is thread-local; restored before returning.
    let saved_errno = errno::get();
    let entry = (mono_ns(), thread_cpu_ns());
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers; our
    // timers carry a pointer to the live `Inner` (timers are deleted and the
    // signal drained before the `Inner` is freed).
    let p = unsafe { (*info).si_value().sival_ptr } as *const Inner;
    if !p.is_null() {
        // SAFETY: see above.
        let inner = unsafe { &*p };
        if inner.in_cs.load(Relaxed) {
            inner.pending.store(true, Relaxed);
        } else {
            let c = &inner.shared.c;
            c.expirations.fetch_add(1, Relaxed);
            let armed = inner.armed_abs.load(Relaxed);
            if armed != 0 && entry.0 >= armed {
                let mut late = entry.0 - armed;
                if inner.kind == Kind::Hard {
                    // Periodic sampler: lateness after the latest expiry.
                    // SAFETY: in_cs is clear; reading the reservation only.
                    late %= unsafe { inner.acct() }.reservation().period_ns;
                }
                c.signal_late_sum.fetch_add(late, Relaxed);
                max_atomic(&c.signal_late_max, late);
            }
            match inner.kind {
                Kind::Soft => enforce(inner, Some(entry)),
                Kind::Group => enforce_group(inner, Some(entry)),
                Kind::Hard => {
                    // SAFETY: in_cs is clear: main-line code is not inside.
                    let acct = unsafe { inner.acct() };
                    acct.observe(entry.0, entry.1, &mut |r| inner.shared.ring.push(&r));
                    inner.shared.mirror(acct);
                    account_handler(c, thread_cpu_ns().saturating_sub(entry.1), 0);
                }
                Kind::Plain => {}
            }
        }
    }
    errno::set(saved_errno);
}

pub(super) extern "C" fn on_sigxcpu(
    _sig: libc::c_int,
    _info: *mut libc::siginfo_t,
    _ctx: *mut libc::c_void,
) {
    SIGXCPU_COUNT.fetch_add(1, Relaxed);
    // `try_with`: never panics, also during thread teardown. The const
    // initialiser makes this a plain TLS access (touched at set-up).
    let _ = CURRENT.try_with(|c| {
        let p = c.get();
        if !p.is_null() {
            // SAFETY: CURRENT points to this thread's live task (cleared on drop).
            unsafe { &*p }
                .shared
                .c
                .kernel_overruns
                .fetch_add(1, Relaxed);
        }
    });
}

/// A signal arrived while main-line code held the state: serve it now.
pub(super) fn serve_pending(inner: &Inner) {
    match inner.kind {
        Kind::Soft | Kind::Group => {
            if let Some(t) = &inner.timer {
                t.disarm();
            }
            if inner.kind == Kind::Soft {
                enforce(inner, None)
            } else {
                enforce_group(inner, None)
            }
        }
        Kind::Hard => {
            inner.enter();
            // SAFETY: in_cs set.
            let a = unsafe { inner.acct() };
            a.observe(mono_ns(), thread_cpu_ns(), &mut |r| {
                inner.shared.ring.push(&r)
            });
            inner.shared.mirror(a);
            if inner.leave() {
                // Another sampler tick; it will be seen at the next event.
            }
        }
        Kind::Plain => {}
    }
}
