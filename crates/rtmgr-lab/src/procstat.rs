//! Disturbance attribution (docs/architecture.md "Measuring": what disturbed the run; McKenney
//! §2.1: IRQs on the measured CPU): parsers for `/proc/interrupts`, `/proc/softirqs`
//! and the per-CPU lines of `/proc/stat`, and the per-CPU deltas with the top
//! sources named. Pure text processing; rtmgr-linux reads the files.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Per-CPU counters by source, as in `/proc/interrupts` or `/proc/softirqs`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CounterTable {
    /// CPU number of each column.
    pub cpus: Vec<u32>,
    /// Source name → count per column.
    pub rows: BTreeMap<String, Vec<u64>>,
}

/// Parse `/proc/interrupts` or `/proc/softirqs`: a header of `CPUn` columns, then
/// `NAME: c0 c1 … [description]`. Numeric IRQs are named "IRQ (device)".
pub fn parse_counters(text: &str) -> CounterTable {
    let mut lines = text.lines();
    let cpus: Vec<u32> = lines
        .next()
        .unwrap_or("")
        .split_whitespace()
        .filter_map(|c| c.strip_prefix("CPU")?.parse().ok())
        .collect();
    let mut rows = BTreeMap::new();
    for line in lines {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        let mut toks = rest.split_whitespace().peekable();
        let mut counts = Vec::with_capacity(cpus.len());
        while counts.len() < cpus.len() {
            match toks.peek().and_then(|t| t.parse::<u64>().ok()) {
                Some(v) => {
                    counts.push(v);
                    toks.next();
                }
                None => break,
            }
        }
        if counts.is_empty() {
            continue;
        }
        counts.resize(cpus.len(), 0);
        let desc: Vec<&str> = toks.collect();
        let label = if name.chars().all(|c| c.is_ascii_digit()) {
            match desc.last() {
                Some(dev) => format!("{name} ({dev})"),
                None => name.to_string(),
            }
        } else {
            name.to_string()
        };
        rows.insert(label, counts);
    }
    CounterTable { cpus, rows }
}

/// One named source and how many events it caused during the run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceCount {
    pub source: String,
    pub count: u64,
}

/// Events on one CPU during the run, total and the largest sources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuEvents {
    pub cpu: u32,
    pub total: u64,
    pub top: Vec<SourceCount>,
}

/// Per-CPU deltas between two snapshots for `cpus`, with the `top_n` largest
/// sources named. Sources that appear only in `after` count from zero; counter
/// wrap-around (or a vanished source) counts as zero.
pub fn deltas(
    before: &CounterTable,
    after: &CounterTable,
    cpus: &[u32],
    top_n: usize,
) -> Vec<CpuEvents> {
    let mut out = Vec::new();
    for &cpu in cpus {
        let Some(col_a) = after.cpus.iter().position(|&c| c == cpu) else {
            continue;
        };
        let col_b = before.cpus.iter().position(|&c| c == cpu);
        let mut srcs: Vec<SourceCount> = after
            .rows
            .iter()
            .map(|(name, counts)| {
                let b = col_b
                    .and_then(|i| before.rows.get(name).and_then(|r| r.get(i)))
                    .copied()
                    .unwrap_or(0);
                SourceCount {
                    source: name.clone(),
                    count: counts[col_a].saturating_sub(b),
                }
            })
            .filter(|s| s.count > 0)
            .collect();
        srcs.sort_by(|a, b| b.count.cmp(&a.count).then(a.source.cmp(&b.source)));
        let total = srcs.iter().map(|s| s.count).sum();
        srcs.truncate(top_n);
        out.push(CpuEvents {
            cpu,
            total,
            top: srcs,
        });
    }
    out
}

pub use rtmgr_core::proctext::parse_steal;

/// One CPU's time in USER_HZ ticks, from its `cpuN` line of `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// user, nice, system, irq and softirq.
    pub busy: u64,
    /// idle and iowait.
    pub idle: u64,
    pub steal: u64,
}

impl CpuTicks {
    /// The ticks between `before` and `self` (a counter that went back counts zero).
    pub fn since(&self, before: &CpuTicks) -> CpuTicks {
        CpuTicks {
            busy: self.busy.saturating_sub(before.busy),
            idle: self.idle.saturating_sub(before.idle),
            steal: self.steal.saturating_sub(before.steal),
        }
    }
}

/// Every CPU's ticks, from the `cpuN` lines of `/proc/stat` (core's
/// `cpu_times`, split as this report wants it: steal is neither busy nor idle).
pub fn parse_cpu_ticks(stat: &str) -> BTreeMap<u32, CpuTicks> {
    rtmgr_core::proctext::cpu_times(stat)
        .into_iter()
        .map(|(cpu, t)| {
            let ticks = CpuTicks {
                busy: t.busy - t.steal,
                idle: t.total - t.busy,
                steal: t.steal,
            };
            (cpu, ticks)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const IRQ_A: &str = "           CPU0       CPU1       
 24:          1          0  IO-APIC   5-edge      ACPI:Ged
 40:        100        200  PCI-MSI 1-edge      virtio0-input.0
NMI:          0          0   Non-maskable interrupts
LOC:       5000       7000   Local timer interrupts
ERR:          0
";
    const IRQ_B: &str = "           CPU0       CPU1       
 24:          1          0  IO-APIC   5-edge      ACPI:Ged
 40:        150        260  PCI-MSI 1-edge      virtio0-input.0
NMI:          0          0   Non-maskable interrupts
LOC:       5100       7500   Local timer interrupts
RES:          3          9   Rescheduling interrupts
ERR:          0
";

    #[test]
    fn parses_interrupts_and_names_sources() {
        let t = parse_counters(IRQ_A);
        assert_eq!(t.cpus, [0, 1]);
        assert_eq!(t.rows["40 (virtio0-input.0)"], [100, 200]);
        assert_eq!(t.rows["LOC"], [5000, 7000]);
        assert_eq!(t.rows["ERR"], [0, 0]);
    }

    #[test]
    fn deltas_rank_sources_per_cpu() {
        let d = deltas(&parse_counters(IRQ_A), &parse_counters(IRQ_B), &[1], 2);
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].cpu, 1);
        assert_eq!(d[0].total, 500 + 60 + 9);
        assert_eq!(d[0].top[0].source, "LOC");
        assert_eq!(d[0].top[0].count, 500);
        assert_eq!(d[0].top[1].source, "40 (virtio0-input.0)");
        assert_eq!(d[0].top.len(), 2);
    }

    #[test]
    fn softirqs_and_steal() {
        let s = "                    CPU0       CPU1       
          HI:          0          0
       TIMER:       5632       7009
";
        assert_eq!(parse_counters(s).rows["TIMER"], [5632, 7009]);
        let stat = "cpu  10 0 5 100 1 0 2 7 0 0
cpu0 5 0 2 50 1 0 1 3 0 0
cpu1 5 0 3 50 0 0 1 4 0 0
intr 123
";
        let ticks = parse_cpu_ticks(stat);
        assert_eq!(
            ticks[&1],
            CpuTicks {
                busy: 5 + 3 + 1,
                idle: 50,
                steal: 4
            }
        );
        assert_eq!(ticks[&1].since(&ticks[&0]).idle, 0);
        assert!(!ticks.contains_key(&9) && ticks.len() == 2);
        let st = parse_steal(stat);
        assert_eq!(st.get(&0), Some(&3));
        assert_eq!(st.get(&1), Some(&4));
        assert_eq!(st.len(), 2);
    }
}
