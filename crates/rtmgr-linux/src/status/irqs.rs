//! Status items about interrupts and per-CPU kernel threads (McKenney §2.1:
//! steer interrupts away; DROPS §4.2): every IRQ with its affinity, and the
//! kernel threads that cannot leave their CPU.

use super::{item, IrqStatus, Item, Verdict};
use crate::host::Host;
use crate::irq;
use std::collections::BTreeMap;

pub(super) fn irq_status(host: &Host) -> Vec<IrqStatus> {
    irq::all(host)
        .unwrap_or_default()
        .into_iter()
        .map(|i| {
            // Root asks the kernel (managed and per-CPU interrupts refuse);
            // otherwise: the timer cascade IRQs 0 and 2 on x86 never move.
            let movable = match irq::movable(host, i.irq) {
                Some(true) => "yes",
                Some(false) => "no (kernel-managed)",
                None if i.irq == 0 || i.irq == 2 || i.name.contains("timer") => "no",
                None => "yes (unless kernel-managed)",
            };
            IrqStatus {
                irq: i.irq,
                total: i.counts.iter().sum(),
                name: i.name,
                affinity: i.affinity.to_list(),
                effective: i.effective.map(|e| e.to_list()),
                movable,
            }
        })
        .collect()
}

pub(super) fn irq_item(irqs: &[IrqStatus]) -> Item {
    let everywhere = irqs.iter().filter(|i| i.movable.starts_with("yes")).count();
    item(
        "irqs",
        if everywhere > 0 { Verdict::Warn } else { Verdict::Ok },
        format!("{} device IRQs, {everywhere} movable", irqs.len()),
        "an interrupt handled on an RT CPU delays the RT task by the handler's run time; a partition steers them to NRT CPUs",
    )
}

pub(super) fn pinned_kthreads(host: &Host) -> BTreeMap<u32, Vec<String>> {
    crate::unmovable::pinned_kthreads(host)
        .into_iter()
        .map(|(cpu, list)| (cpu, list.into_iter().map(|t| t.comm).collect()))
        .collect()
}

pub(super) fn kthread_item(pinned: &BTreeMap<u32, Vec<String>>) -> Item {
    let per_cpu: Vec<String> = pinned
        .iter()
        .map(|(c, v)| format!("cpu{c}: {}", v.len()))
        .collect();
    item(
        "per_cpu_kthreads",
        Verdict::Ok,
        per_cpu.join(", "),
        "per-CPU kernel threads (ksoftirqd, kworker, migration, cpuhp) cannot leave their CPU; they run only when that CPU has work for them",
    )
}
