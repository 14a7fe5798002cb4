//! Status item `cache_allocation` (DROPS §4.4: the RT working set keeps cache
//! the time-sharing side cannot evict — page colouring then, resctrl's L3
//! allocation, Intel CAT / AMD L3 QoS, now): whether resctrl is mounted or
//! mountable, the L3's CLOS count and ways, and what the daemon's
//! `[resources] rt_cache_share` would do on this machine.

use super::{item, Item, Verdict};
use crate::daemon::config::DEFAULT_CONFIG;
use crate::daemon::ServeConfig;
use crate::host::Host;
use crate::resources::resctrl::{self, CachePlan, RESCTRL};
use rtmgr_core::resources::cache;
use serde::Serialize;
use std::path::Path;

/// What the machine offers for cache allocation (JSON `cache_allocation`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CacheAllocation {
    /// "mounted", "mountable" (kernel and CPU have it), "no-cpu-support"
    /// (the kernel has resctrl, the CPU or VM no L3 allocation) or "absent".
    pub resctrl: &'static str,
    /// The CPU flags of L3 allocation found (cat_l3, rdt_a).
    pub cpu_flags: Vec<String>,
    /// L3 classes of service (resctrl groups possible), when mounted.
    pub num_closids: Option<u32>,
    /// L3 ways (bits of cbm_mask), its mask, and the fewest a group may have.
    pub ways: Option<u32>,
    pub cbm_mask: Option<String>,
    pub min_cbm_bits: Option<u32>,
    /// The L3 domains (one per cache instance).
    pub domains: Vec<u32>,
    /// The daemon config's `[resources] rt_cache_share`, if any.
    pub daemon_share: Option<f64>,
    /// What the daemon's cache split would do here.
    pub daemon_split: String,
}

/// Look at this machine and the daemon's config at its default path.
pub fn cache_allocation(host: &Host) -> CacheAllocation {
    let config = host
        .read_opt(DEFAULT_CONFIG)
        .map(|text| ServeConfig::from_toml(&text).map(|c| c.resources.rt_cache_share));
    cache_allocation_with(host, config)
}

/// `config`: None when there is no daemon config, else its rt_cache_share
/// or why it does not parse.
fn cache_allocation_with(
    host: &Host,
    config: Option<Result<Option<f64>, String>>,
) -> CacheAllocation {
    let root = Path::new(RESCTRL);
    let cpuinfo = host.read_opt("/proc/cpuinfo").unwrap_or_default();
    let cpu_flags: Vec<String> = ["cat_l3", "rdt_a"]
        .iter()
        .filter(|f| cpuinfo.split_whitespace().any(|w| w == **f))
        .map(|f| f.to_string())
        .collect();
    let in_kernel = host.read_opt("/proc/filesystems").is_some_and(|t| {
        t.lines()
            .any(|l| l.split_whitespace().last() == Some("resctrl"))
    });
    let mounted = host.exists(root.join("schemata"));
    let l3 = root.join("info/L3");
    let read_u32 = |f: &str| {
        host.read_opt(l3.join(f))
            .and_then(|s| s.trim().parse().ok())
    };
    let cbm = host.read_opt(l3.join("cbm_mask"));
    let ways = cbm
        .as_deref()
        .and_then(|m| cache::parse_mask(m).ok())
        .map(u64::count_ones);
    let domains = host
        .read_opt(root.join("schemata"))
        .and_then(|s| cache::l3_domains(&s).ok())
        .unwrap_or_default();
    let resctrl = if mounted {
        "mounted"
    } else if in_kernel && !cpu_flags.is_empty() {
        "mountable"
    } else if in_kernel {
        "no-cpu-support"
    } else {
        "absent"
    };
    let (daemon_share, daemon_split) = match config {
        None => (
            None,
            format!("no daemon config at {DEFAULT_CONFIG}: the daemon splits no cache unless [resources] rt_cache_share is set"),
        ),
        Some(Err(e)) => (None, format!("the daemon config {DEFAULT_CONFIG} does not parse: {e}")),
        Some(Ok(None)) => (
            None,
            "the daemon's config sets no [resources] rt_cache_share: it splits no cache".into(),
        ),
        Some(Ok(Some(share))) => (
            Some(share),
            match resctrl::plan(host, Some(share)) {
                Ok(CachePlan::Split { split, .. }) => {
                    format!("the daemon's rt_cache_share {share} would give {}", resctrl::describe(&split))
                }
                Ok(CachePlan::Unavailable(why)) => format!(
                    "the daemon's rt_cache_share {share} cannot be done here ({why}): it starts without a cache partition, and its grants say so"
                ),
                Ok(CachePlan::Off) => "the daemon splits no cache".into(),
                Err(e) => format!("the daemon's rt_cache_share {share} cannot split this L3: {e}; it would refuse to start"),
            },
        ),
    };
    CacheAllocation {
        resctrl,
        cpu_flags,
        num_closids: read_u32("num_closids"),
        ways,
        cbm_mask: cbm.map(|m| m.trim().to_string()),
        min_cbm_bits: read_u32("min_cbm_bits"),
        domains,
        daemon_share,
        daemon_split,
    }
}

/// The item: ok when the L3 can be partitioned now, a warning otherwise.
pub(super) fn cache_item(c: &CacheAllocation) -> Item {
    const NAME: &str = "cache_allocation";
    let shared = "RT and time-sharing work share the whole L3: a cache-thrashing neighbour can evict the RT working set and lengthen its runs (DROPS §4.4)";
    let (verdict, machine, why) = match (c.resctrl, c.ways) {
        ("mounted", Some(ways)) => (
            Verdict::Ok,
            format!(
                "resctrl mounted at {RESCTRL}: L3 allocation with {} CLOS, {ways} ways (cbm_mask {}, at least {} per group), {} domain(s)",
                c.num_closids.map_or("?".into(), |n| n.to_string()),
                c.cbm_mask.as_deref().unwrap_or("?"),
                c.min_cbm_bits.unwrap_or(1),
                c.domains.len()
            ),
            String::new(),
        ),
        ("mounted", None) => (
            Verdict::Warn,
            format!("resctrl mounted at {RESCTRL}, but without L3 allocation (no info/L3/cbm_mask)"),
            shared.to_string(),
        ),
        ("mountable", _) => (
            Verdict::Warn,
            format!(
                "resctrl not mounted, but mountable: the kernel has it and the CPU has {} (mount -t resctrl resctrl {RESCTRL})",
                c.cpu_flags.join(", ")
            ),
            format!("mount it so the daemon can split the L3; until then {shared}"),
        ),
        ("no-cpu-support", _) => (
            Verdict::Warn,
            "not available: the kernel has resctrl, but the CPU (or this virtual machine) offers no L3 cache allocation (no cat_l3 / rdt_a flag in /proc/cpuinfo)".to_string(),
            shared.to_string(),
        ),
        _ => (
            Verdict::Warn,
            format!(
                "not available: no resctrl filesystem in this kernel (/proc/filesystems) and no {RESCTRL}; {}",
                if c.cpu_flags.is_empty() {
                    "the CPU (or this virtual machine) offers no L3 cache allocation either (no cat_l3 / rdt_a flag)".to_string()
                } else {
                    format!("the CPU has {} (a kernel with CONFIG_X86_CPU_RESCTRL would use it)", c.cpu_flags.join(", "))
                }
            ),
            shared.to_string(),
        ),
    };
    item(NAME, verdict, format!("{machine}; {}", c.daemon_split), why)
}

#[cfg(test)]
mod tests;
