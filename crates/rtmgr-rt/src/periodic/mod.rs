//! Periodic real-time tasks with computation budgets (budget-based RTAI §3;
//! ARTiS §4 "periodicity and capacity per RT0 task"): RTAI-like `init`,
//! `make_periodic`, `make_periodic_budget`, `wait_period`, statistics, delete.
//!
//! The accounting (seed §3.2 semantics, catch-up, `if_wait`) is the pure state
//! machine [`rtmgr_core::budget::BudgetAccount`]; this module drives it with
//! the real clocks and enforces the budget in one of two ways:
//!
//! * **soft** (seed §3.3.2): a CLOCK_MONOTONIC POSIX timer aimed at the end of
//!   the remaining budget sends a real-time signal (the seed's SIGBUDGET) to
//!   the task's own thread; the handler reads the thread CPU clock (precise),
//!   re-arms if the task was preempted, and otherwise suspends the thread
//!   inside the handler until its next release with `clock_nanosleep`.
//!   Variants ([`SoftVariant`]): plain re-arm, early fire by a learned margin
//!   plus an exact finish by spinning on the thread CPU clock (default), and
//!   §3.3.3-style compensation of the overshoot in the next period.
//! * **hard**: SCHED_DEADLINE (runtime W, deadline D, period P) with
//!   `SCHED_FLAG_DL_OVERRUN`; the kernel throttles the task, `wait_period`
//!   ends the job with `sched_yield()`, SIGXCPU overruns are counted, and a
//!   per-period sampler timer closes the statistics windows.
//!
//! A task is bound to the thread that created it (`Task` is not `Send`).
//! Group budgets (several tasks sharing one budget, seed §5): [`Group`],
//! soft mode, accounted with the process CPU clock.

pub mod capi;
pub mod group;
mod ring;
mod signal;

pub use group::Group;
pub use ring::StatsRing;
pub use rtmgr_core::budget::{
    BudgetError, PeriodRecord, SoftVariant, Totals, WaitOutcome, DEFAULT_IF_WAIT_CAP,
};
pub use rtmgr_core::class::TaskClass;
pub use rtmgr_sys::time::{mono_ns, thread_cpu_ns};

use rtmgr_core::budget::{BudgetAccount, Enforce, Enforcer, Reservation, WaitAction};
use rtmgr_sys::mem::mlockall;
use rtmgr_sys::sched::{
    gettid, online_cpus, pin_to, set_attr, yield_now, SavedSched, SchedAttr, SCHED_FIFO,
};
use rtmgr_sys::time::{process_cpu_ns, sleep_until};
use rtmgr_sys::{errno, Tid};
use signal::{SCHED_DEADLINE, SCHED_FLAG_DL_OVERRUN, SCHED_FLAG_RESET_ON_FORK};
use std::cell::{Cell, UnsafeCell};
use std::io;
use std::marker::PhantomData;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;

/// Offset of the default budget signal from SIGRTMIN.
pub const DEFAULT_SIGNAL_OFFSET: i32 = 4;
/// Default number of per-period records kept in the statistics ring.
pub const DEFAULT_RING_CAPACITY: usize = 1024;

/// Errors of the periodic-task API. Bad input never panics.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("invalid reservation: {0}")]
    Budget(#[from] BudgetError),
    #[error("wait_period on a task that is not periodic (call make_periodic or make_periodic_budget first)")]
    NotPeriodic,
    #[error("the task is already periodic")]
    AlreadyPeriodic,
    #[error(
        "task created on thread {owner} used from thread {caller}: a task belongs to its thread"
    )]
    WrongThread { owner: Tid, caller: Tid },
    #[error(
        "SCHED_DEADLINE admission refused (EBUSY): requested utilisation {requested:.3} \
         (runtime {runtime_ns} ns / period {period_ns} ns); the kernel admits at most \
         {per_cpu:.3} per CPU x {cpus} CPUs = {total:.3} (sched_rt_runtime_us={rt_runtime_us}, \
         sched_rt_period_us={rt_period_us}); this process already holds {held:.3}, \
         deadline tasks of other processes hold the rest"
    )]
    Admission {
        requested: f64,
        runtime_ns: u64,
        period_ns: u64,
        per_cpu: f64,
        cpus: u32,
        total: f64,
        rt_runtime_us: i64,
        rt_period_us: i64,
        held: f64,
    },
    #[error("{what}: {source}")]
    Os {
        what: &'static str,
        #[source]
        source: io::Error,
    },
}

fn os(what: &'static str) -> impl FnOnce(io::Error) -> TaskError {
    move |source| TaskError::Os { what, source }
}

/// How the budget is enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetMode {
    /// User-space enforcement by a real-time signal to the task's thread.
    Soft {
        /// Signal number (SIGRTMIN..=SIGRTMAX); `None` = SIGRTMIN + 4.
        signal: Option<i32>,
        variant: SoftVariant,
    },
    /// SCHED_DEADLINE; `deadline_ns` defaults to the period.
    Hard { deadline_ns: Option<u64> },
}

impl BudgetMode {
    /// Soft mode with the default signal and variant.
    pub fn soft() -> Self {
        BudgetMode::Soft {
            signal: None,
            variant: SoftVariant::default(),
        }
    }
    /// Hard mode with D = P.
    pub fn hard() -> Self {
        BudgetMode::Hard { deadline_ns: None }
    }
}

/// Task parameters (RTAI's `rt_task_init`).
#[derive(Debug, Clone)]
pub struct TaskConfig {
    pub name: String,
    /// RT0 = SCHED_FIFO 99, RT1+ = SCHED_FIFO at its priority, Linux = keep
    /// the thread's time-sharing policy.
    pub class: TaskClass,
    /// Pin the thread to this CPU.
    pub cpu: Option<u32>,
    /// mlockall(MCL_CURRENT|MCL_FUTURE) (process-wide); default: RT0 only.
    pub lock_memory: bool,
    pub ring_capacity: usize,
    pub if_wait_cap: u32,
}

impl TaskConfig {
    pub fn new(name: impl Into<String>, class: TaskClass) -> Self {
        Self {
            name: name.into(),
            class,
            cpu: None,
            lock_memory: class == TaskClass::Rt0,
            ring_capacity: DEFAULT_RING_CAPACITY,
            if_wait_cap: DEFAULT_IF_WAIT_CAP,
        }
    }
    pub fn cpu(mut self, cpu: u32) -> Self {
        self.cpu = Some(cpu);
        self
    }
}

/// Counters readable from any thread (all ns unless named otherwise).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskStats {
    /// Periods (windows) closed.
    pub periods: u64,
    /// Windows in which the budget ran out.
    pub exhaustions: u64,
    /// `wait_period` calls ignored (delayed waits, seed §3.2).
    pub ignored_waits: u64,
    /// Releases reported missed.
    pub missed: u64,
    /// Pending delayed waits now (the seed's `if_wait`).
    pub if_wait: u64,
    /// Exhaustions that found `if_wait` at its cap.
    pub if_wait_saturated: u64,
    /// SIGXCPU received (hard mode, SCHED_FLAG_DL_OVERRUN).
    pub kernel_overruns: u64,
    /// Budget-timer signals handled.
    pub expirations: u64,
    /// Thread CPU time spent in the signal handler, excluding the deliberate
    /// spin to the exact budget end: sum and maximum per expiration.
    pub handler_cpu_sum: u64,
    pub handler_cpu_max: u64,
    /// CPU time spent spinning to the exact budget end (part of the budget).
    pub spin_cpu_sum: u64,
    /// Timer expiry → handler entry (CLOCK_MONOTONIC): sum and maximum.
    pub signal_late_sum: u64,
    pub signal_late_max: u64,
    /// EarlySpin's learned margin now.
    pub margin: u64,
}

#[derive(Default)]
struct Counters {
    periods: AtomicU64,
    exhaustions: AtomicU64,
    ignored_waits: AtomicU64,
    missed: AtomicU64,
    if_wait: AtomicU64,
    if_wait_saturated: AtomicU64,
    kernel_overruns: AtomicU64,
    expirations: AtomicU64,
    handler_cpu_sum: AtomicU64,
    handler_cpu_max: AtomicU64,
    spin_cpu_sum: AtomicU64,
    signal_late_sum: AtomicU64,
    signal_late_max: AtomicU64,
    margin: AtomicU64,
}

/// The part of a task other threads may read: statistics ring and counters.
pub struct TaskShared {
    name: String,
    ring: StatsRing,
    c: Counters,
}

impl TaskShared {
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Per-period records, lock-free (see [`StatsRing::read_from`]).
    pub fn ring(&self) -> &StatsRing {
        &self.ring
    }
    pub fn stats(&self) -> TaskStats {
        let c = &self.c;
        TaskStats {
            periods: c.periods.load(Relaxed),
            exhaustions: c.exhaustions.load(Relaxed),
            ignored_waits: c.ignored_waits.load(Relaxed),
            missed: c.missed.load(Relaxed),
            if_wait: c.if_wait.load(Relaxed),
            if_wait_saturated: c.if_wait_saturated.load(Relaxed),
            kernel_overruns: c.kernel_overruns.load(Relaxed),
            expirations: c.expirations.load(Relaxed),
            handler_cpu_sum: c.handler_cpu_sum.load(Relaxed),
            handler_cpu_max: c.handler_cpu_max.load(Relaxed),
            spin_cpu_sum: c.spin_cpu_sum.load(Relaxed),
            signal_late_sum: c.signal_late_sum.load(Relaxed),
            signal_late_max: c.signal_late_max.load(Relaxed),
            margin: c.margin.load(Relaxed),
        }
    }
    fn mirror(&self, a: &BudgetAccount) {
        let t = a.totals();
        let c = &self.c;
        c.periods.store(t.periods, Relaxed);
        c.exhaustions.store(t.exhaustions, Relaxed);
        c.ignored_waits.store(t.ignored_waits, Relaxed);
        c.missed.store(t.missed, Relaxed);
        c.if_wait.store(a.if_wait() as u64, Relaxed);
        c.if_wait_saturated.store(t.if_wait_saturated, Relaxed);
        c.margin.store(a.margin_ns(), Relaxed);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Plain,
    Soft,
    Hard,
    Group,
}

/// State touched by the task's thread and its signal handler, never by two
/// at once: main-line code sets `in_cs` around every access; a handler that
/// finds it set only records `pending`, which main-line code then serves.
struct Inner {
    acct: UnsafeCell<BudgetAccount>,
    in_cs: AtomicBool,
    pending: AtomicBool,
    kind: Kind,
    timer: Option<signal::ThreadTimer>,
    signo: i32,
    /// Absolute expiry the one-shot timer was armed for (0: not armed).
    armed_abs: AtomicU64,
    /// Utilisation held (ppm) in hard mode, returned on drop.
    dl_ppm: u64,
    /// The shared budget (Kind::Group).
    group: Option<Arc<Group>>,
    shared: Arc<TaskShared>,
}

impl Inner {
    /// # Safety
    /// Only from the owning thread: main-line code with `in_cs` set, or the
    /// signal handler when it found `in_cs` clear.
    #[allow(clippy::mut_from_ref)]
    unsafe fn acct(&self) -> &mut BudgetAccount {
        // SAFETY: per the function's contract there is one accessor at a time.
        unsafe { &mut *self.acct.get() }
    }
    fn enter(&self) {
        self.in_cs.store(true, Relaxed);
        compiler_fence(SeqCst);
    }
    /// Leave the critical section; true if a signal arrived meanwhile.
    fn leave(&self) -> bool {
        compiler_fence(SeqCst);
        self.in_cs.store(false, Relaxed);
        compiler_fence(SeqCst);
        self.pending.swap(false, Relaxed)
    }
}

thread_local! {
    /// The task of this thread (for SIGXCPU, which carries no pointer).
    static CURRENT: Cell<*const Inner> = const { Cell::new(std::ptr::null()) };
}

/// Sum of the SCHED_DEADLINE utilisation this process holds, in ppm.
static DL_HELD_PPM: AtomicU64 = AtomicU64::new(0);
/// SIGXCPU received by the process (any thread).
static SIGXCPU_COUNT: AtomicU64 = AtomicU64::new(0);
/// Signals for which our handler is installed (bit n = signal n).
static INSTALLED: AtomicU64 = AtomicU64::new(0);

fn ensure_handler(signo: i32, h: signal::SigAction) -> Result<(), TaskError> {
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

/// A periodic task bound to the thread that created it.
pub struct Task {
    tid: Tid,
    cfg: TaskConfig,
    saved: SavedSched,
    shared: Arc<TaskShared>,
    inner: Option<Box<Inner>>,
    _not_send: PhantomData<*const ()>,
}

fn max_atomic(a: &AtomicU64, v: u64) {
    a.fetch_max(v, Relaxed);
}

/// Add one handler invocation's CPU cost to the counters.
fn account_handler(c: &Counters, used: u64, spin: u64) {
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
fn enforce(inner: &Inner, entry: Option<(u64, u64)>) {
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
                inner.armed_abs.store(0, Relaxed);
                inner.shared.mirror(acct);
                let before = cpu;
                sleep_until(until);
                now = mono_ns();
                cpu = thread_cpu_ns();
                excluded += cpu.saturating_sub(before);
                acct.released(now, cpu, &mut sink);
            }
        }
    }
    if entry.is_some() {
        let used = thread_cpu_ns().saturating_sub(c0);
        account_handler(c, used.saturating_sub(excluded), spin);
    }
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
fn enforce_group(inner: &Inner, entry: Option<(u64, u64)>) {
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
                inner.armed_abs.store(0, Relaxed);
                inner.shared.mirror(acct);
                let before = cpu;
                sleep_until(until);
                now = mono_ns();
                cpu = thread_cpu_ns();
                excluded += cpu.saturating_sub(before);
                acct.released(now, cpu, &mut sink);
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

extern "C" fn on_budget_signal(
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

extern "C" fn on_sigxcpu(_sig: libc::c_int, _info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
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

fn read_proc_i64(path: &str) -> i64 {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(-1)
}

impl Task {
    /// Create a task for the calling thread (RTAI `rt_task_init`): apply the
    /// class's policy and the CPU pin. Undone by `delete`/drop.
    pub fn init(cfg: TaskConfig) -> Result<Task, TaskError> {
        if cfg.name.is_empty() || cfg.name.contains('\0') {
            return Err(TaskError::Invalid(
                "task name must be non-empty and without NUL".into(),
            ));
        }
        if let TaskClass::Rt1 { priority } = cfg.class {
            if !(1..=rtmgr_core::class::RT1_MAX_PRIORITY).contains(&priority) {
                return Err(TaskError::Invalid(format!(
                    "RT1+ priority {priority} out of range 1..98"
                )));
            }
        }
        if cfg.if_wait_cap == 0 {
            return Err(TaskError::Invalid("if_wait cap must be >= 1".into()));
        }
        if let Some(cpu) = cfg.cpu {
            let n = online_cpus();
            if cpu >= n {
                return Err(TaskError::Invalid(format!(
                    "CPU {cpu} does not exist (this machine has CPUs 0..{})",
                    n - 1
                )));
            }
        }
        let saved = SavedSched::save().map_err(os("sched_getscheduler"))?;
        let apply = || -> Result<(), TaskError> {
            if let Some(cpu) = cfg.cpu {
                pin_to(cpu).map_err(os("sched_setaffinity"))?;
            }
            if let Some(p) = cfg.class.fifo_priority() {
                let fifo = SchedAttr {
                    policy: SCHED_FIFO,
                    flags: SCHED_FLAG_RESET_ON_FORK,
                    priority: p as u32,
                    ..SchedAttr::default()
                };
                set_attr(0, &fifo).map_err(os("sched_setattr(SCHED_FIFO)"))?;
            }
            if cfg.lock_memory {
                mlockall().map_err(os("mlockall"))?;
            }
            Ok(())
        };
        if let Err(e) = apply() {
            let _ = saved.restore();
            return Err(e);
        }
        let shared = Arc::new(TaskShared {
            name: cfg.name.clone(),
            ring: StatsRing::new(cfg.ring_capacity),
            c: Counters::default(),
        });
        Ok(Task {
            tid: gettid(),
            cfg,
            saved,
            shared,
            inner: None,
            _not_send: PhantomData,
        })
    }

    pub fn name(&self) -> &str {
        &self.cfg.name
    }

    /// Statistics handle, readable from other threads without locks.
    pub fn shared(&self) -> Arc<TaskShared> {
        self.shared.clone()
    }

    pub fn stats(&self) -> TaskStats {
        self.shared.stats()
    }

    pub fn is_periodic(&self) -> bool {
        self.inner.is_some()
    }

    /// Error unless called from the thread that created the task.
    pub fn check_thread(&self) -> Result<(), TaskError> {
        let caller = gettid();
        if caller != self.tid {
            return Err(TaskError::WrongThread {
                owner: self.tid,
                caller,
            });
        }
        Ok(())
    }

    fn resolve_start(start_ns: u64) -> u64 {
        if start_ns == 0 {
            mono_ns()
        } else {
            start_ns
        }
    }

    /// Make the task periodic without a budget (RTAI `rt_task_make_periodic`):
    /// first release at `start_ns` (absolute CLOCK_MONOTONIC; 0 = now), then
    /// every `period_ns`. Sleeps until the first release.
    pub fn make_periodic(&mut self, start_ns: u64, period_ns: u64) -> Result<(), TaskError> {
        self.check_thread()?;
        if self.inner.is_some() {
            return Err(TaskError::AlreadyPeriodic);
        }
        let res = Reservation::new(Self::resolve_start(start_ns), period_ns, None, None)?;
        let acct = BudgetAccount::new(res, Enforcer::None, self.cfg.if_wait_cap)?;
        let inner = self.new_inner(acct, Kind::Plain, 0, 0);
        sleep_until(res.start_ns);
        // SAFETY: no timer exists: main-line is the only accessor.
        let a = unsafe { inner.acct() };
        a.released(mono_ns(), thread_cpu_ns(), &mut |r| {
            inner.shared.ring.push(&r)
        });
        inner.shared.mirror(a);
        self.inner = Some(inner);
        Ok(())
    }

    fn new_inner(&self, acct: BudgetAccount, kind: Kind, signo: i32, dl_ppm: u64) -> Box<Inner> {
        Box::new(Inner {
            acct: UnsafeCell::new(acct),
            in_cs: AtomicBool::new(false),
            pending: AtomicBool::new(false),
            kind,
            timer: None,
            signo,
            armed_abs: AtomicU64::new(0),
            dl_ppm,
            group: None,
            shared: self.shared.clone(),
        })
    }

    /// Make the task periodic with budget `budget_ns` per period, enforced by
    /// `mode` (seed `rt_task_make_periodic_budget`). Sleeps until the first
    /// release (hard mode: then switches the thread to SCHED_DEADLINE).
    pub fn make_periodic_budget(
        &mut self,
        start_ns: u64,
        period_ns: u64,
        budget_ns: u64,
        mode: BudgetMode,
    ) -> Result<(), TaskError> {
        self.check_thread()?;
        if self.inner.is_some() {
            return Err(TaskError::AlreadyPeriodic);
        }
        let start = Self::resolve_start(start_ns);
        match mode {
            BudgetMode::Soft { signal, variant } => {
                let signo = self.budget_signal(signal)?;
                let res = Reservation::new(start, period_ns, Some(budget_ns), None)?;
                let acct = BudgetAccount::new(res, Enforcer::Soft(variant), self.cfg.if_wait_cap)?;
                ensure_handler(signo, on_budget_signal)?;
                let mut inner = self.new_inner(acct, Kind::Soft, signo, 0);
                let ptr = &*inner as *const Inner as *mut libc::c_void;
                inner.timer = Some(
                    signal::ThreadTimer::new(self.tid, signo, ptr).map_err(os("timer_create"))?,
                );
                CURRENT.with(|c| c.set(&*inner));
                sleep_until(start);
                {
                    // SAFETY: the timer is not armed yet: main-line is the only accessor.
                    let a = unsafe { inner.acct() };
                    a.released(mono_ns(), thread_cpu_ns(), &mut |r| {
                        inner.shared.ring.push(&r)
                    });
                }
                self.inner = Some(inner);
                enforce(self.inner.as_ref().expect("just set"), None);
                Ok(())
            }
            BudgetMode::Hard { deadline_ns } => {
                // Validate before touching anything.
                Reservation::new(start, period_ns, Some(budget_ns), deadline_ns)?;
                if self.cfg.cpu.is_some() {
                    return Err(TaskError::Invalid(
                        "hard mode (SCHED_DEADLINE) needs a thread allowed on all CPUs of its \
                         root domain: create the task without a CPU pin (use an exclusive \
                         cpuset to confine it)"
                            .into(),
                    ));
                }
                ensure_handler(libc::SIGXCPU, on_sigxcpu)?;
                let signo = signal::sigrtmin() + DEFAULT_SIGNAL_OFFSET;
                ensure_handler(signo, on_budget_signal)?;
                sleep_until(start);
                let anchor = mono_ns();
                let res = Reservation::new(anchor, period_ns, Some(budget_ns), deadline_ns)?;
                let acct = BudgetAccount::new(res, Enforcer::Kernel, self.cfg.if_wait_cap)?;
                let ppm = budget_ns * 1_000_000 / period_ns;
                let mut inner = self.new_inner(acct, Kind::Hard, signo, ppm);
                let ptr = &*inner as *const Inner as *mut libc::c_void;
                let timer =
                    signal::ThreadTimer::new(self.tid, signo, ptr).map_err(os("timer_create"))?;
                CURRENT.with(|c| c.set(&*inner));
                let reservation = SchedAttr {
                    policy: SCHED_DEADLINE,
                    flags: SCHED_FLAG_DL_OVERRUN | SCHED_FLAG_RESET_ON_FORK,
                    runtime: budget_ns,
                    deadline: res.deadline_ns,
                    period: period_ns,
                    ..SchedAttr::default()
                };
                if let Err(e) = set_attr(0, &reservation) {
                    CURRENT.with(|c| c.set(std::ptr::null()));
                    return Err(if e.raw_os_error() == Some(libc::EBUSY) {
                        self.admission_error(budget_ns, period_ns)
                    } else {
                        TaskError::Os {
                            what: "sched_setattr(SCHED_DEADLINE)",
                            source: e,
                        }
                    });
                }
                DL_HELD_PPM.fetch_add(ppm, Relaxed);
                {
                    // SAFETY: the timer is not armed yet.
                    let a = unsafe { inner.acct() };
                    a.released(mono_ns(), thread_cpu_ns(), &mut |r| {
                        inner.shared.ring.push(&r)
                    });
                    inner.shared.mirror(a);
                }
                // Sampler: just after every period boundary, close the window.
                let offset = (period_ns / 50).min(50_000);
                inner.armed_abs.store(anchor + period_ns + offset, Relaxed);
                timer.arm_abs(anchor + period_ns + offset, period_ns);
                inner.timer = Some(timer);
                self.inner = Some(inner);
                Ok(())
            }
        }
    }

    /// Make the task periodic as a member of `group`: it shares the group's
    /// budget and period (soft mode, signal `signal` or SIGRTMIN+4).
    pub fn make_periodic_group(
        &mut self,
        group: &Arc<Group>,
        signal: Option<i32>,
    ) -> Result<(), TaskError> {
        self.check_thread()?;
        if self.inner.is_some() {
            return Err(TaskError::AlreadyPeriodic);
        }
        let signo = self.budget_signal(signal)?;
        let res = *group.reservation();
        let acct = BudgetAccount::new(res, Enforcer::External, self.cfg.if_wait_cap)?;
        ensure_handler(signo, on_budget_signal)?;
        let mut inner = self.new_inner(acct, Kind::Group, signo, 0);
        let ptr = &*inner as *const Inner as *mut libc::c_void;
        inner.timer =
            Some(signal::ThreadTimer::new(self.tid, signo, ptr).map_err(os("timer_create"))?);
        inner.group = Some(group.clone());
        group.join();
        CURRENT.with(|c| c.set(&*inner));
        sleep_until(res.start_ns);
        {
            // SAFETY: the timer is not armed yet: main-line is the only accessor.
            let a = unsafe { inner.acct() };
            a.released(mono_ns(), thread_cpu_ns(), &mut |r| {
                inner.shared.ring.push(&r)
            });
        }
        self.inner = Some(inner);
        enforce_group(self.inner.as_ref().expect("just set"), None);
        Ok(())
    }

    fn budget_signal(&self, signal: Option<i32>) -> Result<i32, TaskError> {
        let signo = signal.unwrap_or(signal::sigrtmin() + DEFAULT_SIGNAL_OFFSET);
        if signo < signal::sigrtmin() || signo > signal::sigrtmax() {
            return Err(TaskError::Invalid(format!(
                "budget signal {signo} is not a real-time signal ({}..={})",
                signal::sigrtmin(),
                signal::sigrtmax()
            )));
        }
        Ok(signo)
    }

    fn admission_error(&self, runtime_ns: u64, period_ns: u64) -> TaskError {
        let rt_runtime_us = read_proc_i64("/proc/sys/kernel/sched_rt_runtime_us");
        let rt_period_us = read_proc_i64("/proc/sys/kernel/sched_rt_period_us");
        let per_cpu = if rt_runtime_us < 0 {
            1.0
        } else {
            rt_runtime_us as f64 / rt_period_us.max(1) as f64
        };
        let cpus = online_cpus();
        TaskError::Admission {
            requested: runtime_ns as f64 / period_ns as f64,
            runtime_ns,
            period_ns,
            per_cpu,
            cpus,
            total: per_cpu * cpus as f64,
            rt_runtime_us,
            rt_period_us,
            held: DL_HELD_PPM.load(Relaxed) as f64 / 1e6,
        }
    }

    /// End the current job and wait for the next release (RTAI
    /// `rt_task_wait_period`, with the seed's §3.2 budget semantics).
    pub fn wait_period(&mut self) -> Result<WaitOutcome, TaskError> {
        self.check_thread()?;
        let inner = self.inner.as_deref().ok_or(TaskError::NotPeriodic)?;
        let mut sink = |r: PeriodRecord| inner.shared.ring.push(&r);
        inner.enter();
        // SAFETY: in_cs is set: a handler will not touch the state.
        let action = unsafe { inner.acct() }.wait_period(mono_ns(), thread_cpu_ns(), &mut sink);
        // SAFETY: as above.
        inner.shared.mirror(unsafe { inner.acct() });
        match action {
            WaitAction::Return(o) => {
                if inner.leave() {
                    serve_pending(inner);
                }
                Ok(o)
            }
            WaitAction::SleepUntil(t) => {
                if let Some(timer) = &inner.timer {
                    if matches!(inner.kind, Kind::Soft | Kind::Group) {
                        timer.disarm();
                        inner.armed_abs.store(0, Relaxed);
                    }
                }
                if inner.kind == Kind::Hard {
                    // Give the rest of this runtime back; the kernel wakes us
                    // at the next period. Sleep the remainder if it was early.
                    let _ = inner.leave();
                    yield_now();
                    if mono_ns() < t {
                        sleep_until(t);
                    }
                    inner.enter();
                } else {
                    sleep_until(t);
                }
                // SAFETY: in_cs is set (hard), or no timer is armed (soft, plain).
                let a = unsafe { inner.acct() };
                let o = a.released(mono_ns(), thread_cpu_ns(), &mut sink);
                inner.shared.mirror(a);
                let pending = inner.leave();
                if inner.kind == Kind::Soft {
                    enforce(inner, None);
                } else if inner.kind == Kind::Group {
                    enforce_group(inner, None);
                } else if pending {
                    serve_pending(inner);
                }
                Ok(o)
            }
        }
    }

    /// Records of the last periods (oldest first), from the statistics ring.
    pub fn records(&self) -> Vec<PeriodRecord> {
        let mut v = Vec::new();
        self.shared.ring.read_from(0, &mut v);
        v
    }

    /// Stop periodic execution, restore the thread's policy and affinity
    /// (RTAI `rt_task_delete`). Also done on drop.
    pub fn delete(mut self) -> Result<(), TaskError> {
        self.teardown()
    }

    fn teardown(&mut self) -> Result<(), TaskError> {
        if let Some(inner) = self.inner.take() {
            if inner.timer.is_some() {
                signal::block_signal(inner.signo, true);
                drop(inner.timer);
                signal::drain_signal(inner.signo);
                signal::block_signal(inner.signo, false);
            }
            if inner.kind == Kind::Hard {
                DL_HELD_PPM.fetch_sub(inner.dl_ppm, Relaxed);
            }
            if let Some(g) = &inner.group {
                g.leave();
            }
            let _ = CURRENT.try_with(|c| c.set(std::ptr::null()));
        }
        self.saved
            .restore()
            .map_err(os("restore scheduling policy"))
    }
}

/// A signal arrived while main-line code held the state: serve it now.
fn serve_pending(inner: &Inner) {
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

impl Drop for Task {
    fn drop(&mut self) {
        if gettid() == self.tid {
            let _ = self.teardown();
        }
    }
}

impl std::fmt::Debug for Task {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Task")
            .field("name", &self.cfg.name)
            .field("tid", &self.tid)
            .field("periodic", &self.inner.is_some())
            .finish()
    }
}
