//! Migrations: where a task goes when it must change CPU, what a migration
//! costs and counts (ping-pongs across roles, ARTiS Fig. 2), and moving a
//! task that its mask no longer allows where it is.

use super::machine::{Machine, State};
use crate::balancers::Balancer;

impl Machine {
    /// Least loaded CPU among `cpus` for task `ti` (ties: lowest number).
    pub(crate) fn least_loaded(&self, cpus: &[u32], ti: u32) -> u32 {
        let _ = ti;
        *cpus
            .iter()
            .min_by_key(|&&c| (self.cpus[c as usize].nr_running(), c))
            .expect("non-empty CPU list")
    }

    /// Count a migration of `ti` to `to` (and a ping-pong if it reverses the
    /// previous cross-role migration soon after), charging the migration cost.
    /// Inlined: a task mostly stays where it was (an RT task waking on its
    /// own CPU), and that needs no call.
    #[inline(always)]
    pub(crate) fn note_migration(&mut self, ti: u32, to: u32) {
        let from = self.tasks[ti as usize].cpu;
        if from != to {
            self.count_migration(ti, from, to);
        }
    }

    #[inline(never)]
    fn count_migration(&mut self, ti: u32, from: u32, to: u32) {
        let now = self.now;
        let to_rt = self.cpus[to as usize].rt;
        let from_rt = self.cpus[from as usize].rt;
        let window = self.cfg.pingpong_ns;
        let cost = self.cfg.migration_cost_ns;
        let t = &mut self.tasks[ti as usize];
        t.migrations += 1;
        if t.work_left > 0 {
            t.work_left += cost;
        }
        if from_rt != to_rt {
            if let Some((at, was_to_rt)) = t.last_cross {
                if was_to_rt != to_rt && now - at <= window {
                    t.pingpongs += 1;
                }
            }
            t.last_cross = Some((now, to_rt));
        }
    }

    /// Take `ti` off the queues of `cpu` (if it is queued there).
    pub(crate) fn unqueue(&mut self, cpu: u32, ti: u32) {
        let c = &mut self.cpus[cpu as usize];
        if let Some(p) = c.fair.iter().position(|&x| x == ti) {
            c.fair.remove(p);
        } else if let Some(p) = c.fifo.iter().position(|&x| x == ti) {
            c.fifo.remove(p);
        }
    }

    /// Move a task that is not running (queued or just descheduled) to `to`.
    pub(crate) fn migrate_queued(&mut self, ti: u32, to: u32, b: &impl Balancer) {
        let from = self.tasks[ti as usize].cpu;
        self.unqueue(from, ti);
        self.note_migration(ti, to);
        self.enqueue(to, ti, false, b);
    }

    /// Move any task (running, queued or sleeping) so that it respects its mask.
    pub(crate) fn enforce_mask(&mut self, ti: u32, target: Option<u32>, b: &impl Balancer) {
        let t = &self.tasks[ti as usize];
        if self.allows(ti, t.cpu) || t.state == State::Done {
            return;
        }
        let to = target.unwrap_or_else(|| self.least_loaded(&self.allowed_cpus(ti), ti));
        match t.state {
            State::Sleeping => {
                self.note_migration(ti, to);
                self.tasks[ti as usize].cpu = to;
            }
            State::Running => {
                let cpu = t.cpu;
                self.deschedule(cpu);
                self.migrate_queued(ti, to, b);
                self.dispatch(cpu, b);
            }
            State::Ready => self.migrate_queued(ti, to, b),
            State::Done => {}
        }
    }
}
