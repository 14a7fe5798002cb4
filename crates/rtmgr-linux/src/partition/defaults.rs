//! The defaults knob (McKenney §2.1): where new interrupts go —
//! `/proc/irq/default_smp_affinity` — to the NRT CPUs. A plain control file:
//! journalled, restored verbatim. (The unbound-workqueue cpumask it also set
//! before knobs were selectable is the workqueues knob's now; older journals
//! name it under this knob, and its undo still restores it.) Verify checks
//! the mask is still the NRT CPUs.

use super::knob::{ApplyCx, Knob, PartitionKnobs, PreviewCx, UndoCx, VerifyCx};
use super::Result;
use crate::drift::{self, Drift};
use crate::irq;
use crate::step::Step;
use rtmgr_core::partition::{KnobId, KnobReport};
use std::path::Path;

pub(super) struct Defaults;

impl Step<PartitionKnobs> for Defaults {
    fn name(&self) -> &'static str {
        self.id().name()
    }

    fn apply(&self, cx: &mut ApplyCx<'_>) -> Result<()> {
        // Every kernel has it: its absence is an error, not a note.
        let old = irq::default_affinity_raw(cx.host)?;
        let new = cx.plan.nrt.to_mask(old.split(',').count());
        let path = Path::new(irq::DEFAULT_AFFINITY);
        if let Some(written) = cx.set_file(self.name(), path, |_| new.clone())? {
            written?;
            cx.say(format!("default_smp_affinity: {old} -> {new}"));
        }
        Ok(())
    }

    fn verify(&self, cx: &VerifyCx<'_>) -> Vec<Drift> {
        let Ok(old) = irq::default_affinity_raw(cx.host) else {
            return Vec::new();
        };
        let want = cx.applied.plan.nrt.to_mask(old.split(',').count());
        let path = Path::new(irq::DEFAULT_AFFINITY);
        drift::file(cx.host, self.name(), "default_smp_affinity", path, &want)
            .into_iter()
            .collect()
    }

    fn undo(&self, cx: &mut UndoCx<'_>) -> Vec<String> {
        cx.restore_files(Some(self.name()))
    }
}

impl Knob for Defaults {
    fn id(&self) -> KnobId {
        KnobId::Defaults
    }

    fn explain(&self) -> &'static str {
        "Where interrupts requested from now on start, `/proc/irq/default_smp_affinity`, goes \
         to the NRT CPUs (McKenney §2.1; tuned's scheduler plugin does the same), so a device \
         plugged in or a driver loaded during the partition does not land on an RT CPU. Reset \
         writes the old mask back."
    }

    fn preview(&self, cx: &PreviewCx<'_>) -> KnobReport {
        let old = irq::default_affinity_raw(cx.host).unwrap_or_default();
        let lines = vec![format!(
            "default_smp_affinity: {old} -> {}",
            cx.plan.nrt.to_mask(old.split(',').count())
        )];
        cx.report(self.id(), lines)
    }
}
