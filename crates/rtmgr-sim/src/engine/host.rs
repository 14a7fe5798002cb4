//! The host under a VM's vCPUs (docs/lending.md, issue 20): while enough
//! vCPUs are busy, the host preempts a busy one for a host time slice at a
//! given rate; an idle (halted) vCPU is not preempted. What runs on a
//! stalled vCPU, a woken RT0 task included, waits for the slice to end.
//! With a capacity factor (issue 28), all vCPUs busy are also time-sliced
//! onto fewer host CPUs.

use super::events::Ev;
use super::machine::Machine;
use super::sched::charge;
use crate::HostModel;

/// An attempt this far ahead never comes (beyond any run's end, no overflow).
const NEVER_NS: u64 = 1 << 60;

impl Machine {
    /// A host preemption attempt: a vCPU picked at random is stalled for
    /// the host slice if it is busy and enough vCPUs are (all of them for
    /// an attempt of the capacity factor's share).
    pub(super) fn on_host(&mut self, host: HostModel) {
        let n = self.cfg.cpus;
        let cpu = (self.host_rng.next() % u64::from(n)) as u32;
        let busy = self.cpus.iter().filter(|c| c.running.is_some()).count() as u32;
        let sharing = host.sharing_rate(n);
        // Drawn only with a capacity factor: runs without one stay identical.
        let sharing_attempt =
            sharing > 0.0 && self.host_rng.unit() * (host.rate_per_s + sharing) < sharing;
        let needed = if host.busy_vcpus == 0 || sharing_attempt {
            n
        } else {
            host.busy_vcpus
        };
        let c = &self.cpus[cpu as usize];
        // A time slice of the capacity factor is not stacked on one under way.
        let free = !sharing_attempt || c.stall_until <= self.now;
        if busy >= needed && c.running.is_some() && free {
            self.stall(cpu, host.slice_ns);
        }
        let dt = self.host_gap(host);
        self.queue.push(self.now + dt, Ev::Host);
    }

    /// Time to the next attempt: Poisson, `rate_per_s` (plus the capacity
    /// factor's `sharing_rate`) per vCPU.
    pub(super) fn host_gap(&mut self, host: HostModel) -> u64 {
        let u = self.host_rng.unit().max(1e-12);
        let n = self.cfg.cpus;
        let rate = (host.rate_per_s + host.sharing_rate(n)) * f64::from(n);
        if rate <= 0.0 {
            // A capacity factor at or above the vCPUs and no preemption: never.
            return NEVER_NS;
        }
        ((-u.ln()) * 1e9 / rate).max(1.0) as u64
    }

    /// Busy `cpu` does not run for `slice` from now (after a pending
    /// interrupt): its task's segment ends later, and so does any dispatch
    /// there. The time is the CPU's steal, not its busy or unmovable time.
    fn stall(&mut self, cpu: u32, slice: u64) {
        let now = self.now;
        let c = &mut self.cpus[cpu as usize];
        let ti = c.running.expect("a busy vCPU");
        let (e, fixed) = charge(c, &mut self.tasks[ti as usize], now);
        c.busy_ns += e;
        c.w_fixed += fixed;
        c.irq_until = c.irq_until.max(now) + slice;
        c.stall_until = c.irq_until;
        c.seg_start = c.seg_start.max(now) + slice;
        c.seg_end += slice;
        c.w_steal += slice;
        c.steal_ns += slice;
        self.host_stalls += 1;
        let end = c.seg_end;
        self.queue.set_run(cpu, end);
    }
}
