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
//!
//! Files: `task.rs` (the API), `enforce.rs` (what runs in the signal handler
//! and the state it shares with the task's thread), `signal.rs` (timers and
//! handlers), `stats.rs` and `ring.rs` (statistics), `group.rs`, `capi.rs`
//! (the C ABI).

pub mod capi;
mod enforce;
pub mod group;
mod ring;
mod signal;
mod stats;
mod task;

pub use enforce::sigxcpu_count;
pub use group::Group;
pub use ring::StatsRing;
pub use rtmgr_core::budget::{
    BudgetError, PeriodRecord, SoftVariant, Totals, WaitOutcome, DEFAULT_IF_WAIT_CAP,
};
pub use rtmgr_core::class::TaskClass;
pub use rtmgr_sys::time::{mono_ns, thread_cpu_ns};
pub use stats::{TaskShared, TaskStats};
pub use task::Task;

use rtmgr_sys::Tid;
use std::io;

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
    #[error(
        "SCHED_DEADLINE refused (EPERM): the kernel requires the thread's affinity \
         ({affinity}) to cover every CPU of its root domain (its cpuset's CPUs; {online} \
         online); to run a deadline task on fewer CPUs, give it an exclusive cpuset \
         (an rtmgr partition's RT cpuset) instead of narrowing its affinity"
    )]
    DeadlineAffinity { affinity: String, online: u32 },
    /// `rtmgr serve` runs and did not grant the reservation.
    #[error("the rtmgr daemon did not grant the reservation: {0}")]
    Daemon(String),
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
