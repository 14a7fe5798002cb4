//! Real-thread tests of the periodic-task API (budget-based RTAI §3.2):
//! behaviour, not precision (generous tolerances; this is a 2-vCPU VM).
//! Soft-mode tests run as Linux (SCHED_OTHER) tasks and need no root; the
//! RT1+/SCHED_DEADLINE tests need root, take the machine lock, and check that
//! the thread's policy and affinity are restored.

use rtmgr_rt::periodic::{
    mono_ns, thread_cpu_ns, BudgetError, BudgetMode, SoftVariant, Task, TaskClass, TaskConfig,
    TaskError, WaitOutcome,
};
use rtmgr_sys::lock::{MachineLock, DEFAULT_LOCK_PATH};
use rtmgr_sys::process::is_root;
use rtmgr_sys::sched::{
    get_affinity, get_attr, online_cpus, set_affinity, CpuMask, SCHED_FLAG_RESET_ON_FORK,
};
use std::path::Path;

const MS: u64 = 1_000_000;

fn linux_task(name: &str) -> Task {
    Task::init(TaskConfig::new(name, TaskClass::Linux)).expect("init")
}

fn burn(ns: u64) {
    let t0 = thread_cpu_ns();
    while thread_cpu_ns() - t0 < ns {
        std::hint::spin_loop();
    }
}

/// SCHED_DEADLINE needs the thread's affinity to cover its root domain: the
/// hard-mode threads start on every online CPU, whatever affinity the test
/// harness was started with (false, with the reason printed, if the kernel
/// refuses: the harness runs in a narrower cpuset).
fn on_every_cpu() -> bool {
    let all = CpuMask::from_cpus(0..online_cpus()).unwrap();
    match set_affinity(0, &all) {
        Ok(()) => true,
        Err(e) => {
            eprintln!("skip: cannot widen the affinity to every online CPU ({e})");
            false
        }
    }
}

fn machine_lock() -> MachineLock {
    MachineLock::acquire(Path::new(DEFAULT_LOCK_PATH)).expect("machine lock")
}

/// The calling thread's policy as sched_getscheduler(2) reports it
/// (with the reset-on-fork bit).
fn policy() -> i32 {
    let a = get_attr(0).expect("sched_getattr");
    let reset_on_fork = if a.flags & SCHED_FLAG_RESET_ON_FORK != 0 {
        libc::SCHED_RESET_ON_FORK
    } else {
        0
    };
    a.policy as i32 | reset_on_fork
}

#[test]
fn bad_input_gives_errors_not_crashes() {
    let mut t = linux_task("bad");
    assert!(matches!(t.wait_period(), Err(TaskError::NotPeriodic)));
    assert!(matches!(
        t.make_periodic(0, 0),
        Err(TaskError::Budget(BudgetError::ZeroPeriod))
    ));
    assert!(matches!(
        t.make_periodic_budget(0, MS, 2 * MS, BudgetMode::soft()),
        Err(TaskError::Budget(BudgetError::BudgetExceedsPeriod { .. }))
    ));
    assert!(matches!(
        t.make_periodic_budget(0, MS, 0, BudgetMode::hard()),
        Err(TaskError::Budget(BudgetError::ZeroBudget))
    ));
    let bad_signal = BudgetMode::Soft {
        signal: Some(libc::SIGUSR1),
        variant: SoftVariant::Rearm,
    };
    assert!(matches!(
        t.make_periodic_budget(0, 10 * MS, MS, bad_signal),
        Err(TaskError::Invalid(_))
    ));
    assert!(!t.is_periodic());
    let e = Task::init(TaskConfig::new("p", TaskClass::Rt1 { priority: 0 })).unwrap_err();
    assert!(e.to_string().contains("priority"), "{e}");
    assert!(Task::init(TaskConfig::new("c", TaskClass::Linux).cpu(4096)).is_err());
    assert!(Task::init(TaskConfig::new("", TaskClass::Linux)).is_err());
    // Hard mode refuses a pinned task (SCHED_DEADLINE admission).
    let mut pinned = Task::init(TaskConfig::new("pin", TaskClass::Linux).cpu(0)).unwrap();
    assert!(matches!(
        pinned.make_periodic_budget(0, 10 * MS, MS, BudgetMode::hard()),
        Err(TaskError::Invalid(_))
    ));
    // (Using a task from another thread is refused by the type system: Task is
    // neither Send nor Sync; the C API checks it at run time: RTMGR_TASK_ETHREAD.)
}

#[test]
fn plain_periodic_releases_are_absolute() {
    let mut t = linux_task("plain");
    let start = mono_ns() + 5 * MS;
    t.make_periodic(start, 5 * MS).unwrap();
    let mut missed = 0;
    for _ in 0..10 {
        burn(200_000);
        match t.wait_period().unwrap() {
            WaitOutcome::OnTime => {}
            // A SCHED_OTHER task on a loaded machine may be late: skipped
            // releases are counted, never waited for.
            WaitOutcome::Missed(n) => missed += n,
            o => panic!("unexpected {o:?}"),
        }
    }
    let now = mono_ns();
    // 10 waits after the first release: release 10 (or later) is at start + 50 ms.
    assert!(now >= start + 50 * MS, "woke before release 10");
    assert_eq!(t.stats().periods, 10 + missed);
    assert!(matches!(
        t.make_periodic(0, MS),
        Err(TaskError::AlreadyPeriodic)
    ));
    t.delete().unwrap();
}

/// Seed §3.2: an overrunning job is suspended at its budget, continues in the
/// next period, and the wait that belonged to the earlier period is ignored.
fn overrun_catch_up(mode: BudgetMode, class: TaskClass) {
    let mut t = Task::init(TaskConfig::new("overrun", class)).unwrap();
    let p = 20 * MS;
    let w = 4 * MS;
    let start = mono_ns() + 2 * MS;
    t.make_periodic_budget(start, p, w, mode).unwrap();
    burn(MS);
    assert_eq!(t.wait_period().unwrap(), WaitOutcome::OnTime);
    // Job 1 needs 2.5 W: exhausted in windows 1 and 2, done in window 3.
    burn(10 * MS);
    let o = t.wait_period().unwrap();
    assert_eq!(o, WaitOutcome::Ignored);
    let after = mono_ns();
    assert!(
        after >= start + 3 * p,
        "not suspended: {} ms",
        (after - start) / MS
    );
    assert_eq!(t.wait_period().unwrap(), WaitOutcome::Ignored);
    assert_eq!(t.wait_period().unwrap(), WaitOutcome::OnTime);
    let s = t.stats();
    assert!(s.exhaustions >= 2, "{s:?}");
    assert_eq!(s.ignored_waits, 2, "{s:?}");
    let recs = t.records();
    let exhausted: Vec<_> = recs.iter().filter(|r| r.exhausted).collect();
    assert!(exhausted.len() >= 2);
    for r in exhausted {
        // Generous: budget + 2 ms (tick-based kernel accounting, VM noise).
        assert!(r.received_ns <= w + 2 * MS, "{r:?}");
        assert!(r.received_ns >= w / 2, "{r:?}");
    }
    t.delete().unwrap();
}

#[test]
fn soft_overrun_catches_up() {
    // A SCHED_OTHER task's timeline depends on the machine's load (a busy CI
    // machine can hold it off the CPU for whole periods), so the exact outcome
    // sequence is checked up to three times; a real bug fails every attempt.
    // The SCHED_FIFO version below (root) runs once.
    for attempt in 1..=3 {
        let r = std::panic::catch_unwind(|| overrun_catch_up(BudgetMode::soft(), TaskClass::Linux));
        match r {
            Ok(()) => return,
            Err(e) if attempt == 3 => std::panic::resume_unwind(e),
            Err(_) => eprintln!("attempt {attempt} disturbed by load, retrying"),
        }
    }
}

#[test]
fn soft_runaway_stays_within_budget() {
    for variant in [
        SoftVariant::Rearm,
        SoftVariant::EarlySpin,
        SoftVariant::Compensate,
    ] {
        let mut t = linux_task("runaway");
        let (p, w) = (10 * MS, 2 * MS);
        let mode = BudgetMode::Soft {
            signal: None,
            variant,
        };
        t.make_periodic_budget(0, p, w, mode).unwrap();
        let shared = t.shared();
        // Never calls wait_period for 150 ms of wall time.
        let (t0, c0) = (mono_ns(), thread_cpu_ns());
        while mono_ns() - t0 < 150 * MS {
            std::hint::spin_loop();
        }
        let cpu = thread_cpu_ns() - c0;
        // 15 periods: at most 16 budgets (+1 ms slack each); far below 150 ms.
        assert!(cpu <= 16 * (w + MS), "{variant:?}: got {} ms CPU", cpu / MS);
        let s = shared.stats();
        assert!(s.exhaustions >= 10, "{variant:?}: {s:?}");
        assert!(s.if_wait >= 10, "{variant:?}: {s:?}");
        // The statistics ring is readable from another thread.
        let n = std::thread::spawn(move || {
            let mut v = vec![];
            shared.ring().read_from(0, &mut v);
            v.len()
        })
        .join()
        .unwrap();
        assert!(n >= 10);
        t.delete().unwrap();
    }
}

#[test]
fn rt1_soft_task_restores_policy_and_affinity() {
    if !is_root() {
        eprintln!("skip: needs root (SCHED_FIFO)");
        return;
    }
    let _lock = machine_lock();
    std::thread::spawn(|| {
        let before = policy();
        let t = Task::init(TaskConfig::new("rt1", TaskClass::Rt1 { priority: 10 }).cpu(0)).unwrap();
        assert_eq!(policy() & !libc::SCHED_RESET_ON_FORK, libc::SCHED_FIFO);
        drop(t);
        assert_eq!(policy(), before);
        overrun_catch_up(BudgetMode::soft(), TaskClass::Rt1 { priority: 10 });
        assert_eq!(policy(), before);
        let n = get_affinity(0).expect("sched_getaffinity").count();
        assert_eq!(
            n as usize,
            std::thread::available_parallelism().unwrap().get()
        );
    })
    .join()
    .unwrap();
}

#[test]
fn hard_mode_deadline() {
    if !is_root() {
        eprintln!("skip: needs root (SCHED_DEADLINE)");
        return;
    }
    let _lock = machine_lock();
    std::thread::spawn(|| {
        if !on_every_cpu() {
            return;
        }
        let before = policy();
        overrun_catch_up(BudgetMode::hard(), TaskClass::Linux);
        assert_eq!(policy(), before, "SCHED_DEADLINE not reset");
        // A runaway is throttled by the kernel.
        let mut t = linux_task("hard-runaway");
        let (p, w) = (10 * MS, 2 * MS);
        t.make_periodic_budget(0, p, w, BudgetMode::hard()).unwrap();
        let (t0, c0) = (mono_ns(), thread_cpu_ns());
        while mono_ns() - t0 < 100 * MS {
            std::hint::spin_loop();
        }
        let cpu = thread_cpu_ns() - c0;
        assert!(cpu <= 11 * (w + MS), "got {} ms CPU", cpu / MS);
        assert!(t.stats().periods >= 5);
        t.delete().unwrap();
        assert_eq!(policy(), before);
    })
    .join()
    .unwrap();
}

#[test]
fn hard_mode_admission_error_states_utilisation() {
    if !is_root() {
        eprintln!("skip: needs root (SCHED_DEADLINE)");
        return;
    }
    let _lock = machine_lock();
    let cpus = u64::from(online_cpus());
    // Hold 0.9 per CPU in sleeping tasks, then ask for 0.2 more: refused.
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let rx = std::sync::Arc::new(std::sync::Mutex::new(rx));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let holders: Vec<_> = (0..cpus)
        .map(|_| {
            let (rx, ready_tx) = (rx.clone(), ready_tx.clone());
            std::thread::spawn(move || {
                on_every_cpu();
                let mut t = linux_task("holder");
                let r = t.make_periodic_budget(0, 10 * MS, 9 * MS, BudgetMode::hard());
                ready_tx.send(r.is_ok()).unwrap();
                // Sleep (do not spin) until told to stop.
                let _ = rx.lock().unwrap().recv();
                drop(t);
                policy()
            })
        })
        .collect();
    let held: Vec<bool> = (0..cpus).map(|_| ready_rx.recv().unwrap()).collect();
    let res = std::thread::spawn(|| {
        on_every_cpu();
        let mut t = linux_task("asker");
        t.make_periodic_budget(0, 10 * MS, 2 * MS, BudgetMode::hard())
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .join()
    .unwrap();
    drop(tx);
    for h in holders {
        assert_eq!(h.join().unwrap(), libc::SCHED_OTHER);
    }
    assert!(
        held.iter().all(|&b| b),
        "could not set up the holders: {held:?}"
    );
    let msg = res.expect_err("admission should fail");
    assert!(
        msg.contains("EBUSY") && msg.contains("requested utilisation 0.200"),
        "{msg}"
    );
    assert!(msg.contains("sched_rt_runtime_us"), "{msg}");
}

#[test]
fn group_budget_is_shared_by_its_members() {
    use rtmgr_rt::periodic::Group;
    let (p, w) = (20 * MS, 5 * MS);
    let group = Group::new(mono_ns() + 5 * MS, p, w).unwrap();
    let run_ms = 200;
    let members: Vec<_> = (0..2)
        .map(|i| {
            let g = group.clone();
            std::thread::spawn(move || {
                let mut t = linux_task(&format!("member{i}"));
                t.make_periodic_group(&g, None).unwrap();
                let (t0, c0) = (mono_ns(), thread_cpu_ns());
                // A runaway: never calls wait_period.
                while mono_ns() - t0 < run_ms * MS {
                    std::hint::spin_loop();
                }
                let cpu = thread_cpu_ns() - c0;
                // The delayed wait of an earlier period is ignored (seed §3.2).
                let o = t.wait_period().unwrap();
                let s = t.stats();
                t.delete().unwrap();
                (cpu, o, s)
            })
        })
        .collect();
    let results: Vec<_> = members.into_iter().map(|h| h.join().unwrap()).collect();
    let total: u64 = results.iter().map(|r| r.0).sum();
    // 10 periods of one shared 5 ms budget (+2 ms slack each), not 2 x 200 ms.
    let periods = run_ms * MS / p + 1;
    assert!(
        total <= periods * (w + 2 * MS),
        "members got {} ms",
        total / MS
    );
    for (cpu, o, s) in &results {
        assert!(*cpu > 0);
        assert_eq!(*o, WaitOutcome::Ignored, "{s:?}");
        assert!(s.exhaustions >= 5, "{s:?}");
    }
    assert!(group.exhaustions() >= 10);
    assert_eq!(group.members(), 0);
}

#[test]
fn hard_mode_on_a_narrowed_affinity_says_why_it_is_refused() {
    if !is_root() || online_cpus() < 2 {
        eprintln!("skip: needs root (SCHED_DEADLINE) and 2 CPUs");
        return;
    }
    let _lock = machine_lock();
    std::thread::spawn(|| {
        set_affinity(0, &CpuMask::from_cpus([0]).unwrap()).unwrap();
        let before = policy();
        let mut t = linux_task("narrowed");
        let e = t
            .make_periodic_budget(0, 10 * MS, 2 * MS, BudgetMode::hard())
            .unwrap_err();
        assert!(matches!(e, TaskError::DeadlineAffinity { .. }), "{e}");
        assert!(e.to_string().contains("root domain"), "{e}");
        assert_eq!(policy(), before, "a refusal changes nothing");
    })
    .join()
    .unwrap();
}
