//! The IRQ knob (McKenney §2.1: steer interrupts away from the real-time CPU;
//! DROPS §4.1: the manager owns interrupts): every IRQ's smp_affinity goes to
//! the NRT CPUs, or where `[irq]` in the config says. The kernel refuses
//! managed and per-CPU interrupts; those are reported. Undo writes the raw
//! masks back. Verify finds IRQs pointing at RT CPUs again (irqbalance, a
//! driver, by hand); repair steers them back to the NRT CPUs.

use super::knob::{ApplyCx, Knob, PartitionKnobs, PreviewCx, RepairCx, UndoCx, VerifyCx};
use super::{crash_point, Result};
use crate::drift::{self, Drift, Fix};
use crate::irq;
use crate::journal::{Journal, Record};
use crate::step::Step;
use rtmgr_core::partition::{irq_target, KnobId, KnobReport};
use rtmgr_core::CpuSet;
use std::path::Path;

fn mask_path(n: u32) -> String {
    format!("/proc/irq/{n}/smp_affinity")
}

/// An IRQ the kernel refuses to move: verify does not expect it moved.
fn unheld(j: &mut Journal, n: u32) -> Result<()> {
    Ok(j.record(&Record::Unheld {
        path: mask_path(n).into(),
        knob: "irqs".into(),
    })?)
}

pub(super) struct Irqs;

impl Step<PartitionKnobs> for Irqs {
    fn name(&self) -> &'static str {
        self.id().name()
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
                Err(e) => {
                    cx.report.skip(
                        "the kernel refused the new IRQ affinity (managed or per-CPU interrupt)",
                        format!("{n} ({e})"),
                    );
                    unheld(cx.journal, *n)?;
                }
            }
        }
        let line = format!(
            "{} of {} IRQs on the CPUs the config wants",
            cx.report.irqs_moved.len(),
            masks.len()
        );
        cx.say(line);
        Ok(())
    }

    /// IRQs the partition sends to the NRT CPUs that may fire on an RT CPU
    /// again; those the config leaves alone or sends to the RT CPUs, those
    /// steered there since (`exempt_irqs`), and those the kernel refused to
    /// move (`Unheld`: managed, per-CPU) are not looked at.
    fn verify(&self, cx: &VerifyCx<'_>) -> Vec<Drift> {
        let (host, plan) = (cx.host, &cx.applied.plan);
        let refused = drift::unheld(cx.records);
        let mut out = Vec::new();
        for n in irq::numbers(host).unwrap_or_default() {
            let skip = cx.exempt_irqs.contains(&n)
                || plan.irq_leave.contains(&n)
                || plan.irq_rt.contains(&n)
                || refused.contains(Path::new(&mask_path(n)));
            if skip {
                continue;
            }
            let Ok(aff) = irq::affinity(host, n) else {
                continue;
            };
            if aff.is_disjoint(&plan.rt) {
                continue;
            }
            out.push(Drift {
                knob: self.name(),
                what: format!("IRQ {n} may fire on CPUs {aff}"),
                fix: Fix::Irq {
                    irq: n,
                    target: plan.nrt.clone(),
                },
            });
        }
        out
    }

    fn undo(&self, cx: &mut UndoCx<'_>) -> Vec<String> {
        let mut problems = Vec::new();
        for r in cx.records.iter().rev() {
            let Record::Irqs { masks } = r else { continue };
            for (n, mask) in masks {
                match irq::raw_mask(cx.host, *n) {
                    Ok(now) if now == *mask => cx.report.irqs_restored += 1,
                    Ok(_) => match irq::write_raw_mask(cx.host, *n, mask) {
                        Ok(()) => cx.report.irqs_restored += 1,
                        Err(e) => problems.push(format!("IRQ {n}: {e}")),
                    },
                    Err(_) => {} // IRQ gone (device removed)
                }
            }
        }
        problems
    }
}

impl Knob for Irqs {
    fn id(&self) -> KnobId {
        KnobId::Irqs
    }

    fn explain(&self) -> &'static str {
        "Every interrupt's affinity goes to the NRT CPUs (McKenney §2.1: steer interrupts away \
         from the real-time CPU; DROPS §4.1: the resource manager owns interrupts), except those \
         the config leaves alone (`irq.leave`) or sends to the RT CPUs (`irq.rt`, e.g. the \
         device an RT task serves). The kernel refuses kernel-managed and per-CPU interrupts: \
         those are reported with the boot option that would move them. Reset writes every \
         raw mask back."
    }

    fn preview(&self, cx: &PreviewCx<'_>) -> KnobReport {
        let all = irq::numbers(cx.host).unwrap_or_default();
        let mut moving = Vec::new();
        let mut left = Vec::new();
        for n in &all {
            let Ok(aff) = irq::affinity(cx.host, *n) else {
                continue;
            };
            match irq_target(cx.plan, *n) {
                None => left.push(n.to_string()),
                Some(t) if &aff != t => moving.push(n.to_string()),
                Some(_) => {}
            }
        }
        let mut lines = vec![format!(
            "{} of {} IRQs steered to CPUs {} (those the kernel refuses are reported): {}",
            moving.len(),
            all.len(),
            cx.plan.nrt,
            moving.join(" ")
        )];
        if !left.is_empty() {
            lines.push(format!("left alone (irq.leave): {}", left.join(" ")));
        }
        cx.report(self.id(), lines)
    }

    /// Steer them back; their masks before apply are journalled already.
    /// One the kernel refuses now is journalled `Unheld`.
    fn repair(&self, cx: &mut RepairCx<'_>, drift: &[&Drift]) -> Result<usize> {
        let mut n = 0;
        for d in drift {
            let Fix::Irq { irq: i, target } = &d.fix else {
                continue;
            };
            match irq::set_affinity(cx.host, *i, target) {
                Ok(()) => n += 1,
                Err(e) if e.is_gone() => {}
                Err(_) => unheld(cx.journal, *i)?,
            }
        }
        Ok(n)
    }
}
