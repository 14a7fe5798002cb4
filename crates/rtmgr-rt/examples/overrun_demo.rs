//! Rust twin of examples/c/overrun_demo.c: what happens when a job needs more
//! than its budget (budget-based RTAI §3.2, Fig. 2a). Period 10 ms, budget
//! 2 ms; every 5th job needs 5 ms. That job is suspended when its budget runs
//! out, continues in the next periods with fresh budgets, and the waits that
//! belonged to the earlier periods return at once ("ignored"), so the task
//! catches up. Prints one line per wait_period.
//!
//! Run: `cargo run -p rtmgr-rt --example overrun_demo -- [jobs] [soft|hard]`

use rtmgr_rt::periodic::{
    mono_ns, thread_cpu_ns, BudgetMode, Task, TaskClass, TaskConfig, WaitOutcome,
};

const PERIOD_NS: u64 = 10_000_000;
const BUDGET_NS: u64 = 2_000_000;

fn compute(ns: u64) {
    let t0 = thread_cpu_ns();
    while thread_cpu_ns() - t0 < ns {
        std::hint::spin_loop();
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let jobs: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(12);
    let mode = match args.next().as_deref() {
        Some("hard") => BudgetMode::hard(),
        _ => BudgetMode::soft(),
    };
    let root = rtmgr_sys::process::is_root();
    let class = if root {
        TaskClass::Rt1 { priority: 40 }
    } else {
        TaskClass::Linux
    };
    let run = || -> Result<(), rtmgr_rt::periodic::TaskError> {
        let mut task = Task::init(TaskConfig::new("overrun", class))?;
        let start = mono_ns() + PERIOD_NS;
        task.make_periodic_budget(start, PERIOD_NS, BUDGET_NS, mode)?;
        for job in 0..jobs {
            let need = if job % 5 == 2 { 5_000_000 } else { 1_000_000 };
            compute(need);
            let o = task.wait_period()?;
            let t = mono_ns().saturating_sub(start) as f64 / 1e6;
            let what = match o {
                WaitOutcome::OnTime => "on time".to_string(),
                WaitOutcome::Ignored => "ignored (delayed wait of an earlier period)".into(),
                WaitOutcome::Missed(n) => format!("missed {n} release(s)"),
            };
            println!(
                "job {job:2} needed {:.1} ms  t={t:7.3} ms  wait_period: {what}",
                need as f64 / 1e6
            );
        }
        let s = task.stats();
        println!(
            "exhaustions={} ignored_waits={} if_wait={}",
            s.exhaustions, s.ignored_waits, s.if_wait
        );
        task.delete()
    };
    if let Err(e) = run() {
        eprintln!("overrun_demo: {e}");
        std::process::exit(1);
    }
}
