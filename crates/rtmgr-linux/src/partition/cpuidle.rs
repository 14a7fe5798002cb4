//! The cpuidle knob (tuned's latency-performance profile, under realtime
//! through network-latency: `force_latency=cstate.id_no_zero:1`; docs/architecture.md
//! "Measuring": deep C-state exits cost tens to hundreds of µs): the idle
//! states deeper than C1 disabled on the RT CPUs only.

use super::files::{FileKnob, Found, Setting};
use crate::Host;
use rtmgr_core::partition::{KnobId, PartitionPlan};
use rtmgr_core::CpuSet;
use std::path::{Path, PathBuf};

pub(super) struct Cpuidle;

/// A CPU's idle states: (directory, name, exit latency in µs), by index.
fn states(host: &Host, cpu: u32) -> Vec<(PathBuf, String, u64)> {
    let dir = PathBuf::from(format!("/sys/devices/system/cpu/cpu{cpu}/cpuidle"));
    let mut out: Vec<(u32, PathBuf, String, u64)> = host
        .list_dir(&dir)
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| {
            let index: u32 = n.strip_prefix("state")?.parse().ok()?;
            let d = dir.join(&n);
            let latency = host.read_opt(d.join("latency"))?.trim().parse().ok()?;
            let name = host.read_opt(d.join("name")).unwrap_or_default();
            Some((index, d, name.trim().to_string(), latency))
        })
        .collect();
    out.sort_by_key(|s| s.0);
    out.into_iter().map(|(_, d, n, l)| (d, n, l)).collect()
}

/// Every state slower to leave than the first one that is not polling (C1).
fn find(host: &Host, rt: &CpuSet) -> Found {
    let mut settings = Vec::new();
    for cpu in rt.iter() {
        let all = states(host, cpu);
        let c1 = all.iter().map(|s| s.2).find(|l| *l > 0).unwrap_or(0);
        for (dir, name, latency) in all.into_iter().filter(|s| s.2 > c1) {
            let path = dir.join("disable");
            if let Some(old) = host.read_opt(&path) {
                settings.push(Setting {
                    path,
                    label: format!("cpu{cpu} {name} ({latency} µs to leave) disable"),
                    old: old.trim().to_string(),
                    new: "1".into(),
                });
            }
        }
    }
    if !settings.is_empty() {
        return Found::Files(settings);
    }
    let driver = host
        .read_opt(Path::new("/sys/devices/system/cpu/cpuidle/current_driver"))
        .map(|d| d.trim().to_string())
        .unwrap_or_else(|| "none".into());
    Found::Absent(format!(
        "no idle state deeper than C1 on the RT CPUs (cpuidle driver: {driver})"
    ))
}

impl FileKnob for Cpuidle {
    fn knob(&self) -> KnobId {
        KnobId::Cpuidle
    }

    fn reason(&self) -> &'static str {
        "An idle CPU sleeps in the idle state its governor picks; leaving a deep one (C6 and \
         beyond) takes tens to hundreds of µs before the woken RT task runs. tuned's \
         latency-performance profile, under realtime through network-latency, keeps every CPU \
         out of the states deeper than C1 with a PM QoS request, and `rtmgr measure` holds \
         /dev/cpu_dma_latency at 0 while it measures. This knob disables the states deeper \
         than C1 on the RT CPUs only, for the partition's lifetime, so the NRT CPUs still save \
         power. Reset re-enables exactly what it disabled."
    }

    fn find(&self, host: &Host, plan: &PartitionPlan) -> Found {
        find(host, &plan.rt)
    }
}
