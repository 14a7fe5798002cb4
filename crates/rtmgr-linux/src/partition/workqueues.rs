//! The workqueues knob (McKenney §2.1: kernel daemons off the real-time CPU;
//! tuned's realtime and cpu-partitioning profiles): the unbound-workqueue
//! cpumask, every per-queue cpumask and writeback's go to the NRT CPUs.

use super::files::{FileKnob, Found, Setting};
use crate::{cpus, Host};
use rtmgr_core::partition::{KnobId, PartitionPlan};
use rtmgr_core::CpuSet;
use std::path::{Path, PathBuf};

pub(super) struct Workqueues;

const VIRTUAL: &str = "/sys/devices/virtual/workqueue";
const BUS: &str = "/sys/bus/workqueue/devices";

/// The global mask first (a per-queue mask must fit in it), then each queue
/// once (the bus directory links to the same queues).
fn find(host: &Host, nrt: &CpuSet) -> Found {
    let mut files: Vec<(PathBuf, String)> = vec![(
        PathBuf::from(cpus::WORKQUEUE_CPUMASK),
        "unbound workqueues".into(),
    )];
    let mut seen = Vec::new();
    for dir in [VIRTUAL, BUS] {
        for name in host.list_dir(dir).unwrap_or_default() {
            let path = Path::new(dir).join(&name).join("cpumask");
            if !seen.contains(&name) && host.exists(&path) {
                files.push((path, format!("workqueue {name}")));
                seen.push(name);
            }
        }
    }
    let settings: Vec<Setting> = files
        .into_iter()
        .filter_map(|(path, label)| {
            let old = host.read_opt(&path)?.trim().to_string();
            let new = nrt.to_mask(old.split(',').count());
            Some(Setting {
                path,
                label,
                old,
                new,
            })
        })
        .collect();
    if settings.is_empty() {
        Found::Absent("no workqueue cpumask on this kernel (no WQ_SYSFS queues)".into())
    } else {
        Found::Files(settings)
    }
}

impl FileKnob for Workqueues {
    fn knob(&self) -> KnobId {
        KnobId::Workqueues
    }

    fn reason(&self) -> &'static str {
        "Kernel work queued without a CPU (unbound workqueues: writeback, block cgroup punts, \
         crypto, …) runs on the CPUs of its cpumask. tuned's realtime and cpu-partitioning \
         profiles set the global mask, every per-queue mask and writeback's to the \
         housekeeping CPUs; rtmgr sets them to the NRT CPUs (McKenney §2.1: kernel daemons off \
         the real-time CPU), journalled, and reset writes each old mask back — which tuned \
         cannot promise. Work bound to a CPU (per-CPU kworkers) cannot move."
    }

    fn find(&self, host: &Host, plan: &PartitionPlan) -> Found {
        find(host, &plan.nrt)
    }
}
