//! ARTiS in the kernel (ARTiS §2.2–2.3): the symmetric balancer with RT-load
//! weighting, push-only moves across roles, task/processor association and
//! the forbidden-migration estimate (Fig. 3), plus the migration trigger:
//! a guest entering a non-preemptible section leaves its RT CPU at once.

use super::{steer_irqs_to_nrt, Balancer, PassLoads};
use crate::engine::machine::Machine;
use crate::SimConfig;
use rtmgr_core::balance::{History, PolicyConfig};
use rtmgr_core::class::TaskClass;

/// Capacity floor of a CPU saturated by RT work.
const MIN_CAP: f64 = 0.05;
/// Smoothing of the per-CPU RT load seen by the in-kernel ARTiS balancer.
const RT_LOAD_ALPHA: f64 = 0.2;

pub(crate) struct Artis {
    policy: PolicyConfig,
    balance_ns: u64,
    /// Periodic passes so far (Linux tasks go NRT→RT every other one).
    round: u64,
    /// Smoothed share of each CPU taken by unmovable work.
    rt_load: Vec<f64>,
    /// Per task: its kernel-heavy phases and evictions (Fig. 3).
    history: Vec<History>,
}

impl Artis {
    pub(crate) fn new(cfg: &SimConfig) -> Self {
        Artis {
            policy: cfg.policy.clone(),
            balance_ns: cfg.balance_ns,
            round: 0,
            rt_load: Vec::new(),
            history: Vec::new(),
        }
    }

    /// Runnable tasks on `cpu` other than a running RT0 task.
    fn fair_runnable(m: &Machine, cpu: u32) -> usize {
        let c = &m.cpus[cpu as usize];
        let running = c
            .running
            .is_some_and(|r| m.tasks[r as usize].class != TaskClass::Rt0);
        c.fair.len() + c.fifo.len() + usize::from(running)
    }
}

impl Balancer for Artis {
    fn attach(&mut self, m: &mut Machine) {
        steer_irqs_to_nrt(m);
        self.rt_load = vec![0.0; m.cpus.len()];
        self.history = vec![History::default(); m.tasks.len()];
    }

    /// RT-load weighting (§2.3): runnable tasks over the capacity RT work leaves.
    fn load(&self, m: &Machine, cpu: u32, delta: i64) -> f64 {
        let n = Self::fair_runnable(m, cpu) as i64 + delta;
        let cap = (1.0 - self.rt_load[cpu as usize]).max(MIN_CAP);
        n.max(0) as f64 / cap
    }

    fn may_move(&self, m: &Machine, ti: u32, from: u32, to: u32) -> bool {
        let t = &m.tasks[ti as usize];
        if !m.allows(ti, to) || t.class == TaskClass::Rt0 {
            return false;
        }
        let (from_rt, to_rt) = (m.cpus[from as usize].rt, m.cpus[to as usize].rt);
        if to_rt && t.np_left > 0 {
            // ARTiS never lets a non-preemptible section onto an RT CPU.
            return false;
        }
        if !from_rt && to_rt {
            // Fig. 3: no return while the next migration attempt is near.
            return self.history[ti as usize].may_return(m.now, &self.policy);
        }
        true
    }

    /// Task/processor association: from RT to NRT Linux tasks first, from
    /// NRT to RT RT1+ tasks first; otherwise queue order.
    fn association_rank(&self, m: &Machine, ti: u32, from: u32, to: u32) -> u32 {
        let (from_rt, to_rt) = (m.cpus[from as usize].rt, m.cpus[to as usize].rt);
        let linux = m.tasks[ti as usize].class == TaskClass::Linux;
        match (from_rt, to_rt) {
            (true, false) => u32::from(!linux),
            (false, true) => u32::from(linux),
            _ => 0,
        }
    }

    /// A move must lower the maximum weighted load: both CPUs' loads after
    /// it below `from`'s now (the target's, the same for every `from` of a
    /// pass and mostly too high, asked first).
    #[inline]
    fn loads_worth_moving(&self, m: &Machine, loads: &PassLoads) -> bool {
        let below = |after: f64| after + 1e-9 < loads.from_load;
        below(self.load(m, loads.to, 1)) && below(self.load(m, loads.from, -1))
    }

    /// Linux tasks are considered for NRT→RT every other pass, RT1+ tasks at
    /// every pass.
    fn task_worth_moving(&self, m: &Machine, ti: u32, from: u32, to: u32) -> bool {
        m.tasks[ti as usize].class != TaskClass::Linux
            || self.round.is_multiple_of(2)
            || m.cpus[from as usize].rt
            || !m.cpus[to as usize].rt
    }

    /// Push only (§2.3): an idle CPU pulls only within its own role.
    fn may_pull(&self, m: &Machine, from: u32, to: u32) -> bool {
        m.cpus[from as usize].rt == m.cpus[to as usize].rt
    }

    /// Count the pass and smooth each CPU's RT load over the last period.
    fn begin_balance_pass(&mut self, m: &mut Machine) {
        self.round += 1;
        let w = self.balance_ns as f64;
        for (c, load) in m.cpus.iter_mut().zip(self.rt_load.iter_mut()) {
            let now_load = (c.w_fixed as f64 / w).min(1.0);
            *load = (1.0 - RT_LOAD_ALPHA) * *load + RT_LOAD_ALPHA * now_load;
            c.w_fixed = 0;
        }
    }

    /// §2.2, the migration trigger in preempt_disable(): a guest entering a
    /// non-preemptible section on an RT CPU goes to the least loaded NRT CPU.
    fn on_nonpreemptible_entry(&mut self, m: &mut Machine, cpu: u32, ti: u32) -> bool {
        let may_leave = m.cpus[cpu as usize].rt
            && m.tasks[ti as usize].class != TaskClass::Rt0
            && m.nrt.iter().any(|&c| m.allows(ti, c));
        if !may_leave {
            return false;
        }
        let now = m.now;
        let h = &mut self.history[ti as usize];
        h.phase_started(now);
        h.evicted(now, self.balance_ns, &self.policy);
        h.heavy = false;
        m.deschedule(cpu);
        let target = m.least_loaded(&m.nrt.clone(), ti);
        m.migrate_queued(ti, target, self);
        m.dispatch(cpu, self);
        true
    }
}
