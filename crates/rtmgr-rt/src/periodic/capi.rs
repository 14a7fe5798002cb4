//! The periodic-task C API (`include/rtmgr.h`), after RTAI's `rt_task_*`
//! calls and the seed's `rt_task_make_periodic_budget` (budget-based RTAI
//! §3.2): init, make_periodic, make_periodic_budget, wait_period, stats,
//! delete, and group budgets. Every call returns a status; the message of the last error of the
//! calling thread is available from `rtmgr_task_last_error()`.

use super::{
    BudgetMode, Group, SoftVariant, Task, TaskClass, TaskConfig, TaskError, TaskStats, WaitOutcome,
};
use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};

/// Result of every `rtmgr_task_*` call: 0 is success (for `wait_period`: on
/// time), positive values are the other normal outcomes of `wait_period`,
/// negative values are errors (see `rtmgr_task_last_error()`).
#[allow(non_camel_case_types)]
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtmgrTaskStatus {
    /// Success; `wait_period`: the task slept until its next release.
    RTMGR_TASK_OK = 0,
    /// `wait_period`: releases were missed (count in `*missed`); returned at once.
    RTMGR_TASK_MISSED = 1,
    /// `wait_period`: a delayed wait of an earlier period, ignored (seed §3.2).
    RTMGR_TASK_IGNORED = 2,
    /// Bad argument (NULL, zero period, budget > period, unknown class or mode, ...).
    RTMGR_TASK_EINVAL = -1,
    /// `wait_period` on a task that is not periodic.
    RTMGR_TASK_ENOTPERIODIC = -2,
    /// `make_periodic*` on a task that is already periodic.
    RTMGR_TASK_EPERIODIC = -3,
    /// SCHED_DEADLINE admission refused; the message gives the utilisations.
    RTMGR_TASK_EBUSY = -4,
    /// Called from another thread than the one that created the task.
    RTMGR_TASK_ETHREAD = -5,
    /// A system call failed; `errno` tells which error.
    RTMGR_TASK_EOS = -6,
}

use RtmgrTaskStatus::*;

/// Task classes (ARTiS §2.1).
pub const RTMGR_CLASS_RT0: c_int = 0;
pub const RTMGR_CLASS_RT1: c_int = 1;
pub const RTMGR_CLASS_LINUX: c_int = 2;

/// Budget enforcement modes for `rtmgr_task_make_periodic_budget`.
pub const RTMGR_BUDGET_SOFT: c_int = 0;
pub const RTMGR_BUDGET_HARD: c_int = 1;
/// Soft mode, plain re-arm variant.
pub const RTMGR_BUDGET_SOFT_REARM: c_int = 2;
/// Soft mode, compensation variant (seed §3.3.3).
pub const RTMGR_BUDGET_SOFT_COMPENSATE: c_int = 3;

/// A periodic task (opaque); belongs to the thread that created it.
pub struct RtmgrTask(Task);

/// A budget shared by several tasks of this process (opaque).
pub struct RtmgrTaskGroup(std::sync::Arc<Group>);

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn fail(e: TaskError) -> RtmgrTaskStatus {
    let st = match &e {
        TaskError::Invalid(_) | TaskError::Budget(_) => RTMGR_TASK_EINVAL,
        TaskError::NotPeriodic => RTMGR_TASK_ENOTPERIODIC,
        TaskError::AlreadyPeriodic => RTMGR_TASK_EPERIODIC,
        TaskError::Admission { .. } | TaskError::Daemon(_) => RTMGR_TASK_EBUSY,
        TaskError::WrongThread { .. } => RTMGR_TASK_ETHREAD,
        TaskError::DeadlineAffinity { .. } => {
            rtmgr_sys::errno::set(libc::EPERM);
            RTMGR_TASK_EOS
        }
        TaskError::Os { source, .. } => {
            if let Some(code) = source.raw_os_error() {
                rtmgr_sys::errno::set(code);
            }
            RTMGR_TASK_EOS
        }
    };
    set_error(e.to_string());
    st
}

fn invalid(msg: &str) -> RtmgrTaskStatus {
    fail(TaskError::Invalid(msg.into()))
}

fn done(r: Result<(), TaskError>) -> RtmgrTaskStatus {
    match r {
        Ok(()) => RTMGR_TASK_OK,
        Err(e) => fail(e),
    }
}

/// The message of the calling thread's last failed `rtmgr_task_*` call
/// ("" if none). Valid until the next failing call on this thread.
#[no_mangle]
pub extern "C" fn rtmgr_task_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Create a task for the calling thread (RTAI `rt_task_init`): `class` is
/// `RTMGR_CLASS_RT0` (SCHED_FIFO 99, memory locked), `RTMGR_CLASS_RT1`
/// (SCHED_FIFO `priority`, 1..98) or `RTMGR_CLASS_LINUX` (policy unchanged);
/// `cpu` pins the thread (-1: no pin). Stores the task in `*out`.
///
/// # Safety
/// `name` must be a NUL-terminated string; `out` must be valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_task_init(
    name: *const c_char,
    class: c_int,
    priority: c_int,
    cpu: c_int,
    out: *mut *mut RtmgrTask,
) -> RtmgrTaskStatus {
    if name.is_null() || out.is_null() {
        return invalid("rtmgr_task_init: name and out must not be NULL");
    }
    // SAFETY: per the contract, name is NUL-terminated.
    let Ok(name) = unsafe { CStr::from_ptr(name) }.to_str() else {
        return invalid("rtmgr_task_init: name is not UTF-8");
    };
    let class = match class {
        RTMGR_CLASS_RT0 => TaskClass::Rt0,
        RTMGR_CLASS_RT1 => match u8::try_from(priority) {
            Ok(p) => TaskClass::Rt1 { priority: p },
            Err(_) => return invalid(&format!("RT1+ priority {priority} out of range 1..98")),
        },
        RTMGR_CLASS_LINUX => TaskClass::Linux,
        other => {
            return invalid(&format!(
            "unknown class {other}: expected RTMGR_CLASS_RT0, RTMGR_CLASS_RT1 or RTMGR_CLASS_LINUX"
        ))
        }
    };
    let mut cfg = TaskConfig::new(name, class);
    if cpu >= 0 {
        cfg.cpu = Some(cpu as u32);
    } else if cpu != -1 {
        return invalid(&format!("cpu {cpu}: expected a CPU number or -1"));
    }
    match Task::init(cfg) {
        Ok(t) => {
            // SAFETY: out checked non-NULL; writable per contract.
            unsafe { *out = Box::into_raw(Box::new(RtmgrTask(t))) };
            RTMGR_TASK_OK
        }
        Err(e) => fail(e),
    }
}

/// # Safety
/// `t` must be NULL or a live task.
unsafe fn task<'a>(t: *mut RtmgrTask) -> Option<&'a mut Task> {
    // SAFETY: per the caller's contract.
    unsafe { t.as_mut() }.map(|t| &mut t.0)
}

/// Periodic without budget: first release at `start_ns` (CLOCK_MONOTONIC,
/// absolute; 0 = now), period `period_ns`. Sleeps until the first release.
///
/// # Safety
/// `t` must be NULL or a task from `rtmgr_task_init` not yet deleted.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_task_make_periodic(
    t: *mut RtmgrTask,
    start_ns: u64,
    period_ns: u64,
) -> RtmgrTaskStatus {
    // SAFETY: per contract.
    match unsafe { task(t) } {
        Some(t) => done(t.make_periodic(start_ns, period_ns)),
        None => invalid("task is NULL"),
    }
}

/// Periodic with budget `budget_ns` per period, enforced by `mode`
/// (`RTMGR_BUDGET_SOFT`, `RTMGR_BUDGET_HARD`, `RTMGR_BUDGET_SOFT_REARM`,
/// `RTMGR_BUDGET_SOFT_COMPENSATE`). Soft modes use signal SIGRTMIN+4.
/// Hard mode: SCHED_DEADLINE with deadline = period.
///
/// # Safety
/// `t` must be NULL or a task from `rtmgr_task_init` not yet deleted.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_task_make_periodic_budget(
    t: *mut RtmgrTask,
    start_ns: u64,
    period_ns: u64,
    budget_ns: u64,
    mode: c_int,
) -> RtmgrTaskStatus {
    // SAFETY: per contract.
    unsafe { rtmgr_task_make_periodic_budget_ex(t, start_ns, period_ns, budget_ns, mode, 0, 0) }
}

/// As `rtmgr_task_make_periodic_budget`, with the soft modes' signal
/// `signo` (SIGRTMIN..SIGRTMAX; 0 = SIGRTMIN+4) and hard mode's relative
/// deadline `deadline_ns` (budget <= deadline <= period; 0 = the period).
///
/// # Safety
/// `t` must be NULL or a task from `rtmgr_task_init` not yet deleted.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_task_make_periodic_budget_ex(
    t: *mut RtmgrTask,
    start_ns: u64,
    period_ns: u64,
    budget_ns: u64,
    mode: c_int,
    signo: c_int,
    deadline_ns: u64,
) -> RtmgrTaskStatus {
    let signal = (signo != 0).then_some(signo);
    let soft = |variant| BudgetMode::Soft { signal, variant };
    let mode = match mode {
        RTMGR_BUDGET_SOFT => soft(SoftVariant::EarlySpin),
        RTMGR_BUDGET_SOFT_REARM => soft(SoftVariant::Rearm),
        RTMGR_BUDGET_SOFT_COMPENSATE => soft(SoftVariant::Compensate),
        RTMGR_BUDGET_HARD => BudgetMode::Hard {
            deadline_ns: (deadline_ns != 0).then_some(deadline_ns),
        },
        other => return invalid(&format!("unknown budget mode {other}")),
    };
    // SAFETY: per contract.
    match unsafe { task(t) } {
        Some(t) => done(t.make_periodic_budget(start_ns, period_ns, budget_ns, mode)),
        None => invalid("task is NULL"),
    }
}

/// One period of a task, as kept in its statistics ring (times in ns).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RtmgrTaskPeriod {
    /// Period number k (release = start + k * period).
    pub index: u64,
    pub release_ns: u64,
    /// Budget assigned and CPU time received in this period.
    pub budget_ns: u64,
    pub received_ns: u64,
    /// Wake-up time - release time, or UINT64_MAX if the task did not wait for this release.
    pub latency_ns: u64,
    /// The budget ran out in this period.
    pub exhausted: bool,
    pub ignored_waits: u32,
    pub missed: u32,
}

/// Copy the periods numbered `*from` and later that are still in the ring
/// (at most `cap`) into `out`, oldest first; returns how many were copied
/// (or a negative status) and advances `*from`. `*lost` (if not NULL)
/// receives the number of periods overwritten before they could be read.
/// Lock-free: may be called from any thread while the task runs.
///
/// # Safety
/// `t` must be NULL or a live task; `from` valid; `out` valid for `cap`
/// elements; `lost` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_task_read_periods(
    t: *const RtmgrTask,
    from: *mut u64,
    out: *mut RtmgrTaskPeriod,
    cap: usize,
    lost: *mut u64,
) -> i64 {
    // SAFETY: per contract.
    let Some(t) = (unsafe { t.as_ref() }) else {
        return invalid("task is NULL") as i64;
    };
    if from.is_null() || (out.is_null() && cap > 0) {
        return invalid("from and out must not be NULL") as i64;
    }
    let ring = t.0.shared.ring();
    // SAFETY: from is valid per contract.
    let start = unsafe { *from };
    let head = ring.written();
    let oldest = head.saturating_sub(ring.capacity() as u64);
    let mut n = start.max(oldest);
    let mut skipped = oldest.saturating_sub(start);
    let mut copied = 0usize;
    while n < head && copied < cap {
        match ring.get(n) {
            Some(r) => {
                let rec = RtmgrTaskPeriod {
                    index: r.index,
                    release_ns: r.release_ns,
                    budget_ns: r.budget_ns,
                    received_ns: r.received_ns,
                    latency_ns: r.latency_ns.unwrap_or(u64::MAX),
                    exhausted: r.exhausted,
                    ignored_waits: r.ignored_waits,
                    missed: r.missed,
                };
                // SAFETY: copied < cap and out is valid for cap elements.
                unsafe { *out.add(copied) = rec };
                copied += 1;
            }
            None => skipped += 1,
        }
        n += 1;
    }
    // SAFETY: from valid, lost NULL or writable, per contract.
    unsafe {
        *from = n;
        if !lost.is_null() {
            *lost = skipped;
        }
    }
    copied as i64
}

/// End the job and wait for the next release. Returns `RTMGR_TASK_OK` (on
/// time), `RTMGR_TASK_MISSED` (and the number of missed releases in
/// `*missed` if not NULL), `RTMGR_TASK_IGNORED`, or an error.
///
/// # Safety
/// `t` must be NULL or a live task; `missed` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_task_wait_period(
    t: *mut RtmgrTask,
    missed: *mut u64,
) -> RtmgrTaskStatus {
    // SAFETY: per contract.
    let Some(t) = (unsafe { task(t) }) else {
        return invalid("task is NULL");
    };
    let (st, n) = match t.wait_period() {
        Ok(WaitOutcome::OnTime) => (RTMGR_TASK_OK, 0),
        Ok(WaitOutcome::Missed(n)) => (RTMGR_TASK_MISSED, n),
        Ok(WaitOutcome::Ignored) => (RTMGR_TASK_IGNORED, 0),
        Err(e) => (fail(e), 0),
    };
    if !missed.is_null() {
        // SAFETY: non-NULL and writable per contract.
        unsafe { *missed = n };
    }
    st
}

/// Copy the task's counters into `*out`.
///
/// # Safety
/// `t` must be NULL or a live task; `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_task_stats(
    t: *const RtmgrTask,
    out: *mut TaskStats,
) -> RtmgrTaskStatus {
    // SAFETY: per contract.
    match (unsafe { t.as_ref() }, out.is_null()) {
        (Some(t), false) => {
            // SAFETY: out is non-NULL and writable.
            unsafe { *out = t.0.stats() };
            RTMGR_TASK_OK
        }
        _ => invalid("task and out must not be NULL"),
    }
}

/// Last per-period record: budget assigned and received (ns) of the most
/// recently closed period. Returns `RTMGR_TASK_EINVAL` if none yet.
///
/// # Safety
/// `t` must be NULL or a live task; the out pointers NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_task_last_period(
    t: *const RtmgrTask,
    budget_ns: *mut u64,
    received_ns: *mut u64,
) -> RtmgrTaskStatus {
    // SAFETY: per contract.
    let Some(t) = (unsafe { t.as_ref() }) else {
        return invalid("task is NULL");
    };
    let ring = t.0.shared.ring();
    let n = ring.written();
    match n.checked_sub(1).and_then(|i| ring.get(i)) {
        Some(r) => {
            // SAFETY: each pointer is checked non-NULL; writable per contract.
            unsafe {
                if !budget_ns.is_null() {
                    *budget_ns = r.budget_ns;
                }
                if !received_ns.is_null() {
                    *received_ns = r.received_ns;
                }
            }
            RTMGR_TASK_OK
        }
        None => invalid("no period has ended yet"),
    }
}

/// Create a group budget: `budget_ns` of process CPU time per `period_ns`,
/// first release at `start_ns` (0 = now), shared by the tasks that join it
/// with `rtmgr_task_make_periodic_group`. Every thread of the process counts
/// against it (process CPU clock). Free with `rtmgr_task_group_free`.
///
/// # Safety
/// `out` must be valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_task_group_create(
    start_ns: u64,
    period_ns: u64,
    budget_ns: u64,
    out: *mut *mut RtmgrTaskGroup,
) -> RtmgrTaskStatus {
    if out.is_null() {
        return invalid("out must not be NULL");
    }
    match Group::new(start_ns, period_ns, budget_ns) {
        Ok(g) => {
            // SAFETY: out checked non-NULL; writable per contract.
            unsafe { *out = Box::into_raw(Box::new(RtmgrTaskGroup(g))) };
            RTMGR_TASK_OK
        }
        Err(e) => fail(e),
    }
}

/// Make the task periodic as a member of group `g` (soft mode, SIGRTMIN+4):
/// when the group has used its budget in a period, every member is suspended
/// until the next release.
///
/// # Safety
/// `t` must be NULL or a live task, `g` NULL or a live group.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_task_make_periodic_group(
    t: *mut RtmgrTask,
    g: *const RtmgrTaskGroup,
) -> RtmgrTaskStatus {
    // SAFETY: per contract.
    match (unsafe { task(t) }, unsafe { g.as_ref() }) {
        (Some(t), Some(g)) => done(t.make_periodic_group(&g.0, None)),
        _ => invalid("task and group must not be NULL"),
    }
}

/// Release the caller's reference to a group (members keep theirs). NULL is ignored.
///
/// # Safety
/// `g` must be NULL or a group from `rtmgr_task_group_create`, freed once.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_task_group_free(g: *mut RtmgrTaskGroup) {
    if !g.is_null() {
        // SAFETY: created by Box::into_raw in rtmgr_task_group_create.
        drop(unsafe { Box::from_raw(g) });
    }
}

/// Current CLOCK_MONOTONIC time in ns (for `start_ns`).
#[no_mangle]
pub extern "C" fn rtmgr_task_now_ns() -> u64 {
    super::mono_ns()
}

/// Delete the task: stop it, restore the thread's scheduling policy and
/// affinity, free it. NULL is ignored.
///
/// # Safety
/// `t` must be NULL or a live task, deleted once, from its own thread.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_task_delete(t: *mut RtmgrTask) -> RtmgrTaskStatus {
    if t.is_null() {
        return RTMGR_TASK_OK;
    }
    // SAFETY: live task per contract.
    if let Err(e) = unsafe { &*t }.0.check_thread() {
        return fail(e);
    }
    // SAFETY: created by Box::into_raw in rtmgr_task_init; deleted once.
    let b = unsafe { Box::from_raw(t) };
    done(b.0.delete())
}
