//! Snapshots of what can disturb a measured CPU (docs/architecture.md "Measuring"): IRQ and
//! softirq counters and hypervisor steal time, taken before and after a run and
//! turned into per-CPU deltas with the top sources named (crate::procstat).

use crate::procstat::{deltas, parse_counters, parse_steal, CounterTable};
use crate::report::{CpuSteal, Disturbance};
use rtmgr_linux::Host;
use std::collections::BTreeMap;

/// Largest sources named per CPU.
pub const TOP_SOURCES: usize = 4;

#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    interrupts: CounterTable,
    softirqs: CounterTable,
    steal_ticks: BTreeMap<u32, u64>,
}

pub fn snapshot(host: &Host) -> Snapshot {
    Snapshot {
        interrupts: parse_counters(&host.read_opt("/proc/interrupts").unwrap_or_default()),
        softirqs: parse_counters(&host.read_opt("/proc/softirqs").unwrap_or_default()),
        steal_ticks: parse_steal(&host.read_opt("/proc/stat").unwrap_or_default()),
    }
}

fn ns_per_tick() -> u64 {
    1_000_000_000u64
        .checked_div(rtmgr_sys::time::clock_ticks_per_second())
        .unwrap_or(10_000_000)
}

/// What happened on `cpus` between two snapshots.
pub fn between(before: &Snapshot, after: &Snapshot, cpus: &[u32]) -> Disturbance {
    let tick = ns_per_tick();
    Disturbance {
        steal: cpus
            .iter()
            .filter_map(|c| {
                let a = after.steal_ticks.get(c)?;
                let b = before.steal_ticks.get(c).copied().unwrap_or(0);
                Some(CpuSteal {
                    cpu: *c,
                    steal_ns: a.saturating_sub(b) * tick,
                })
            })
            .collect(),
        interrupts: deltas(&before.interrupts, &after.interrupts, cpus, TOP_SOURCES),
        softirqs: deltas(&before.softirqs, &after.softirqs, cpus, TOP_SOURCES),
    }
}

/// Add `b` into `a` (evaluate sums its segments).
pub fn accumulate(a: &mut Disturbance, b: &Disturbance) {
    for s in &b.steal {
        match a.steal.iter_mut().find(|x| x.cpu == s.cpu) {
            Some(x) => x.steal_ns += s.steal_ns,
            None => a.steal.push(s.clone()),
        }
    }
    for (dst, src) in [
        (&mut a.interrupts, &b.interrupts),
        (&mut a.softirqs, &b.softirqs),
    ] {
        for e in src {
            match dst.iter_mut().find(|x| x.cpu == e.cpu) {
                Some(x) => {
                    x.total += e.total;
                    for s in &e.top {
                        match x.top.iter_mut().find(|t| t.source == s.source) {
                            Some(t) => t.count += s.count,
                            None => x.top.push(s.clone()),
                        }
                    }
                    x.top
                        .sort_by(|p, q| q.count.cmp(&p.count).then(p.source.cmp(&q.source)));
                    x.top.truncate(TOP_SOURCES);
                }
                None => dst.push(e.clone()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn real_snapshots_give_deltas_for_online_cpus() {
        let host = Host::real();
        let a = snapshot(&host);
        std::thread::sleep(std::time::Duration::from_millis(30));
        let b = snapshot(&host);
        let d = between(&a, &b, &[0]);
        assert_eq!(d.interrupts.len(), 1);
        assert_eq!(d.steal.len(), 1);
        let mut sum = d.clone();
        accumulate(&mut sum, &d);
        assert_eq!(sum.interrupts[0].total, 2 * d.interrupts[0].total);
    }
}
