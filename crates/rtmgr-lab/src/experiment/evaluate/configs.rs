//! evaluate's configurations (ARTiS §3.1 Table 1, §2.2–2.3): what each one
//! is, and where its load runs, so that every configuration offers the same
//! work (issue 14) and the throughput column is the configuration's cost.

use crate::load::LoadKind;
use crate::measure::load::LoadProgram;
use crate::measure::segment::{LoadPart, LoadPlan};
use rtmgr_core::partition::PartitionPlan;
use rtmgr_core::CpuSet;
use rtmgr_linux::partition::Role;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Config {
    Idle,
    Stock,
    Shield,
    /// The shield again, measured in every round as the A/A control (issue 28):
    /// its ratios to the shield are this run's noise floor.
    ShieldTwin,
    /// Partition + the load also as SCHED_IDLE guests on the RT CPU, no balancer (was "rtmgr").
    IdleGuests,
    /// Partition + the live balancer (`rtmgr balance`).
    Balanced,
    /// Stock with the kernel switched to full preemption (ARTiS Table 1).
    Preempt,
}

pub(super) const CONFIGS: [Config; 5] = [
    Config::Idle,
    Config::Stock,
    Config::Shield,
    Config::IdleGuests,
    Config::Balanced,
];

impl Config {
    pub(super) fn name(self) -> &'static str {
        match self {
            Config::Idle => "idle",
            Config::Stock => "stock",
            Config::Shield => "shield",
            Config::ShieldTwin => crate::report::CONTROL,
            Config::IdleGuests => "idle-guests",
            Config::Balanced => "balanced",
            Config::Preempt => "preempt",
        }
    }
    pub(super) fn description(self) -> &'static str {
        match self {
            Config::Idle => "no partition, no load: the machine's floor",
            Config::Stock => "no partition, load on every CPU",
            Config::Shield => "partition applied, load confined to the NRT CPUs (cset/RedHawk-style shielding)",
            Config::ShieldTwin => "the shield measured a second time in every round: the A/A control, this run's noise floor",
            Config::IdleGuests => "partition applied, load on the NRT CPUs and as SCHED_IDLE guests on the RT CPU, no balancer (ARTiS)",
            Config::Balanced => "partition applied, load on the NRT CPUs, the live balancer (`rtmgr balance`) lending the RT CPU to it under its latency guard",
            Config::Preempt => "no partition, load on every CPU, the kernel switched to full preemption (ARTiS Table 1: Linux with preemption)",
        }
    }
    pub(super) fn partitioned(self) -> bool {
        matches!(
            self,
            Config::Shield | Config::ShieldTwin | Config::IdleGuests | Config::Balanced
        )
    }

    pub(super) fn load_plan(
        self,
        kind: LoadKind,
        program: &LoadProgram,
        online: &CpuSet,
        plan: &PartitionPlan,
    ) -> Option<LoadPlan> {
        let part = |cpus: &CpuSet, idle: bool, enter: Option<Role>| LoadPart {
            cpus: cpus.clone(),
            sched_idle: idle,
            enter,
            instances: None,
        };
        // The same work in every configuration (issue 14): as many workers
        // per load component as stock runs (one per online CPU), so the
        // throughput column is the configuration's cost, not the CPUs it took.
        let same_work = |p: LoadPart| LoadPart {
            instances: Some(online.len()),
            ..p
        };
        let parts = match self {
            Config::Idle => return None,
            Config::Stock | Config::Preempt => vec![part(online, false, None)],
            Config::Shield | Config::ShieldTwin | Config::Balanced => {
                vec![same_work(part(&plan.nrt, false, Some(Role::Nrt)))]
            }
            Config::IdleGuests => vec![
                part(&plan.nrt, false, Some(Role::Nrt)),
                part(&plan.rt, true, Some(Role::Rt)),
            ],
        };
        Some(LoadPlan {
            kind,
            program: program.clone(),
            parts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtmgr_core::partition::{validate, PartitionConfig};
    use std::path::PathBuf;

    /// Issue 14: every loaded configuration offers the same number of workers
    /// per load component (stock's: one per online CPU).
    #[test]
    fn every_configuration_offers_the_same_work() {
        let online: CpuSet = "0-3".parse().unwrap();
        let plan = validate(
            &PartitionConfig::default(),
            Some(&CpuSet::single(3)),
            &online,
        )
        .unwrap();
        let program = LoadProgram::Builtin(PathBuf::from("/bin/true"));
        let workers = |c: Config| -> usize {
            c.load_plan(LoadKind::Compute, &program, &online, &plan)
                .map(|p| {
                    p.parts
                        .iter()
                        .map(|x| x.instances.unwrap_or(x.cpus.len()))
                        .sum()
                })
                .unwrap_or(0)
        };
        assert_eq!(workers(Config::Idle), 0);
        for c in [
            Config::Stock,
            Config::Preempt,
            Config::Shield,
            Config::ShieldTwin,
            Config::IdleGuests,
            Config::Balanced,
        ] {
            assert_eq!(workers(c), 4, "{c:?}");
        }
    }
}
