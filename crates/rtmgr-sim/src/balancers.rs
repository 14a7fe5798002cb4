//! The four balancers of the model. Linux-like and shield: symmetric, count
//! runnable tasks (ARTiS §2.3 "the original behaviour"). ARTiS: the same with
//! RT-load weighting, push-only moves across roles, task/processor association
//! and the forbidden-migration estimate. rtmgr: the core `Balancer` fed with
//! what /proc would show every `sample_ns`, the kernel balancing inside NRT.

use crate::engine::{Sim, State};
use crate::BalancerKind;
use rtmgr_core::balance::{CpuObs, Observation, Place, TaskObs};
use rtmgr_core::class::TaskClass;

/// Moves per balancing pass, like the kernel's nr_balance_iterations.
const MAX_PASS_MOVES: usize = 8;
/// Capacity floor of a CPU saturated by RT work.
const MIN_CAP: f64 = 0.05;
/// Smoothing of the per-CPU RT load seen by the in-kernel ARTiS balancer.
const RT_LOAD_ALPHA: f64 = 0.2;

impl Sim {
    fn weighted(&self) -> bool {
        self.cfg.balancer == BalancerKind::Artis
    }

    /// Runnable tasks a balancer may move on `cpu` (queued, not running).
    fn queued(&self, cpu: u32) -> impl Iterator<Item = u32> + '_ {
        let c = &self.cpus[cpu as usize];
        c.fifo.iter().chain(c.fair.iter()).copied()
    }

    fn fair_runnable(&self, cpu: u32) -> usize {
        let c = &self.cpus[cpu as usize];
        let running = c
            .running
            .is_some_and(|r| self.tasks[r as usize].def.class != TaskClass::Rt0);
        c.fair.len() + c.fifo.len() + usize::from(running)
    }

    /// The balancer's view of a CPU's load, optionally with one task more/less.
    fn load(&self, cpu: u32, delta: i64) -> f64 {
        if self.weighted() {
            let n = self.fair_runnable(cpu) as i64 + delta;
            let cap = (1.0 - self.cpus[cpu as usize].rt_load).max(MIN_CAP);
            n.max(0) as f64 / cap
        } else {
            (self.cpus[cpu as usize].nr_running() as i64 + delta).max(0) as f64
        }
    }

    /// May `ti` move from `from` to `to` under this balancer's rules?
    fn may_move(&self, ti: u32, from: u32, to: u32) -> bool {
        let t = &self.tasks[ti as usize];
        if !t.mask[to as usize] || t.def.class == TaskClass::Rt0 {
            return false;
        }
        if self.weighted() && self.cpus[to as usize].rt && t.np_left > 0 {
            // ARTiS never lets a non-preemptible section onto an RT CPU.
            return false;
        }
        if self.weighted() && !self.cpus[from as usize].rt && self.cpus[to as usize].rt {
            // Fig. 3: no return while the next migration attempt is near.
            return t.history.may_return(self.now, &self.cfg.policy);
        }
        true
    }

    /// ARTiS task/processor association: from RT to NRT Linux tasks first,
    /// from NRT to RT RT1+ tasks first; otherwise queue order.
    fn association_rank(&self, ti: u32, from: u32, to: u32) -> u32 {
        if !self.weighted() {
            return 0;
        }
        let (from_rt, to_rt) = (self.cpus[from as usize].rt, self.cpus[to as usize].rt);
        let linux = self.tasks[ti as usize].def.class == TaskClass::Linux;
        match (from_rt, to_rt) {
            (true, false) => u32::from(!linux),
            (false, true) => u32::from(linux),
            _ => 0,
        }
    }

    /// Periodic balancing (every `balance_ns`): repeatedly push one queued
    /// task from the most to the least loaded CPU while that lowers the maximum.
    pub(crate) fn balance(&mut self) {
        self.balance_round += 1;
        if self.weighted() {
            let w = self.cfg.balance_ns as f64;
            for c in &mut self.cpus {
                let now_load = (c.w_fixed as f64 / w).min(1.0);
                c.rt_load = (1.0 - RT_LOAD_ALPHA) * c.rt_load + RT_LOAD_ALPHA * now_load;
                c.w_fixed = 0;
            }
        }
        let n = self.cfg.cpus;
        for _ in 0..MAX_PASS_MOVES {
            let loads: Vec<f64> = (0..n).map(|c| self.load(c, 0)).collect();
            let target = (0..n)
                .min_by(|&a, &b| {
                    loads[a as usize]
                        .total_cmp(&loads[b as usize])
                        .then(a.cmp(&b))
                })
                .expect("cpus");
            let mut best: Option<(f64, u32, u32)> = None; // (gain, task, from)
            for from in 0..n {
                let before = loads[from as usize];
                if from == target || before <= loads[target as usize] {
                    continue;
                }
                // The queued task this balancer would pick first (association order).
                let Some(t) = self
                    .queued(from)
                    .filter(|&t| self.may_move(t, from, target))
                    .min_by_key(|&t| self.association_rank(t, from, target))
                else {
                    continue;
                };
                let ok = if self.weighted() {
                    // ARTiS considers Linux tasks for NRT→RT every other pass,
                    // RT1+ tasks at every pass.
                    let linux_turn = self.tasks[t as usize].def.class != TaskClass::Linux
                        || self.balance_round.is_multiple_of(2)
                        || self.cpus[from as usize].rt
                        || !self.cpus[target as usize].rt;
                    let after = self.load(from, -1).max(self.load(target, 1));
                    linux_turn && after + 1e-9 < before
                } else {
                    before - loads[target as usize] >= 2.0
                };
                let gain = before - loads[target as usize];
                if ok && best.is_none_or(|b| gain > b.0) {
                    best = Some((gain, t, from));
                }
            }
            let Some((_, t, _)) = best else { break };
            self.migrate_queued(t, target);
        }
    }

    /// New-idle balancing: an idle CPU pulls one queued task from the busiest
    /// CPU that allows it. Under ARTiS only within the same role (no pulls
    /// across RT/NRT: push only, §2.3).
    pub(crate) fn idle_pull(&mut self, cpu: u32) -> Option<u32> {
        let n = self.cfg.cpus;
        let my_rt = self.cpus[cpu as usize].rt;
        let from = (0..n)
            .filter(|&c| c != cpu)
            .filter(|&c| !self.weighted() || self.cpus[c as usize].rt == my_rt)
            .filter(|&c| self.queued(c).any(|t| self.may_move(t, c, cpu)))
            .max_by(|&a, &b| self.load(a, 0).total_cmp(&self.load(b, 0)).then(b.cmp(&a)))?;
        let t = self.queued(from).find(|&t| self.may_move(t, from, cpu))?;
        let c = &mut self.cpus[from as usize];
        if let Some(p) = c.fair.iter().position(|&x| x == t) {
            c.fair.remove(p);
        } else if let Some(p) = c.fifo.iter().position(|&x| x == t) {
            c.fifo.remove(p);
        }
        self.note_migration(t, cpu);
        Some(t)
    }

    /// What `rtmgr balance` would read from /proc, then the core policy's moves.
    pub(crate) fn sample(&mut self) {
        let now = self.now;
        let window = now - self.last_sample;
        self.last_sample = now;
        let w = window.max(1) as f64;
        let cpus: Vec<CpuObs> = self
            .cpus
            .iter_mut()
            .enumerate()
            .map(|(i, c)| {
                let p99 = if c.w_lat.is_empty() {
                    None
                } else {
                    c.w_lat.sort_unstable();
                    let k = (c.w_lat.len() * 99).div_ceil(100).max(1) - 1;
                    Some(c.w_lat[k])
                };
                c.w_lat.clear();
                let o = CpuObs {
                    cpu: i as u32,
                    rt: c.rt,
                    rt_load: (c.w_fixed as f64 / w).min(1.0),
                    latency_p99_ns: p99,
                };
                c.w_fixed = 0;
                o
            })
            .collect();
        let tasks: Vec<TaskObs> = self
            .tasks
            .iter_mut()
            .enumerate()
            .filter(|(_, t)| t.state != State::Done)
            .map(|(i, t)| {
                let o = TaskObs {
                    id: i as u64,
                    class: t.def.class,
                    place: if t.movable { t.place } else { Place::Fixed },
                    runnable: matches!(t.state, State::Ready | State::Running),
                    user_ns: t.w_user,
                    kernel_ns: t.w_kernel,
                    voluntary: t.w_vol,
                    involuntary: t.w_invol,
                    total_ns: t.per_cpu.iter().sum(),
                    // User space cannot see preempt_disable(): only kernel time.
                    np_entered: false,
                };
                t.w_user = 0;
                t.w_kernel = 0;
                t.w_vol = 0;
                t.w_invol = 0;
                o
            })
            .collect();
        let obs = Observation {
            now_ns: now,
            window_ns: window,
            cpus,
            tasks,
        };
        let moves = self.policy.step(&obs);
        let n = self.cfg.cpus;
        for m in moves {
            let ti = m.task as u32;
            let rt = &self.cfg.rt;
            let (mask, target): (Vec<bool>, Option<u32>) = match m.to {
                Place::Rt(c) => ((0..n).map(|x| x == c).collect(), Some(c)),
                Place::Nrt => ((0..n).map(|x| !rt.contains(x)).collect(), None),
                Place::Fixed => continue,
            };
            let t = &mut self.tasks[ti as usize];
            t.place = m.to;
            t.mask = mask;
            self.enforce_mask(ti, target);
        }
    }
}
