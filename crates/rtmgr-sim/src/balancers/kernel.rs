//! The kernel's own balancing, run under every balancer with its rules:
//! the periodic pass (every `balance_ns`) and new-idle pulls (ARTiS §2.3:
//! RT-load weighting, push-only moves and task/processor association are
//! ARTiS's rules for these two).

use super::{Balancer, PassLoads};
use crate::engine::machine::Machine;

/// Moves per balancing pass, like the kernel's nr_balance_iterations.
const MAX_PASS_MOVES: usize = 8;

/// Runnable tasks a balancer may move on `cpu` (queued, not running).
fn queued(m: &Machine, cpu: u32) -> impl Iterator<Item = u32> + '_ {
    let c = &m.cpus[cpu as usize];
    c.fifo.iter().chain(c.fair.iter()).copied()
}

/// Periodic balancing: repeatedly push one queued task from the most to the
/// least loaded CPU while the balancer finds that worth it.
pub(crate) fn periodic_balance(m: &mut Machine, b: &mut impl Balancer) {
    b.begin_balance_pass(m);
    let b = &*b;
    let n = m.cfg.cpus;
    // The machine's scratch vector, reused: no allocation or clearing per pass.
    let mut loads = std::mem::take(&mut m.pass_loads);
    loads.clear();
    loads.extend((0..n).map(|c| b.load(m, c, 0)));
    for _ in 0..MAX_PASS_MOVES {
        let (target, to_load) = least_loaded(&loads);
        if !m.pullable(target) {
            break; // no task may ever move there (`may_move` implies its mask)
        }
        let mut best: Option<(f64, u32, u32)> = None; // (gain, task, from)
        for (from, &before) in (0..n).zip(loads.iter()) {
            let gain = before - to_load;
            // Only a greater gain than the best so far may replace it: the
            // questions below (pure) need no asking otherwise.
            if from == target || before <= to_load || best.is_some_and(|x| gain <= x.0) {
                continue;
            }
            let pair = PassLoads {
                from,
                to: target,
                from_load: before,
                to_load,
            };
            if !b.loads_worth_moving(m, &pair) {
                continue;
            }
            // The queued task this balancer would pick first (association order).
            let Some(t) = first_to_move(m, b, from, target) else {
                continue;
            };
            if b.task_worth_moving(m, t, from, target) {
                best = Some((gain, t, from));
            }
        }
        let Some((_, t, from)) = best else { break };
        m.migrate_queued(t, target, b);
        // A move changes the queues of its two CPUs only (the target, if
        // idle, starts the task it was given): the other loads stand.
        loads[from as usize] = b.load(m, from, 0);
        loads[target as usize] = b.load(m, target, 0);
    }
    m.pass_loads = loads;
}

/// The CPU with the lowest load (`total_cmp`; of equals the lowest
/// numbered) and its load.
fn least_loaded(loads: &[f64]) -> (u32, f64) {
    let mut best = (0, loads[0]);
    for (cpu, &load) in (0..).zip(loads.iter()).skip(1) {
        if load.total_cmp(&best.1).is_lt() {
            best = (cpu, load);
        }
    }
    best
}

/// The first queued task of `from` that may move to `to` with the lowest
/// association rank (as `min_by_key`: the first of the lowest; rank 0 is the
/// lowest there is, so the search stops at the first one). The rank, cheap,
/// is asked first: a task that could not beat the best so far needs no
/// `may_move`.
fn first_to_move(m: &Machine, b: &impl Balancer, from: u32, to: u32) -> Option<u32> {
    // Few tasks may go to `to` (an RT CPU lent to a guest): when none of
    // them waits on `from`, none of its queue may move (`may_move` implies
    // the mask), and the queue needs no search.
    let allowed = m.movable_to(to);
    if allowed.len() < m.cpus[from as usize].nr_queued()
        && !allowed.iter().any(|&t| m.queued_on(t, from))
    {
        return None;
    }
    let mut best: Option<(u32, u32)> = None; // (rank, task)
    for t in queued(m, from) {
        let rank = b.association_rank(m, t, from, to);
        if best.is_some_and(|(r, _)| rank >= r) || !b.may_move(m, t, from, to) {
            continue;
        }
        if rank == 0 {
            return Some(t);
        }
        best = Some((rank, t));
    }
    best.map(|(_, t)| t)
}

/// New-idle balancing: an idle CPU pulls one queued task from the busiest
/// CPU that allows it (and that the balancer lets it pull from).
pub(crate) fn idle_pull(m: &mut Machine, b: &impl Balancer, cpu: u32) -> Option<u32> {
    if !m.pullable(cpu) {
        return None; // e.g. a shielded RT CPU: every movable task is confined elsewhere
    }
    // The most loaded (the lowest numbered of equals) of the CPUs with a
    // task that may move here; a CPU no more loaded than the best so far
    // cannot win, and its queue is not searched.
    let mut best: Option<(f64, u32)> = None;
    for c in 0..m.cfg.cpus {
        if c == cpu || m.cpus[c as usize].nr_queued() == 0 || !b.may_pull(m, c, cpu) {
            continue;
        }
        let load = b.load(m, c, 0);
        if best.is_some_and(|(l, _)| load.total_cmp(&l).is_le()) {
            continue;
        }
        if queued(m, c).any(|t| b.may_move(m, t, c, cpu)) {
            best = Some((load, c));
        }
    }
    let (_, from) = best?;
    let t = queued(m, from).find(|&t| b.may_move(m, t, from, cpu))?;
    m.unqueue(from, t);
    m.note_migration(t, cpu);
    Some(t)
}
