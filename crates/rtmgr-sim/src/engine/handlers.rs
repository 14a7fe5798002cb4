//! What each event does: a running segment ends (completion, sleep, entry
//! into a non-preemptible section), a task wakes (wake balancing), a tick
//! (round-robin slices), a device interrupt.

use super::events::Ev;
use super::machine::{Machine, State};
use super::sched::interrupt_running;
use crate::balancers::Balancer;
use rtmgr_core::class::TaskClass;

impl Machine {
    #[inline(always)]
    pub(super) fn on_run(&mut self, cpu: u32, b: &mut impl Balancer) {
        let c = &self.cpus[cpu as usize];
        debug_assert!(c.running.is_some() && c.seg_end == self.now);
        let was_np = {
            let ti = c.running.unwrap();
            self.tasks[ti as usize].np_left > 0
        };
        self.account(cpu);
        let ti = self.cpus[cpu as usize].running.unwrap();
        let now = self.now;
        let t = &mut self.tasks[ti as usize];
        if t.np_left == 0 && t.work_left == 0 {
            // Finished.
            self.deschedule(cpu);
            let t = &mut self.tasks[ti as usize];
            t.state = State::Done;
            t.done_at = Some(now);
            t.w_vol += 1;
            if t.class != TaskClass::Rt0 || self.all_rt0 {
                self.left -= 1;
            }
            self.dispatch(cpu, b);
            return;
        }
        if !was_np && t.burst_left == 0 {
            t.burst_left = t.def.burst_ns;
            self.deschedule(cpu);
            let t = &mut self.tasks[ti as usize];
            t.state = State::Sleeping;
            t.w_vol += 1;
            let at = if t.def.periodic {
                t.release += t.def.burst_ns + t.def.sleep_ns;
                t.release.max(now)
            } else {
                now + t.def.sleep_ns
            };
            self.queue.push(at, Ev::Wake { task: ti });
            self.dispatch(cpu, b);
            return;
        }
        if !was_np && t.np_next == 0 {
            t.np_next = t.def.np_every_ns;
            t.np_left = t.def.np_len_ns;
            t.w_np = true;
            if b.on_nonpreemptible_entry(self, cpu, ti) {
                return;
            }
        }
        let c = &mut self.cpus[cpu as usize];
        if c.need_resched {
            self.preempt(cpu, b);
            return;
        }
        let t = &self.tasks[ti as usize];
        c.seg_end = now.max(c.seg_start) + Self::boundary(t);
        let end = c.seg_end;
        self.queue.set_run(cpu, end);
    }

    #[inline(always)]
    pub(super) fn on_wake(&mut self, ti: u32, b: &impl Balancer) {
        let now = self.now;
        let t = &mut self.tasks[ti as usize];
        if t.state != State::Sleeping {
            return;
        }
        // A periodic task is late from its release (at or before now).
        t.wake_at = Some(if t.def.periodic { t.release } else { now });
        let t = &self.tasks[ti as usize];
        let prev = t.cpu;
        let cpu = if self.allows(ti, prev)
            && (t.prio > 0 || self.cpus[prev as usize].running.is_none())
        {
            prev
        } else {
            // Wake balancing: an idle allowed CPU, else the previous one if
            // allowed, else the least loaded allowed one.
            let idle = (0..self.cfg.cpus)
                .find(|&c| self.allows(ti, c) && self.cpus[c as usize].nr_running() == 0);
            match idle {
                Some(c) => c,
                None if self.allows(ti, prev) => prev,
                None => self.least_loaded(&self.allowed_cpus(ti), ti),
            }
        };
        self.note_migration(ti, cpu);
        self.enqueue(cpu, ti, false, b);
    }

    /// The most frequent event: inlined into the loop, its rare end of a
    /// slice out of line.
    #[inline(always)]
    pub(super) fn on_tick(&mut self, cpu: u32, b: &impl Balancer) {
        let now = self.now;
        let c = &mut self.cpus[cpu as usize];
        let Some(r) = c.running else {
            // The tick that fired was the last: an idle CPU is tickless.
            c.tick_armed = false;
            return;
        };
        let t = &mut self.tasks[r as usize];
        let end = interrupt_running(c, t, now, self.cfg.tick_cost_ns);
        // One branch (rarely taken) rather than four on data.
        let slice_over =
            (t.prio == 0) & (t.np_left == 0) & (t.slice_left <= 0) & !c.fair.is_empty();
        self.queue.set_run(cpu, end);
        if slice_over {
            self.end_slice(cpu, r, b);
        }
        self.queue.arm_tick(cpu, now + self.cfg.tick_ns);
    }

    /// Round robin: the running task `r` of `cpu` used its slice up and
    /// others wait; it goes to the back of the queue.
    #[inline(never)]
    fn end_slice(&mut self, cpu: u32, r: u32, b: &impl Balancer) {
        self.tasks[r as usize].slice_left = self.cfg.slice_ns as i64;
        if let Some(r) = self.deschedule(cpu) {
            self.tasks[r as usize].w_invol += 1;
            self.cpus[cpu as usize].fair.push_back(r);
        }
        self.dispatch(cpu, b);
    }

    #[inline(always)]
    pub(super) fn on_irq(&mut self) {
        let (x, n) = (self.rng.next(), self.irq_cpus.len() as u64);
        // x % n; a 64-bit division is slow, and n is often a power of two.
        let k = if n.is_power_of_two() {
            x & (n - 1)
        } else {
            x % n
        } as usize;
        let cpu = self.irq_cpus[k];
        self.interrupt(cpu, self.cfg.irq_cost_ns);
        let dt = self.irq_gap();
        self.queue.push(self.now + dt, Ev::Irq);
    }
}
