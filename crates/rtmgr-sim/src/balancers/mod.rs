//! The four balancers of the model machine behind one interface, like the
//! kernel's `sched_class`: each fills [`Balancer`] in its own file and the
//! engine never asks which one it runs. ARTiS §2.3 (asymmetric balancing)
//! against the symmetric balancer it replaces, and the rtmgr core policy.

mod artis;
mod kernel;
mod linux;
mod rtmgr;
mod shield;

use crate::engine::machine::{Log, Machine};
use crate::{BalancerKind, SimConfig};
use rtmgr_core::class::TaskClass;

pub(crate) use kernel::{idle_pull, periodic_balance};

/// What a balancer does to the model machine. The engine calls `attach` once,
/// runs the kernel's periodic and new-idle balancing ([`kernel`]) with the
/// balancer's rules (`load` … `begin_balance_pass`), and calls the hooks
/// `on_nonpreemptible_entry` and `sample` when their events come.
pub(crate) trait Balancer {
    /// Set the machine up before the tasks start: the partition's task
    /// confinement and interrupt steering, per-task state.
    fn attach(&mut self, m: &mut Machine);

    /// The balancer's view of a CPU's load, with `delta` tasks more or less.
    /// Symmetric: the run-queue length, RT tasks counting as one (ARTiS §2.3,
    /// "the original behaviour").
    fn load(&self, m: &Machine, cpu: u32, delta: i64) -> f64 {
        (m.cpus[cpu as usize].nr_running() as i64 + delta).max(0) as f64
    }

    /// May task `ti` move from `from` to `to`? By default: when its mask
    /// allows `to` and it is not RT0. An override must imply both (idle
    /// pulls skip CPUs no non-RT0 task may run on).
    fn may_move(&self, m: &Machine, ti: u32, from: u32, to: u32) -> bool {
        let _ = from;
        m.allows(ti, to) && m.tasks[ti as usize].class != TaskClass::Rt0
    }

    /// Which queued task of `from` a pass to `to` takes first (lowest rank,
    /// then queue order); by default queue order.
    fn association_rank(&self, m: &Machine, ti: u32, from: u32, to: u32) -> u32 {
        let _ = (m, ti, from, to);
        0
    }

    /// Do the loads make a move from `from` to `to` worth it, whichever task
    /// it takes? Asked by a periodic pass before it looks for the task. By
    /// default when the loads differ by two tasks or more.
    fn loads_worth_moving(&self, m: &Machine, loads: &PassLoads) -> bool {
        let _ = m;
        loads.from_load - loads.to_load >= 2.0
    }

    /// Is moving queued task `ti` from `from` to `to` worth it, once the
    /// loads are (`loads_worth_moving`)? By default yes.
    fn task_worth_moving(&self, m: &Machine, ti: u32, from: u32, to: u32) -> bool {
        let _ = (m, ti, from, to);
        true
    }

    /// May an idle `to` pull from `from`? By default from any CPU.
    fn may_pull(&self, m: &Machine, from: u32, to: u32) -> bool {
        let _ = (m, from, to);
        true
    }

    /// Called at the start of every periodic pass (every `balance_ns`).
    fn begin_balance_pass(&mut self, m: &mut Machine) {
        let _ = m;
    }

    /// Task `ti` running on `cpu` enters a non-preemptible section; true if
    /// the balancer took it off the CPU (and dispatched the next task).
    fn on_nonpreemptible_entry(&mut self, m: &mut Machine, cpu: u32, ti: u32) -> bool {
        let _ = (m, cpu, ti);
        false
    }

    /// Period of the `sample` hook, if the balancer samples the machine.
    fn sample_period(&self) -> Option<u64> {
        None
    }

    /// Observe the machine as a user-space balancer would, and act.
    fn sample(&mut self, m: &mut Machine) {
        let _ = m;
    }

    /// The lending controller's state at `now` (the rtmgr policy only).
    fn lending_status(&self, now: u64) -> Vec<rtmgr_core::balance::LendingStatus> {
        let _ = now;
        Vec::new()
    }
}

/// A move a periodic pass considers from `from` to `to`, with the two CPUs'
/// loads as the balancer sees them.
pub(crate) struct PassLoads {
    pub(crate) from: u32,
    pub(crate) to: u32,
    pub(crate) from_load: f64,
    pub(crate) to_load: f64,
}

/// The event loop compiled once per balancer type, so that the engine's
/// calls into the balancer (rules, pulls, hooks) are direct and can be
/// inlined; `Sim` holds its balancer as a `dyn Runner`.
pub(crate) trait Runner: Balancer {
    fn run_loop(&mut self, m: &mut Machine, log: &mut Log, trace: &mut Vec<(u64, u64)>);
}

/// The balancer a configuration names (the one place that knows them all).
pub(crate) fn new(cfg: &SimConfig) -> Box<dyn Runner> {
    match cfg.balancer {
        BalancerKind::Linux => Box::new(linux::Linux),
        BalancerKind::Shield => Box::new(shield::Shield),
        BalancerKind::Artis => Box::new(artis::Artis::new(cfg)),
        BalancerKind::Rtmgr => Box::new(rtmgr::Rtmgr::new(cfg)),
    }
}

/// A partition: ordinary tasks that could run anywhere start confined to the
/// NRT CPUs (cset shield, `rtmgr partition`).
fn confine_to_nrt(m: &mut Machine) {
    let rt: Vec<bool> = m.cpus.iter().map(|c| c.rt).collect();
    for ti in 0..m.tasks.len() as u32 {
        if m.tasks[ti as usize].movable {
            m.set_allowed(ti, |c| !rt[c as usize]);
        }
    }
}

/// A partition steers device interrupts to the NRT CPUs.
fn steer_irqs_to_nrt(m: &mut Machine) {
    m.irq_cpus = m.nrt.clone();
}
