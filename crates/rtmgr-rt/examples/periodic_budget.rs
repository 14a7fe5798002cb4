//! Rust twin of examples/c/periodic_budget.c: a periodic control loop with a
//! computation budget (budget-based RTAI §3.2). Each job reads a "sensor",
//! computes for about 0.3 ms and "actuates"; the budget is 1 ms per 4 ms period.
//!
//! Run: `cargo run -p rtmgr-rt --example periodic_budget -- [periods] [soft|hard]`
//! (as an RT1+ task when root, else as a Linux task).

use rtmgr_rt::periodic::{BudgetMode, Task, TaskClass, TaskConfig, WaitOutcome};

const PERIOD_NS: u64 = 4_000_000;
const BUDGET_NS: u64 = 1_000_000;
const WORK_NS: u64 = 300_000;

/// Burn `ns` of this thread's CPU time (the "control law").
fn compute(ns: u64, state: &mut f64) {
    let t0 = rtmgr_rt::periodic::thread_cpu_ns();
    while rtmgr_rt::periodic::thread_cpu_ns() - t0 < ns {
        *state = (*state * 0.999 + 0.001).sin();
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let periods: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(50);
    let mode = match args.next().as_deref() {
        Some("hard") => BudgetMode::hard(),
        _ => BudgetMode::soft(),
    };
    let root = rtmgr_sys::process::is_root();
    let class = if root {
        TaskClass::Rt1 { priority: 50 }
    } else {
        TaskClass::Linux
    };
    let mut task = match Task::init(TaskConfig::new("control", class)) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("periodic_budget: {e}");
            std::process::exit(1);
        }
    };
    let start = rtmgr_rt::periodic::mono_ns() + 2 * PERIOD_NS;
    if let Err(e) = task.make_periodic_budget(start, PERIOD_NS, BUDGET_NS, mode) {
        eprintln!("periodic_budget: {e}");
        std::process::exit(1);
    }
    let mut state = 0.5;
    let (mut on_time, mut late) = (0u64, 0u64);
    for _ in 0..periods {
        compute(WORK_NS, &mut state); // sensor -> control law -> actuator
        match task.wait_period() {
            Ok(WaitOutcome::OnTime) => on_time += 1,
            Ok(_) => late += 1,
            Err(e) => {
                eprintln!("periodic_budget: {e}");
                std::process::exit(1);
            }
        }
    }
    let s = task.stats();
    println!(
        "periods={} on_time={on_time} late={late} exhaustions={} ignored={} state={state:.3}",
        s.periods, s.exhaustions, s.ignored_waits
    );
    if let Err(e) = task.delete() {
        eprintln!("periodic_budget: {e}");
        std::process::exit(1);
    }
}
