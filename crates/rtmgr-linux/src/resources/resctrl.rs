//! The cache partition through resctrl (DROPS §4.4's page colouring, done by
//! today's Intel CAT / AMD L3 QoS): a resctrl group `rtmgr-rt` holds the RT
//! CPUs (`cpus_list`) and the granted threads (`tasks`) with the RT ways in
//! its `schemata`; the default group keeps the NRT ways. Detected live; where
//! the kernel or the CPU has none, says why. The split itself is pure
//! (`rtmgr_core::resources::cache`).

use super::knobs::{self, Held};
use crate::host::{Host, HostError};
use crate::journal::Journal;
use rtmgr_core::partition::ResourceKnobId;
use rtmgr_core::resources::cache::{self, CacheSplit};
use rtmgr_core::CpuSet;
use std::path::{Path, PathBuf};

pub const RESCTRL: &str = "/sys/fs/resctrl";
pub const GROUP: &str = "rtmgr-rt";

/// What the cache partition will be here.
#[derive(Debug, Clone, PartialEq)]
pub enum CachePlan {
    /// No `rt_cache_share` configured.
    Off,
    /// Configured, but this machine cannot: why.
    Unavailable(String),
    Split {
        split: CacheSplit,
        domains: Vec<u32>,
    },
}

/// Why there is no cache partition here, or the L3's full mask, minimum
/// ways and domains.
pub fn detect(host: &Host) -> Result<(u64, u32, Vec<u32>), String> {
    let root = Path::new(RESCTRL);
    if !host.exists(root.join("schemata")) {
        let cpu = host.read_opt("/proc/cpuinfo").unwrap_or_default();
        let flags = ["cat_l3", "rdt_a"];
        let has = flags
            .iter()
            .any(|f| cpu.split_whitespace().any(|w| w == *f));
        return Err(if has {
            format!("{RESCTRL} is not mounted (the CPU has L3 allocation: mount -t resctrl resctrl {RESCTRL})")
        } else {
            format!("no {RESCTRL}: the CPU (or this virtual machine) offers no L3 cache allocation (no cat_l3 / rdt_a flag in /proc/cpuinfo)")
        });
    }
    let info = root.join("info/L3");
    let cbm = host
        .read_opt(info.join("cbm_mask"))
        .ok_or_else(|| format!("{RESCTRL} has no L3 allocation (no info/L3/cbm_mask)"))
        .and_then(|m| cache::parse_mask(&m))?;
    let min_bits = host
        .read_opt(info.join("min_cbm_bits"))
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1);
    let domains = cache::l3_domains(
        &host
            .read(root.join("schemata"))
            .map_err(|e| e.to_string())?,
    )?;
    Ok((cbm, min_bits, domains))
}

/// The plan for `share`; Err only for a share this machine's L3 cannot split.
pub fn plan(host: &Host, share: Option<f64>) -> Result<CachePlan, String> {
    let Some(share) = share else {
        return Ok(CachePlan::Off);
    };
    let (cbm, min_bits, domains) = match detect(host) {
        Ok(d) => d,
        Err(why) => return Ok(CachePlan::Unavailable(why)),
    };
    if host.exists(Path::new(RESCTRL).join(GROUP)) {
        return Err(format!(
            "resctrl group {RESCTRL}/{GROUP} exists already (left by another tool?); remove it (rmdir) first"
        ));
    }
    let split = cache::split(cbm, min_bits, share)
        .map_err(|e| format!("[resources] rt_cache_share: {e}"))?;
    Ok(CachePlan::Split { split, domains })
}

/// Journal, then create the RT group with the RT ways and CPUs and give the
/// default group the NRT ways (the `cache` knob). Returns the group's
/// machine path and what the knob keeps.
pub fn apply(
    host: &Host,
    j: &mut Journal,
    split: &CacheSplit,
    domains: &[u32],
    rt_cpus: &CpuSet,
) -> Result<(PathBuf, Vec<Held>), HostError> {
    let root = Path::new(RESCTRL);
    let group = root.join(GROUP);
    let nrt = [(root.join("schemata"), cache::l3_line(domains, split.nrt))];
    let rt = [
        (group.join("schemata"), cache::l3_line(domains, split.rt)),
        (group.join("cpus_list"), rt_cpus.to_list()),
    ];
    let mut held = Vec::new();
    let plan = (&nrt[..], Some((group.as_path(), &rt[..])));
    knobs::put(host, j, ResourceKnobId::Cache, plan, &mut held)?;
    Ok((group, held))
}

/// The status line of a split.
pub fn describe(split: &CacheSplit) -> String {
    format!(
        "L3: RT CPUs and clients {} of {} ways (mask {:x}, resctrl group {GROUP}), NRT the other {} (mask {:x})",
        split.rt_ways,
        split.total_ways,
        split.rt,
        split.total_ways - split.rt_ways,
        split.nrt
    )
}
