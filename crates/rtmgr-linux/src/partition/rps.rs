//! The rps knob (issue 11: the softirq work guests cause must not land on the
//! RT CPUs; McKenney §2.1: steer interrupt work away from the real-time CPU):
//! receive packet steering of every interface, `lo` included, to the NRT CPUs,
//! and the RT CPUs out of every transmit queue's XPS map.

use super::files::{FileKnob, Found, Setting};
use crate::Host;
use rtmgr_core::partition::{KnobId, PartitionPlan};
use rtmgr_core::CpuSet;
use std::path::Path;

pub(super) struct Rps;

const NET: &str = "/sys/class/net";

/// Every rx queue's rps_cpus becomes the NRT CPUs; every tx queue's xps_cpus
/// loses the RT CPUs (a queue without XPS, mask 0, stays so).
fn find(host: &Host, rt: &CpuSet, nrt: &CpuSet) -> Found {
    let mut settings = Vec::new();
    for dev in host.list_dir(NET).unwrap_or_default() {
        let queues = Path::new(NET).join(&dev).join("queues");
        for q in host.list_dir(&queues).unwrap_or_default() {
            let file = if q.starts_with("rx-") {
                "rps_cpus"
            } else if q.starts_with("tx-") {
                "xps_cpus"
            } else {
                continue;
            };
            let path = queues.join(&q).join(file);
            let Some(old) = host.read_opt(&path).map(|t| t.trim().to_string()) else {
                continue;
            };
            let width = old.split(',').count();
            let new = match (file, CpuSet::parse_mask(&old)) {
                ("rps_cpus", _) => nrt.to_mask(width),
                (_, Ok(set)) if !set.is_empty() => set.difference(rt).to_mask(width),
                _ => old.clone(),
            };
            settings.push(Setting {
                path,
                label: format!("{dev} {q} {file}"),
                old,
                new,
            });
        }
    }
    if settings.is_empty() {
        Found::Absent(
            "no rps_cpus or xps_cpus file (a kernel without RPS/XPS, or no network interface)"
                .into(),
        )
    } else {
        Found::Files(settings)
    }
}

impl FileKnob for Rps {
    fn knob(&self) -> KnobId {
        KnobId::Rps
    }

    fn reason(&self) -> &'static str {
        "Network receive work (the NET_RX softirq: protocol processing, socket wake-ups) runs \
         where the packet arrived — for `lo`, on the CPU of the sender — unless receive packet \
         steering (RPS) sends it to the CPUs of the queue's rps_cpus; transmit completions \
         follow the queue a CPU sends on, chosen by XPS. A guest on an RT CPU that talks over \
         the network would otherwise leave that softirq work on the RT CPU. rtmgr sets \
         rps_cpus of every receive queue of every interface, `lo` included, to the NRT CPUs, \
         and takes the RT CPUs out of every transmit queue's xps_cpus (a queue without XPS \
         stays so). tuned sets neither; reset writes every old mask back."
    }

    fn find(&self, host: &Host, plan: &PartitionPlan) -> Found {
        find(host, &plan.rt, &plan.nrt)
    }
}
