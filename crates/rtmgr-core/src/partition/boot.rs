//! The kernel command line that finishes at the next boot what a partition does
//! at run time (McKenney §2.1: what must be shut down on a real-time CPU; the
//! boot options of tuned's realtime and cpu-partitioning profiles). rtmgr never
//! edits the boot loader: it prints the line and says what each option adds.

use crate::CpuSet;
use serde::{Deserialize, Serialize};

/// One boot option and what it adds to the run-time partition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootOption {
    pub option: String,
    pub adds: String,
    /// The running kernel already has this option (same key) on its command line.
    pub present: bool,
}

/// The option that would move a kernel-managed interrupt off the RT CPUs.
pub fn managed_irq_option(rt: &CpuSet) -> String {
    format!("isolcpus=managed_irq,domain,{}", rt.to_list())
}

/// The option that stops the local timer tick on busy RT CPUs.
pub fn nohz_full_option(rt: &CpuSet) -> String {
    format!("nohz_full={}", rt.to_list())
}

/// The boot options of an RT/NRT split, flagged against the running command line.
pub fn boot_options(rt: &CpuSet, nrt: &CpuSet, cmdline: &str) -> Vec<BootOption> {
    let opts = [
        (
            managed_irq_option(rt),
            "kernel-managed interrupts (which user space cannot move) are placed on the NRT CPUs when their mask allows it, and the RT CPUs leave the scheduler's load-balancing domains",
        ),
        (
            nohz_full_option(rt),
            "no scheduler tick on an RT CPU while it runs a single task",
        ),
        (
            format!("rcu_nocbs={}", rt.to_list()),
            "RCU callbacks of the RT CPUs run in kernel threads on the NRT CPUs instead of in softirq on the RT CPUs",
        ),
        (
            format!("irqaffinity={}", nrt.to_list()),
            "interrupts start on the NRT CPUs from boot on, before rtmgr runs",
        ),
    ];
    let keys: Vec<&str> = cmdline
        .split_whitespace()
        .map(|w| w.split('=').next().unwrap_or(w))
        .collect();
    opts.into_iter()
        .map(|(option, adds)| {
            let key = option.split('=').next().unwrap_or("");
            BootOption {
                present: keys.contains(&key),
                option,
                adds: adds.into(),
            }
        })
        .collect()
}

/// The options joined as they go on the kernel command line.
pub fn cmdline(opts: &[BootOption]) -> String {
    opts.iter()
        .map(|o| o.option.as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_for_rt_1_and_present_options() {
        let rt = CpuSet::single(1);
        let nrt = CpuSet::single(0);
        let opts = boot_options(&rt, &nrt, "console=ttyS0 nohz_full=1 quiet");
        assert_eq!(
            cmdline(&opts),
            "isolcpus=managed_irq,domain,1 nohz_full=1 rcu_nocbs=1 irqaffinity=0"
        );
        let present: Vec<bool> = opts.iter().map(|o| o.present).collect();
        assert_eq!(present, vec![false, true, false, false]);
    }
}
