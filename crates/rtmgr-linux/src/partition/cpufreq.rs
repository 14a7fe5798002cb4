//! The cpufreq knob (tuned's latency-performance profile, under realtime
//! through network-latency: `governor=performance`): the performance
//! frequency governor on the RT CPUs only.

use super::files::{FileKnob, Found, Setting};
use crate::Host;
use rtmgr_core::partition::{KnobId, PartitionPlan};
use rtmgr_core::CpuSet;
use std::path::PathBuf;

pub(super) struct Cpufreq;

const WANTED: &str = "performance";

fn find(host: &Host, rt: &CpuSet) -> Found {
    let mut settings = Vec::new();
    let mut said = Vec::new();
    for cpu in rt.iter() {
        let dir = PathBuf::from(format!("/sys/devices/system/cpu/cpu{cpu}/cpufreq"));
        let path = dir.join("scaling_governor");
        let Some(old) = host.read_opt(&path) else {
            continue;
        };
        let available = host
            .read_opt(dir.join("scaling_available_governors"))
            .unwrap_or_default();
        if available.split_whitespace().any(|g| g == WANTED) {
            settings.push(Setting {
                path,
                label: format!("cpu{cpu} scaling_governor"),
                old: old.trim().to_string(),
                new: WANTED.into(),
            });
        } else {
            said.push(format!(
                "cpu{cpu}: no {WANTED} governor (available: {})",
                available.trim()
            ));
        }
    }
    if settings.is_empty() && said.is_empty() {
        Found::Absent(
            "no cpufreq on the RT CPUs (no frequency-scaling driver, as usual in a VM)".into(),
        )
    } else {
        Found::Said(said, settings)
    }
}

impl FileKnob for Cpufreq {
    fn knob(&self) -> KnobId {
        KnobId::Cpufreq
    }

    fn reason(&self) -> &'static str {
        "A frequency governor lowers the clock of an idle or lightly loaded CPU; an RT task \
         woken there runs slowly until the governor notices, and some changes stall the CPU \
         while they happen. tuned's latency-performance profile, under realtime through \
         network-latency, sets the performance governor everywhere; rtmgr sets it on the RT \
         CPUs only, for the partition's lifetime. Reset restores each CPU's old governor."
    }

    fn find(&self, host: &Host, plan: &PartitionPlan) -> Found {
        find(host, &plan.rt)
    }
}
