//! Per-CPU scheduling: FIFO priorities above a round-robin fair class,
//! dispatch (with the balancer's new-idle pull), preemption (deferred while
//! the running task is non-preemptible), interrupts, and the accounting of
//! the time each task runs (the lbµ figures of ARTiS §3.3).

use super::machine::{Cpu, Machine, State, Task};
use crate::balancers::{self, Balancer};
use rtmgr_core::class::TaskClass;

impl Machine {
    /// Charge the running task of `cpu` for the time since its segment began.
    #[inline]
    pub(super) fn account(&mut self, cpu: u32) {
        let (e, fixed) = self.charge_running(cpu);
        let c = &mut self.cpus[cpu as usize];
        c.busy_ns += e;
        c.w_fixed += fixed;
    }

    /// The task side of `account`: see `charge`.
    #[inline]
    fn charge_running(&mut self, cpu: u32) -> (u64, u64) {
        let now = self.now;
        let c = &mut self.cpus[cpu as usize];
        let Some(ti) = c.running else { return (0, 0) };
        charge(c, &mut self.tasks[ti as usize], now)
    }

    /// At the end of a run: charge the running tasks and hand their
    /// stints' time to `per_cpu`.
    pub(super) fn close_books(&mut self) {
        self.lat.flush();
        for c in 0..self.cfg.cpus {
            self.account(c);
            if let Some(ti) = self.cpus[c as usize].running {
                self.tasks[ti as usize].end_stint(c);
            }
        }
    }

    #[inline]
    pub(super) fn boundary(t: &Task) -> u64 {
        if t.np_left > 0 {
            t.np_left
        } else {
            t.work_left.min(t.burst_left).min(t.np_next)
        }
    }

    /// Start the best queued task on an idle CPU (or one the balancer pulls).
    #[inline(always)]
    pub(crate) fn dispatch(&mut self, cpu: u32, b: &impl Balancer) {
        debug_assert!(self.cpus[cpu as usize].running.is_none());
        let c = &mut self.cpus[cpu as usize];
        let next = if c.fifo.len() == 1 {
            c.fifo.pop() // mostly the lone RT0 task of its CPU: no shifting
        } else if !c.fifo.is_empty() {
            Some(c.fifo.remove(0))
        } else {
            c.fair.pop_front()
        };
        let next = match next {
            Some(n) => n,
            None => match balancers::idle_pull(self, b, cpu) {
                Some(n) => n,
                None => return,
            },
        };
        let now = self.now;
        let c = &mut self.cpus[cpu as usize];
        let start = now.max(c.irq_until);
        let t = &mut self.tasks[next as usize];
        t.state = State::Running;
        t.cpu = cpu;
        t.stint_from = t.total_ns;
        if let Some(w) = t.wake_at.take() {
            if t.class == TaskClass::Rt0 {
                let l = start - w + self.cfg.switch_ns;
                self.lat.record(l);
                c.w_lat.push(l);
                // A host stall that ended after the wake-up delayed it.
                if c.stall_until > w {
                    c.w_stalled_lat.push(l);
                }
            }
        }
        if t.slice_left <= 0 {
            t.slice_left = self.cfg.slice_ns as i64;
        }
        c.running = Some(next);
        c.need_resched = false;
        c.seg_start = start;
        c.seg_end = start + Self::boundary(t);
        let end = c.seg_end;
        let arm = !c.tick_armed;
        c.tick_armed = true;
        self.queue.set_run(cpu, end);
        if arm {
            let tick = self.cfg.tick_ns;
            let phase = u64::from(cpu) * 7919 % tick;
            let next_tick = (now.saturating_sub(phase) / tick + 1) * tick + phase;
            self.queue.arm_tick(cpu, next_tick);
        }
    }

    /// Take the running task off its CPU (still runnable or not).
    #[inline(always)]
    pub(crate) fn deschedule(&mut self, cpu: u32) -> Option<u32> {
        self.account(cpu);
        let c = &mut self.cpus[cpu as usize];
        let ti = c.running.take()?;
        self.queue.set_run(cpu, u64::MAX);
        let t = &mut self.tasks[ti as usize];
        t.switches += 1;
        t.state = State::Ready;
        t.end_stint(cpu);
        Some(ti)
    }

    /// Put a runnable task on a CPU's queue; preempt if it is more urgent.
    #[inline(always)]
    pub(crate) fn enqueue(&mut self, cpu: u32, ti: u32, front: bool, b: &impl Balancer) {
        let prio = self.tasks[ti as usize].prio;
        {
            let t = &mut self.tasks[ti as usize];
            t.cpu = cpu;
            t.state = State::Ready;
        }
        let c = &mut self.cpus[cpu as usize];
        if prio > 0 {
            let pos = if front {
                c.fifo
                    .iter()
                    .position(|&o| self.tasks[o as usize].prio <= prio)
            } else {
                c.fifo
                    .iter()
                    .position(|&o| self.tasks[o as usize].prio < prio)
            };
            c.fifo.insert(pos.unwrap_or(c.fifo.len()), ti);
        } else if front {
            c.fair.push_front(ti);
        } else {
            c.fair.push_back(ti);
        }
        self.check_preempt(cpu, b);
    }

    #[inline(always)]
    fn check_preempt(&mut self, cpu: u32, b: &impl Balancer) {
        let c = &self.cpus[cpu as usize];
        let Some(r) = c.running else {
            self.dispatch(cpu, b);
            return;
        };
        let top = c.fifo.first().map_or(0, |&f| self.tasks[f as usize].prio);
        if top > self.tasks[r as usize].prio {
            if self.tasks[r as usize].np_left > 0 {
                self.cpus[cpu as usize].need_resched = true;
            } else {
                self.preempt(cpu, b);
            }
        }
    }

    #[inline(always)]
    pub(super) fn preempt(&mut self, cpu: u32, b: &impl Balancer) {
        if let Some(r) = self.deschedule(cpu) {
            self.tasks[r as usize].w_invol += 1;
            let prio = self.tasks[r as usize].prio;
            let c = &mut self.cpus[cpu as usize];
            if prio > 0 {
                let pos = c
                    .fifo
                    .iter()
                    .position(|&o| self.tasks[o as usize].prio < prio);
                c.fifo.insert(pos.unwrap_or(c.fifo.len()), r);
            } else {
                c.fair.push_front(r);
            }
        }
        self.dispatch(cpu, b);
    }

    /// A non-preemptible interrupt handler of `cost` runs on `cpu` now.
    #[inline(always)]
    pub(super) fn interrupt(&mut self, cpu: u32, cost: u64) {
        let now = self.now;
        let c = &mut self.cpus[cpu as usize];
        match c.running {
            Some(ti) => {
                let end = interrupt_running(c, &mut self.tasks[ti as usize], now, cost);
                self.queue.set_run(cpu, end);
            }
            None => charge_interrupt(c, now, cost, (0, 0)),
        }
    }
}

/// An interrupt of `cost` on `c` while task `t` runs there: charge `t` up to
/// now, and push its segment's end back; returns that end (for the queue).
#[inline(always)]
pub(super) fn interrupt_running(c: &mut Cpu, t: &mut Task, now: u64, cost: u64) -> u64 {
    let charged = charge(c, t, now);
    charge_interrupt(c, now, cost, charged);
    c.seg_start = c.seg_start.max(now) + cost;
    c.seg_end += cost;
    c.seg_end
}

/// The CPU side of an interrupt: busy `cost` more after what `charged`
/// (time, unmovable part) the running task.
#[inline(always)]
fn charge_interrupt(c: &mut Cpu, now: u64, cost: u64, (e, fixed): (u64, u64)) {
    c.irq_until = c.irq_until.max(now) + cost;
    c.busy_ns += e + cost;
    c.w_fixed += fixed + cost;
}

/// Charge task `t`, running on `c`, for the time since its segment began;
/// returns that time and the part of it that was unmovable work (what the
/// CPU's busy and fixed counters must add).
#[inline]
pub(super) fn charge(c: &mut Cpu, t: &mut Task, now: u64) -> (u64, u64) {
    use std::hint::select_unpredictable as select;
    let e = now.saturating_sub(c.seg_start);
    if e == 0 {
        return (0, 0);
    }
    c.seg_start = now;
    t.total_ns += e;
    if t.np_left > 0 {
        t.np_left -= e.min(t.np_left);
        t.kernel_ns += e;
        t.w_kernel += e;
    } else {
        t.work_left -= e.min(t.work_left);
        // u64::MAX: never (no sleeps, no kernel sections). Which tasks have
        // them is data: selects rather than branches.
        let (burst, np) = (t.burst_left, t.np_next);
        t.burst_left = select(burst == u64::MAX, burst, burst - e.min(burst));
        t.np_next = select(np == u64::MAX, np, np - e.min(np));
        t.w_user += e;
    }
    t.slice_left -= e as i64;
    (e, select(t.movable, 0, e))
}
