//! The IRQ knob (McKenney §2.1: steer interrupts away from the real-time CPU;
//! DROPS §4.1: the manager owns interrupts): every IRQ's smp_affinity goes to
//! the NRT CPUs, or where `[irq]` in the config says. The kernel refuses
//! managed and per-CPU interrupts; those are reported. Undo writes the raw
//! masks back.

use super::knob::{ApplyCx, Knob, UndoCx};
use super::{crash_point, Result};
use crate::irq;
use crate::journal::Record;
use rtmgr_core::partition::irq_target;
use rtmgr_core::CpuSet;

pub(super) struct Irqs;

impl Knob for Irqs {
    fn name(&self) -> &'static str {
        "irqs"
    }

    fn apply(&self, cx: &mut ApplyCx<'_>) -> Result<()> {
        let host = cx.host;
        let numbers = irq::numbers(host)?;
        let mut masks = Vec::with_capacity(numbers.len());
        for &n in &numbers {
            if let Ok(m) = irq::raw_mask(host, n) {
                masks.push((n, m));
            }
        }
        cx.journal.record(&Record::Irqs {
            masks: masks.clone(),
        })?;
        let half = masks.len() / 2;
        for (i, (n, raw)) in masks.iter().enumerate() {
            if i == half {
                crash_point("irqs-half");
            }
            let Some(target) = irq_target(cx.plan, *n) else {
                cx.report
                    .skip("IRQ left alone by the config (irq.leave)", n.to_string());
                continue;
            };
            if CpuSet::parse_mask(raw).ok().as_ref() == Some(target) {
                cx.report.irqs_moved.push(*n);
                continue;
            }
            match irq::set_affinity(host, *n, target) {
                Ok(()) => cx.report.irqs_moved.push(*n),
                Err(e) if e.is_gone() => {}
                Err(e) => cx.report.skip(
                    "the kernel refused the new IRQ affinity (managed or per-CPU interrupt)",
                    format!("{n} ({e})"),
                ),
            }
        }
        Ok(())
    }

    fn undo(&self, cx: &mut UndoCx<'_>) {
        for r in cx.records.iter().rev() {
            let Record::Irqs { masks } = r else { continue };
            for (n, mask) in masks {
                match irq::raw_mask(cx.host, *n) {
                    Ok(now) if now == *mask => cx.report.irqs_restored += 1,
                    Ok(_) => match irq::write_raw_mask(cx.host, *n, mask) {
                        Ok(()) => cx.report.irqs_restored += 1,
                        Err(e) => cx.problems.push(format!("IRQ {n}: {e}")),
                    },
                    Err(_) => {} // IRQ gone (device removed)
                }
            }
        }
    }
}
