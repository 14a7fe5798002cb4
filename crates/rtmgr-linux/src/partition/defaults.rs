//! The defaults knob (McKenney §2.1): where new interrupts and unbound kernel
//! work go — `/proc/irq/default_smp_affinity` and the unbound-workqueue
//! cpumask — to the NRT CPUs. Plain control files: journalled, restored verbatim.

use super::knob::{ApplyCx, Knob};
use super::Result;
use crate::{cpus, irq};
use rtmgr_core::partition::KnobId;
use std::path::Path;

pub(super) struct Defaults;

impl Knob for Defaults {
    fn name(&self) -> &'static str {
        "defaults"
    }

    fn apply(&self, cx: &mut ApplyCx<'_>) -> Result<()> {
        let nrt = cx.plan.nrt.clone();
        let as_mask = |old: &str| nrt.to_mask(old.split(',').count());
        // Every kernel has it: its absence is an error, not a note.
        irq::default_affinity_raw(cx.host)?;
        if let Some(written) =
            cx.set_file(self.name(), Path::new(irq::DEFAULT_AFFINITY), as_mask)?
        {
            written?;
        }
        if !cx.plan.enabled(KnobId::Workqueues) {
            return Ok(());
        }
        match cx.set_file(self.name(), Path::new(cpus::WORKQUEUE_CPUMASK), as_mask)? {
            Some(Err(e)) => cx
                .report
                .notes
                .push(format!("unbound workqueues not steered: {e}")),
            Some(Ok(())) => {}
            None => cx
                .report
                .notes
                .push("no unbound-workqueue cpumask on this kernel".into()),
        }
        Ok(())
    }
}
