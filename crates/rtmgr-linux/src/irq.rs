//! Interrupt affinity (McKenney §2.1: steer interrupts away from real-time CPUs;
//! ARTiS §2.4: the setup fixes the affinity of interrupts towards processors).
//! Reads /proc/irq/*/smp_affinity{,_list}, effective_affinity_list,
//! /proc/irq/default_smp_affinity and the names in /proc/interrupts.

use crate::host::{Host, Result};
use rtmgr_core::CpuSet;
use std::collections::BTreeMap;

pub const DEFAULT_AFFINITY: &str = "/proc/irq/default_smp_affinity";

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IrqInfo {
    pub irq: u32,
    pub name: String,
    pub affinity: CpuSet,
    pub effective: Option<CpuSet>,
    /// Interrupts taken per CPU since boot (index = CPU number).
    pub counts: Vec<u64>,
}

/// IRQ numbers that have a directory in /proc/irq.
pub fn numbers(host: &Host) -> Result<Vec<u32>> {
    let mut v: Vec<u32> = host
        .list_dir("/proc/irq")?
        .iter()
        .filter_map(|n| n.parse().ok())
        .collect();
    v.sort_unstable();
    Ok(v)
}

fn affinity_path(irq: u32) -> String {
    format!("/proc/irq/{irq}/smp_affinity")
}

/// The raw mask text, exactly as the kernel prints it (what the journal keeps).
pub fn raw_mask(host: &Host, irq: u32) -> Result<String> {
    Ok(host.read(affinity_path(irq))?.trim().to_string())
}

pub fn affinity(host: &Host, irq: u32) -> Result<CpuSet> {
    let raw = raw_mask(host, irq)?;
    CpuSet::parse_mask(&raw).map_err(|e| host.parse_err(affinity_path(irq), e.to_string()))
}

/// Write a raw mask back (used to restore exactly what was there).
pub fn write_raw_mask(host: &Host, irq: u32, mask: &str) -> Result<()> {
    host.write(affinity_path(irq), mask)
}

/// Steer an IRQ to a set of CPUs.
pub fn set_affinity(host: &Host, irq: u32, cpus: &CpuSet) -> Result<()> {
    host.write(
        format!("/proc/irq/{irq}/smp_affinity_list"),
        &cpus.to_list(),
    )
}

pub fn effective(host: &Host, irq: u32) -> Option<CpuSet> {
    host.read_opt(format!("/proc/irq/{irq}/effective_affinity_list"))
        .and_then(|t| CpuSet::parse_list(&t).ok())
}

/// May user space move this IRQ? Asked by writing a list that does not parse:
/// the kernel refuses it with EINVAL after it checked that the IRQ may be moved
/// at all, and with EIO or EPERM before (kernel-managed and per-CPU
/// interrupts). Nothing changes either way. None when this process may not
/// ask (not root) or the IRQ is gone.
pub fn movable(host: &Host, irq: u32) -> Option<bool> {
    if !host.privileged() {
        return None;
    }
    match host.write(
        format!("/proc/irq/{irq}/smp_affinity_list"),
        "not-a-cpu-list",
    ) {
        Err(e) if e.is_gone() => None,
        Err(e) => Some(e.errno() == Some(libc::EINVAL)),
        Ok(()) => Some(true),
    }
}

pub fn default_affinity_raw(host: &Host) -> Result<String> {
    Ok(host.read(DEFAULT_AFFINITY)?.trim().to_string())
}

/// Per-IRQ names and per-CPU counts from /proc/interrupts. Keys are the first
/// column: numbers for device IRQs, mnemonics (LOC, RES, …) for the rest.
pub fn interrupts_table(host: &Host) -> Result<BTreeMap<String, (Vec<u64>, String)>> {
    let text = host.read("/proc/interrupts")?;
    Ok(parse_counter_table(&text))
}

/// Parse /proc/interrupts or /proc/softirqs: a header of CPU names, then rows
/// `KEY: count count … description`.
pub fn parse_counter_table(text: &str) -> BTreeMap<String, (Vec<u64>, String)> {
    let mut lines = text.lines();
    let ncpu = lines
        .next()
        .map(|h| {
            h.split_whitespace()
                .filter(|w| w.starts_with("CPU"))
                .count()
        })
        .unwrap_or(0);
    let mut out = BTreeMap::new();
    for line in lines {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let mut counts = Vec::with_capacity(ncpu);
        for _ in 0..ncpu {
            match words.clone().next().and_then(|w| w.parse::<u64>().ok()) {
                Some(v) => {
                    counts.push(v);
                    words.next();
                }
                None => break,
            }
        }
        let desc = words.collect::<Vec<_>>().join(" ");
        out.insert(key.trim().to_string(), (counts, desc));
    }
    out
}

/// Everything about every IRQ, for `status` and reports.
pub fn all(host: &Host) -> Result<Vec<IrqInfo>> {
    let table = interrupts_table(host).unwrap_or_default();
    let mut out = Vec::new();
    for irq in numbers(host)? {
        let Ok(aff) = affinity(host, irq) else {
            continue;
        };
        let (counts, name) = table.get(&irq.to_string()).cloned().unwrap_or_default();
        out.push(IrqInfo {
            irq,
            name,
            affinity: aff,
            effective: effective(host, irq),
            counts,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeMachine;

    #[test]
    fn managed_irqs_refuse_the_probe_and_nothing_changes() {
        let m = FakeMachine::new(2).managed_irq(36, 1, 100).build();
        let host = m.host();
        let before = raw_mask(&host, 41).unwrap();
        assert_eq!(movable(&host, 36), Some(false));
        assert_eq!(movable(&host, 41), Some(true));
        assert_eq!(movable(&host, 99), None);
        assert_eq!(raw_mask(&host, 41).unwrap(), before);
        assert_eq!(effective(&host, 36).unwrap().to_list(), "1");
    }

    #[test]
    fn the_probe_changes_nothing_on_this_machine() {
        let host = Host::real();
        if !host.privileged() {
            eprintln!("skip: needs root to probe IRQ affinity");
            return;
        }
        for n in numbers(&host).unwrap() {
            let (aff, eff) = (raw_mask(&host, n).ok(), effective(&host, n));
            let _ = movable(&host, n);
            assert_eq!(raw_mask(&host, n).ok(), aff, "IRQ {n} mask changed");
            assert_eq!(
                effective(&host, n),
                eff,
                "IRQ {n} effective affinity changed"
            );
        }
    }

    #[test]
    fn parses_interrupt_table() {
        let text = "           CPU0       CPU1       \n 24:          1          0  IO-APIC   5-edge      ACPI:Ged\nLOC:       7424       9345   Local timer interrupts\nERR:          0\n";
        let t = parse_counter_table(text);
        assert_eq!(t["24"].0, vec![1, 0]);
        assert_eq!(t["24"].1, "IO-APIC 5-edge ACPI:Ged");
        assert_eq!(t["LOC"].0, vec![7424, 9345]);
        assert_eq!(t["ERR"].0, vec![0]);
    }
}
