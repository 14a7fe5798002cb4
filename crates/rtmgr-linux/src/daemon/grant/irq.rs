//! A grant's IRQ steered to its RT CPU (DROPS "Taming Linux" §4: the
//! resource manager hands out devices' interrupts with the CPU; McKenney §5:
//! an RT task's interrupt on its own CPU).

use super::{drifted, note, Drafting, GrantStep, GrantSteps, On};
use crate::drift::Drift;
use crate::host::HostError;
use crate::step::Step;
use rtmgr_core::CpuSet;

/// The IRQ's affinity: the grant's RT CPU; its raw mask before, journalled.
pub struct IrqSteering;

impl Step<GrantSteps> for IrqSteering {
    fn name(&self) -> &'static str {
        "IRQ"
    }

    fn snapshot(&self, at: &mut Drafting<'_>) -> Result<(), HostError> {
        let (cx, g) = (at.cx, &mut *at.g);
        if let Some((irq, old)) = &mut g.irq {
            *old = crate::irq::raw_mask(cx.host, *irq)?;
        }
        Ok(())
    }

    fn apply(&self, at: &mut On<'_>) -> Result<(), HostError> {
        let On { cx, g } = *at;
        match g.irq {
            Some((irq, _)) => crate::irq::set_affinity(cx.host, irq, &CpuSet::single(g.cpu)),
            None => Ok(()),
        }
    }

    fn verify(&self, at: &On<'_>) -> Vec<Drift> {
        let On { cx, g } = *at;
        let Some((irq, _)) = g.irq else {
            return Vec::new();
        };
        match crate::irq::affinity(cx.host, irq) {
            Ok(a) if a != CpuSet::single(g.cpu) => vec![drifted(self, format!("IRQ {irq}"))],
            _ => Vec::new(),
        }
    }

    fn undo(&self, at: &mut On<'_>) -> Vec<String> {
        let On { cx, g } = *at;
        let mut problems = Vec::new();
        if let Some((irq, old)) = &g.irq {
            if cx.host.exists(format!("/proc/irq/{irq}")) {
                let r = crate::irq::write_raw_mask(cx.host, *irq, old);
                note(&mut problems, format!("IRQ {irq} mask"), r);
            }
        }
        problems
    }
}

impl GrantStep for IrqSteering {}
