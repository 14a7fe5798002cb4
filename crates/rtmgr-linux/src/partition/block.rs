//! The block knob (issue 11: the softirq work guests cause must not land on
//! the RT CPUs; DROPS §4.2: the RT side must not take the interrupts of
//! Linux's I/O): finds the block devices whose completion interrupt is
//! kernel-managed and lands on an RT CPU, says so with the boot option that
//! would move it, and sets their `rq_affinity` to 2 so the completion work
//! runs on the CPU that submitted the I/O.

use super::files::{FileKnob, Found, Setting};
use crate::{irq, unmovable, Host};
use rtmgr_core::partition::boot::managed_irq_option;
use rtmgr_core::partition::{KnobId, PartitionPlan};
use rtmgr_core::CpuSet;
use std::path::{Path, PathBuf};

pub(super) struct Block;

/// `rq_affinity` 2: completion work runs on the CPU that submitted the I/O.
const RQ_SUBMITTER: &str = "2";

fn rq_affinity(dev: &str) -> PathBuf {
    Path::new("/sys/block").join(dev).join("queue/rq_affinity")
}

fn find(host: &Host, rt: &CpuSet) -> Found {
    let devs = unmovable::block_devices(host);
    if devs.iter().all(|d| d.rq_affinity.is_none()) {
        return Found::Absent("no block device with a queue/rq_affinity".into());
    }
    let names = irq::interrupts_table(host).unwrap_or_default();
    let mut said = Vec::new();
    let mut settings = Vec::new();
    for d in &devs {
        let Some(old) = &d.rq_affinity else { continue };
        let mut hit = false;
        for &n in &d.irqs {
            let on_rt = irq::effective(host, n)
                .map(|e| e.intersection(rt))
                .unwrap_or_default();
            let managed = irq::movable(host, n);
            if on_rt.is_empty() || managed == Some(true) {
                continue;
            }
            hit = true;
            let name = names
                .get(&n.to_string())
                .and_then(|(_, desc)| desc.split_whitespace().last())
                .unwrap_or("");
            said.push(format!(
                "{}: completion IRQ {n} {name} {} and lands on RT CPU {on_rt}; only {} at the next boot moves it",
                d.name,
                if managed.is_some() {
                    "is kernel-managed"
                } else {
                    "may be kernel-managed (only root can tell)"
                },
                managed_irq_option(rt)
            ));
        }
        if hit {
            settings.push(Setting {
                path: rq_affinity(&d.name),
                label: format!("{} rq_affinity (completions on the submitting CPU)", d.name),
                old: old.clone(),
                new: RQ_SUBMITTER.into(),
            });
        }
    }
    if settings.is_empty() {
        said.push("no block device's completion interrupt lands on an RT CPU".into());
    }
    Found::Said(said, settings)
}

impl FileKnob for Block {
    fn knob(&self) -> KnobId {
        KnobId::Block
    }

    fn reason(&self) -> &'static str {
        "A disk's completion interrupt runs its handler, and by default (rq_affinity 1) the \
         completion work too — ending the I/O, waking the waiter — on the CPU the interrupt \
         lands on when that CPU shares a cache with the submitter. A kernel-managed interrupt \
         (virtio-blk, NVMe queues) cannot be moved from user space: when it lands on an RT CPU, \
         every disk completion of the NRT load hits that CPU. rtmgr names those devices and \
         interrupts, prints the boot option that moves them (isolcpus=managed_irq), and sets \
         their rq_affinity to 2 so the completion work runs on the CPU that submitted the I/O: \
         only the interrupt itself stays on the RT CPU. Reset writes the old value back."
    }

    fn find(&self, host: &Host, plan: &PartitionPlan) -> Found {
        find(host, &plan.rt)
    }

    /// The rq_affinity files it set: `find` asks the kernel which
    /// interrupts move by writing, which verify does not.
    fn expected(&self, host: &Host, _plan: &PartitionPlan, journalled: &[&Path]) -> Vec<Setting> {
        journalled
            .iter()
            .filter_map(|p| {
                Some(Setting {
                    path: p.to_path_buf(),
                    label: format!("{} (completions on the submitting CPU)", p.display()),
                    old: host.read_opt(p)?.trim().to_string(),
                    new: RQ_SUBMITTER.into(),
                })
            })
            .collect()
    }

    /// Every device's rq_affinity, without asking the kernel which
    /// interrupts move (a snapshot writes nothing).
    fn watched_files(&self, host: &Host) -> Vec<PathBuf> {
        unmovable::block_devices(host)
            .into_iter()
            .filter(|d| d.rq_affinity.is_some())
            .map(|d| rq_affinity(&d.name))
            .collect()
    }
}
