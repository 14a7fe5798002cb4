//! A snapshot of everything a partition may change (IRQ masks, default IRQ
//! affinity, workqueue mask, every control file a knob watches, cpuset root
//! flags, rtmgr cgroups, every task's cpuset and affinity), so tests can assert
//! that `reset` gave the machine back exactly (docs/architecture.md: every change can be
//! undone exactly).

use crate::host::Host;
use crate::{cgroup, cpus, irq, partition, tasks};
use std::collections::BTreeMap;

/// Key → value; tasks are keyed by (tid, start time) so a reused tid never matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineState {
    pub system: BTreeMap<String, String>,
    pub tasks: BTreeMap<(u32, u64), (String, String)>,
}

/// Threads whose affinity the kernel sets by itself: IRQ threads follow their
/// interrupt's effective affinity, which the kernel chooses.
fn kernel_managed(comm: &str) -> bool {
    comm.starts_with("irq/")
}

pub fn capture(host: &Host) -> MachineState {
    let mut system = BTreeMap::new();
    for n in irq::numbers(host).unwrap_or_default() {
        if let Ok(m) = irq::raw_mask(host, n) {
            system.insert(format!("irq {n}"), m);
        }
    }
    system.insert(
        "default_smp_affinity".into(),
        irq::default_affinity_raw(host).unwrap_or_default(),
    );
    system.insert(
        "workqueue cpumask".into(),
        host.read_opt(cpus::WORKQUEUE_CPUMASK)
            .unwrap_or_default()
            .trim()
            .into(),
    );
    for f in partition::watched_files(host) {
        if let Some(v) = host.read_opt(&f) {
            system.insert(f.display().to_string(), v.trim().into());
        }
    }
    let layout = partition::layout(host).ok();
    if let Some(l) = &layout {
        let m = l.mount();
        for f in ["cpuset.sched_load_balance", "cgroup.subtree_control"] {
            if let Some(v) = host.read_opt(m.join(f)) {
                system.insert(f.into(), v.trim().into());
            }
        }
        let ours: Vec<String> = host
            .list_dir(m)
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.contains(partition::CGROUP_PREFIX))
            .collect();
        system.insert("rtmgr cgroups".into(), ours.join(" "));
    }
    let mut task_map = BTreeMap::new();
    for t in tasks::all(host).unwrap_or_default() {
        let aff = if kernel_managed(&t.comm) {
            "(kernel-managed)".to_string()
        } else {
            match host.get_affinity(t.tid) {
                Ok(a) => a.to_list(),
                Err(_) => continue,
            }
        };
        let cg = layout
            .as_ref()
            .and_then(|l| cgroup::task_cgroup(host, l, t.tid))
            .unwrap_or_default();
        // The comm is not compared: kernel workers rename themselves as they work.
        task_map.insert(
            (t.tid, t.start_time),
            (t.comm, format!("aff={aff} cpuset={cg}")),
        );
    }
    MachineState {
        system,
        tasks: task_map,
    }
}

impl MachineState {
    /// Differences with a later state, over what both contain (tasks that
    /// started or ended in between are not differences). Empty = identical.
    pub fn diff(&self, later: &MachineState) -> Vec<String> {
        let mut out = Vec::new();
        for (k, v) in &self.system {
            let w = later
                .system
                .get(k)
                .map(String::as_str)
                .unwrap_or("(absent)");
            if v != w {
                out.push(format!("{k}: {v} -> {w}"));
            }
        }
        for (k, v) in &later.system {
            if !self.system.contains_key(k) {
                out.push(format!("{k}: (absent) -> {v}"));
            }
        }
        for (k, v) in &self.tasks {
            if let Some(w) = later.tasks.get(k) {
                if v.1 != w.1 {
                    out.push(format!("task {} ({}): {} -> {}", k.0, v.0, v.1, w.1));
                }
            }
        }
        out
    }
}
