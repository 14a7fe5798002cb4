//! A grant's IRQ steered to its RT CPU (DROPS "Taming Linux" §4: the
//! resource manager hands out devices' interrupts with the CPU; McKenney §5:
//! an RT task's interrupt on its own CPU).

use super::{note, Cx, Draft, GrantStep};
use crate::daemon::grants_journal::Grant;
use crate::host::HostError;
use rtmgr_core::CpuSet;

/// The IRQ's affinity: the grant's RT CPU; its raw mask before, journalled.
pub struct IrqSteering;

impl GrantStep for IrqSteering {
    fn name(&self) -> &'static str {
        "IRQ"
    }

    fn snapshot(&self, cx: &Cx, _draft: &Draft, g: &mut Grant) -> Result<(), HostError> {
        if let Some((irq, old)) = &mut g.irq {
            *old = crate::irq::raw_mask(cx.host, *irq)?;
        }
        Ok(())
    }

    fn apply(&self, cx: &Cx, g: &Grant) -> Result<(), HostError> {
        match g.irq {
            Some((irq, _)) => crate::irq::set_affinity(cx.host, irq, &CpuSet::single(g.cpu)),
            None => Ok(()),
        }
    }

    fn verify(&self, cx: &Cx, g: &Grant) -> Vec<String> {
        let Some((irq, _)) = g.irq else {
            return Vec::new();
        };
        match crate::irq::affinity(cx.host, irq) {
            Ok(a) if a != CpuSet::single(g.cpu) => vec![format!("IRQ {irq}")],
            _ => Vec::new(),
        }
    }

    fn undo(&self, cx: &Cx, g: &Grant) -> Vec<String> {
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
