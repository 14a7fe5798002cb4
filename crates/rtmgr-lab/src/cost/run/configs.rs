//! The configurations `rtmgr measure cost` compares and the interleaved
//! rounds that visit them (docs/architecture.md "Measuring": one run, interleaved, as
//! ratios): stock, shield, balanced, and preempt-full where the kernel can
//! switch its preemption model (McKenney Table 1's "-rt"-style row). The
//! partition is applied and reset through `partition::PartitionGuard`, the
//! live balancer runs as in `rtmgr evaluate`.

use crate::cost::CostConfig;
use crate::experiment::background_balancer::BackgroundBalancer;
use crate::experiment::{Context, Error, Reporter, Result};
use rtmgr_core::partition::{KnobId, PartitionPlan, PreemptMode};
use rtmgr_core::CpuSet;
use rtmgr_linux::partition::{self, Applied, ApplyOptions, PartitionGuard};
use rtmgr_linux::Host;
use std::sync::atomic::{AtomicBool, Ordering};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Config {
    Stock,
    Shield,
    Balanced,
    Preempt,
}

impl Config {
    pub fn name(self) -> &'static str {
        match self {
            Config::Stock => "stock",
            Config::Shield => "shield",
            Config::Balanced => "balanced",
            Config::Preempt => "preempt",
        }
    }

    fn description(self) -> &'static str {
        match self {
            Config::Stock => "no partition: the work may use every CPU",
            Config::Shield => "partition applied: the work confined to the NRT CPUs",
            Config::Balanced => {
                "partition applied, the work on the NRT CPUs, the live balancer lending the RT CPU to it"
            }
            Config::Preempt => "no partition, the kernel switched to full preemption",
        }
    }

    fn partitioned(self) -> bool {
        matches!(self, Config::Shield | Config::Balanced)
    }

    /// The CPUs this configuration leaves to Linux tasks.
    pub fn work_cpus(self, online: &CpuSet, plan: &PartitionPlan) -> CpuSet {
        if self.partitioned() {
            plan.nrt.clone()
        } else {
            online.clone()
        }
    }

    pub fn report(self, online: &CpuSet, plan: &PartitionPlan) -> CostConfig {
        CostConfig {
            name: self.name().into(),
            description: self.description().into(),
            work_cpus: self.work_cpus(online, plan),
        }
    }
}

/// The configurations this kernel allows, and why any is left out.
pub fn available(host: &Host) -> (Vec<Config>, Vec<String>) {
    let mut configs = vec![Config::Stock, Config::Shield, Config::Balanced];
    let mut skipped = Vec::new();
    match partition::preempt_switchable(host, PreemptMode::Full) {
        Ok(()) => configs.insert(1, Config::Preempt),
        Err(why) => skipped.push(format!(
            "preempt (full preemption): this kernel cannot switch its preemption model at run time ({why})"
        )),
    }
    (configs, skipped)
}

/// Where the work of one configuration runs.
pub struct Placement<'a> {
    pub config: Config,
    pub cpus: CpuSet,
    /// The applied partition: the work enters its NRT cpuset.
    pub applied: Option<&'a Applied>,
}

/// What the rounds need to set each configuration up.
pub struct Rounds<'a> {
    pub host: &'a Host,
    pub online: &'a CpuSet,
    pub plan: &'a PartitionPlan,
    pub opts: &'a ApplyOptions,
    pub configs: &'a [Config],
    pub rounds: u32,
    pub stop: &'a AtomicBool,
}

impl Rounds<'_> {
    /// Visit every configuration once per round (order reversed every other
    /// round), applying and resetting the partition around the partitioned
    /// ones. Returns the rounds completed and the failure that ended them.
    pub fn run(
        &self,
        rep: &mut dyn Reporter,
        mut work: impl FnMut(u32, &Placement<'_>, &mut dyn Reporter) -> Result<()>,
    ) -> (u32, Option<Error>) {
        let mut done = 0;
        for r in 0..self.rounds {
            let mut order = self.configs.to_vec();
            if r % 2 == 1 {
                order.reverse();
            }
            let mut guard: Option<PartitionGuard> = None;
            for c in order {
                if self.stop.load(Ordering::Relaxed) {
                    return (done, None);
                }
                if let Err(e) = self.one(r, c, &mut guard, rep, &mut work) {
                    return (
                        done,
                        Some(e.context(format!("round {} {}", r + 1, c.name()))),
                    );
                }
            }
            if let Some(g) = guard.take() {
                if let Err(e) = g.reset().context("reset the partition") {
                    return (done, Some(e));
                }
            }
            if !self.stop.load(Ordering::Relaxed) {
                done += 1;
            }
        }
        (done, None)
    }

    fn one(
        &self,
        round: u32,
        c: Config,
        guard: &mut Option<PartitionGuard>,
        rep: &mut dyn Reporter,
        work: &mut impl FnMut(u32, &Placement<'_>, &mut dyn Reporter) -> Result<()>,
    ) -> Result<()> {
        if c.partitioned() && guard.is_none() {
            *guard = Some(
                PartitionGuard::apply(self.host, self.plan, self.opts)
                    .context("apply the partition")?,
            );
        }
        if !c.partitioned() {
            if let Some(g) = guard.take() {
                g.reset().context("reset the partition")?;
            }
        }
        let preempt = match c {
            Config::Preempt => Some(self.full_preemption()?),
            _ => None,
        };
        let applied = guard.as_ref().map(|g| g.applied());
        let balancer = match (c, applied) {
            (Config::Balanced, Some(a)) => Some(BackgroundBalancer::start_fresh(self.host, a)),
            _ => None,
        };
        let placement = Placement {
            config: c,
            cpus: c.work_cpus(self.online, self.plan),
            applied,
        };
        let result = work(round, &placement, rep);
        let balanced = balancer.map(|b| b.finish().0);
        if let Some(g) = preempt {
            g.reset().context("restore the preemption model")?;
        }
        result?;
        if let Some(Err(e)) = balanced {
            return Err(Error::from(e).context("live balancer"));
        }
        Ok(())
    }

    fn full_preemption(&self) -> Result<PartitionGuard> {
        let plan = PartitionPlan {
            knobs: vec![KnobId::Preempt],
            preempt: Some(PreemptMode::Full),
            ..self.plan.clone()
        };
        let g = PartitionGuard::apply(self.host, &plan, self.opts)
            .context("switch to full preemption")?;
        if let Some(k) = g.report().knobs.iter().find(|k| !k.available) {
            return Err(Error::Failed(format!(
                "the kernel offered full preemption but refused it: {}",
                k.lines.join("; ")
            )));
        }
        Ok(g)
    }
}
