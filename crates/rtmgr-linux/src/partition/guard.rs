//! A partition held for a while (the shield configurations of a measurement, tests): it
//! is reset when the guard drops, also on error and panic. Being temporary,
//! it does not refuse a running irqbalance: it bans its RT CPUs in
//! irqbalance for its lifetime (`partition apply` refuses unless told).

use super::{apply, reset, Applied, ApplyOptions, ResetReport, Result};
use crate::Host;
use rtmgr_core::partition::{ApplyReport, IrqbalanceMode, PartitionPlan};

pub struct PartitionGuard {
    host: Host,
    applied: Applied,
    report: ApplyReport,
    reset_done: bool,
}

impl PartitionGuard {
    pub fn apply(host: &Host, plan: &PartitionPlan, opts: &ApplyOptions) -> Result<Self> {
        let plan = PartitionPlan {
            irqbalance: IrqbalanceMode::Ban,
            ..plan.clone()
        };
        let (applied, report) = apply(host, &plan, opts)?;
        Ok(PartitionGuard {
            host: host.clone(),
            applied,
            report,
            reset_done: false,
        })
    }

    pub fn applied(&self) -> &Applied {
        &self.applied
    }

    pub fn report(&self) -> &ApplyReport {
        &self.report
    }

    /// Reset now and report errors (Drop resets too but can only log them).
    pub fn reset(mut self) -> Result<ResetReport> {
        self.reset_done = true;
        reset(&self.host, &self.applied.journal)
    }
}

impl Drop for PartitionGuard {
    fn drop(&mut self) {
        if !self.reset_done {
            if let Err(e) = reset(&self.host, &self.applied.journal) {
                tracing::error!("partition reset failed: {e}");
                eprintln!("rtmgr: partition reset failed: {e}; run `rtmgr partition reset`");
            }
        }
    }
}
