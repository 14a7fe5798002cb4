//! An exact schedule of one RT CPU over the hyperperiod, to check
//! that what admission accepts never misses a deadline. SCHED_DEADLINE jobs
//! run by EDF above SCHED_FIFO jobs (highest priority first, first come first
//! served among equals, a running FIFO job is only preempted by a higher
//! one); every task releases at 0 (the critical instant) and every job runs
//! exactly its budget, in whole time units. Used by the property tests and
//! the placement example; cost grows with the hyperperiod, so keep periods
//! harmonic.

use super::{Demand, Kind};

struct Job {
    task: usize,
    release: u64,
    due: u64,
    left: u64,
}

/// The first job that misses its deadline: (task index, release), or None.
/// `unit` converts the demands' ns into simulation steps.
pub fn first_miss(tasks: &[Demand], unit: u64) -> Option<(usize, u64)> {
    let p: Vec<u64> = tasks.iter().map(|d| d.period_ns / unit).collect();
    let hyper = p.iter().fold(1u64, |a, &b| lcm(a, b));
    let dmax = tasks
        .iter()
        .map(|d| d.deadline_ns / unit)
        .max()
        .unwrap_or(0);
    let mut ready: Vec<Job> = Vec::new();
    let mut running_soft: Option<(usize, u64)> = None;
    for t in 0..hyper + dmax + 1 {
        if let Some(j) = ready.iter().find(|j| j.due <= t) {
            return Some((j.task, j.release));
        }
        if t < hyper {
            for (i, d) in tasks.iter().enumerate() {
                if t % p[i] == 0 {
                    ready.push(Job {
                        task: i,
                        release: t,
                        due: t + d.deadline_ns / unit,
                        left: d.budget_ns / unit,
                    });
                }
            }
        }
        let Some(k) = pick(tasks, &ready, running_soft) else {
            continue;
        };
        let j = &mut ready[k];
        running_soft = match tasks[j.task].kind {
            Kind::Soft { .. } => Some((j.task, j.release)),
            Kind::Hard => running_soft,
        };
        j.left -= 1;
        if j.left == 0 {
            if running_soft == Some((j.task, j.release)) {
                running_soft = None;
            }
            ready.remove(k);
        }
    }
    None
}

fn pick(tasks: &[Demand], ready: &[Job], running_soft: Option<(usize, u64)>) -> Option<usize> {
    let hard = ready
        .iter()
        .enumerate()
        .filter(|(_, j)| tasks[j.task].kind == Kind::Hard)
        .min_by_key(|(_, j)| (j.due, j.task, j.release));
    if let Some((k, _)) = hard {
        return Some(k);
    }
    let prio = |j: &Job| tasks[j.task].priority().unwrap_or(0);
    let top = ready.iter().map(prio).max()?;
    if let Some(k) = ready
        .iter()
        .position(|j| Some((j.task, j.release)) == running_soft && prio(j) == top)
    {
        return Some(k);
    }
    ready
        .iter()
        .enumerate()
        .filter(|(_, j)| prio(j) == top)
        .min_by_key(|(_, j)| (j.release, j.task))
        .map(|(k, _)| k)
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}
