//! The periodic-task API (budget-based RTAI §3.1: `rt_task_init`,
//! `rt_task_make_periodic[_budget]`, `rt_task_wait_period`, `rt_task_delete`;
//! ARTiS §2.4: RT0/RT1+ classes as SCHED_FIFO on a pinned, memory-locked thread).

use super::enforce::{
    enforce, enforce_group, ensure_handler, on_budget_signal, on_sigxcpu, serve_pending, Inner,
    Kind, CURRENT, DL_HELD_PPM,
};
use super::signal::{self, SCHED_DEADLINE, SCHED_FLAG_DL_OVERRUN, SCHED_FLAG_RESET_ON_FORK};
use super::stats::{Counters, TaskShared, TaskStats};
use super::{
    os, BudgetMode, Group, PeriodRecord, StatsRing, TaskClass, TaskConfig, TaskError, WaitOutcome,
    DEFAULT_SIGNAL_OFFSET,
};
use rtmgr_core::budget::{BudgetAccount, Enforcer, Reservation, WaitAction};
use rtmgr_sys::mem::mlockall;
use rtmgr_sys::sched::{
    get_affinity, gettid, online_cpus, pin_to, set_attr, yield_now, SavedSched, SchedAttr,
    SCHED_FIFO,
};
use rtmgr_sys::time::{mono_ns, sleep_until, thread_cpu_ns};
use rtmgr_sys::Tid;
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::*};
use std::sync::Arc;

/// A periodic task bound to the thread that created it.
pub struct Task {
    tid: Tid,
    cfg: TaskConfig,
    /// `rtmgr serve` runs: it sets the policy when it grants (P, W).
    via_daemon: bool,
    /// The daemon's reservation, released on delete.
    reservation: Option<u64>,
    saved: SavedSched,
    pub(super) shared: Arc<TaskShared>,
    inner: Option<Box<Inner>>,
    _not_send: PhantomData<*const ()>,
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
        // With a daemon, the policy waits for its grant (make_periodic_budget).
        let via_daemon = cfg.class.fifo_priority().is_some() && crate::client::daemon_running();
        let apply = || -> Result<(), TaskError> {
            if !via_daemon {
                apply_class(&cfg)?;
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
            via_daemon,
            reservation: None,
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
        if self.via_daemon {
            // No budget to reserve: the class's policy, set here as without a daemon.
            apply_class(&self.cfg)?;
            self.via_daemon = false;
        }
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
                if self.via_daemon {
                    self.reserve(period_ns, budget_ns, None, false)?;
                }
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
                if self.cfg.cpu.is_some() && !self.via_daemon {
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
                let granted = if self.via_daemon {
                    self.reserve(period_ns, budget_ns, deadline_ns, true)
                } else {
                    set_attr(0, &reservation).map_err(|e| {
                        if e.raw_os_error() == Some(libc::EBUSY) {
                            self.admission_error(budget_ns, period_ns)
                        } else if e.raw_os_error() == Some(libc::EPERM) && is_narrowed() {
                            deadline_affinity_error()
                        } else {
                            TaskError::Os {
                                what: "sched_setattr(SCHED_DEADLINE)",
                                source: e,
                            }
                        }
                    })
                };
                if let Err(e) = granted {
                    CURRENT.with(|c| c.set(std::ptr::null()));
                    return Err(e);
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
        if let Some(id) = self.reservation.take() {
            // The daemon gives the policy, cpuset and limits back.
            if let Err(e) = crate::client::Client::connect().and_then(|mut c| c.release(id)) {
                return Err(TaskError::Daemon(e.to_string()));
            }
        }
        self.saved
            .restore()
            .map_err(os("restore scheduling policy"))
    }

    /// Ask the daemon for (P, W[, D]) for this thread: hard (SCHED_DEADLINE)
    /// or soft (SCHED_FIFO at the class's priority, at most 98).
    fn reserve(
        &mut self,
        period_ns: u64,
        budget_ns: u64,
        deadline_ns: Option<u64>,
        hard: bool,
    ) -> Result<(), TaskError> {
        let mut r = crate::client::ReserveRequest::new(period_ns, budget_ns);
        r.deadline_ns = deadline_ns;
        r.cpu = self.cfg.cpu;
        r.name = Some(self.cfg.name.clone());
        r.class = if hard {
            "rt0".into()
        } else {
            let p = self.cfg.class.fifo_priority().unwrap_or(50);
            format!("rt1:{}", p.min(rtmgr_core::class::RT1_MAX_PRIORITY))
        };
        let g = crate::client::Client::connect()
            .and_then(|mut c| c.reserve(r))
            .map_err(|e| TaskError::Daemon(e.to_string()))?;
        self.reservation = Some(g.id);
        Ok(())
    }
}

/// The class's policy and CPU pin, set by the task itself (no daemon).
fn apply_class(cfg: &TaskConfig) -> Result<(), TaskError> {
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
    Ok(())
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

/// Is the calling thread's affinity narrower than the online CPUs (the usual
/// cause of EPERM from SCHED_DEADLINE for a privileged thread)?
fn is_narrowed() -> bool {
    get_affinity(0).is_ok_and(|a| a.count() < online_cpus())
}

fn deadline_affinity_error() -> TaskError {
    let affinity = get_affinity(0)
        .map(|m| {
            m.cpus()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_else(|_| "?".into());
    TaskError::DeadlineAffinity {
        affinity,
        online: online_cpus(),
    }
}
