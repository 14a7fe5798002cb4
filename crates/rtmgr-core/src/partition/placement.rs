//! Choosing the RT CPUs (`--rt-cpus auto[:N]`): the CPUs the kernel leaves most
//! alone. A partition moves every movable task and interrupt; what stays is the
//! work user space cannot move — kernel-managed interrupts whose effective
//! affinity is on a CPU, per-CPU kernel threads, and CPU 0's housekeeping
//! (McKenney §2.1: what must be shut down on a real-time CPU; DROPS §4.2: the
//! RT side must not depend on interrupts Linux handles). Pure: the facts come in
//! from rtmgr-linux, the choice and its reason go out.

use super::ConfigError;
use crate::CpuSet;
use serde::{Deserialize, Serialize};

/// Assumed cost of one interrupt on the CPU it hits: the handler and the
/// softirq that completes its work (a few µs on bare metal, more in a VM). Only
/// its ratio to the other terms matters for the choice.
pub const IRQ_COST_US: f64 = 10.0;

/// What CPU 0 carries beyond its counters, as µs of work per second: it is the
/// boot CPU, where timekeeping duty, legacy and firmware interrupts and work
/// sent to "the first CPU" land by default. Worth about ten managed interrupts
/// per second: a CPU taking a disk's completions is worse than CPU 0.
pub const CPU0_HOUSEKEEPING_US: f64 = 100.0;

/// How an interrupt user space cannot move reaches a CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IrqKind {
    /// A device interrupt the kernel refuses to move (kernel-managed or per-CPU).
    Managed,
    /// The local timer: the scheduler tick of a busy CPU.
    LocalTimer,
}

/// An unmovable interrupt on one CPU: what it is and how often it fires there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IrqHit {
    /// The first column of /proc/interrupts: a number, or LOC.
    pub irq: String,
    pub name: String,
    pub cpu: u32,
    pub kind: IrqKind,
    /// Interrupts taken on this CPU since boot.
    pub since_boot: u64,
    /// Expected interrupts per second on this CPU: the larger of the rate in
    /// the sampling window and the mean since boot (so a disk idle during the
    /// window still counts what a load will make it do).
    pub per_s: f64,
}

impl IrqHit {
    /// The boot option that would move it off `rt`, if one exists.
    pub fn boot_option(&self, rt: &CpuSet) -> String {
        match self.kind {
            IrqKind::Managed => super::boot::managed_irq_option(rt),
            IrqKind::LocalTimer => super::boot::nohz_full_option(rt),
        }
    }

    /// "IRQ 36 virtio1-req.0 (kernel-managed)".
    pub fn label(&self) -> String {
        match self.kind {
            IrqKind::Managed => format!("IRQ {} {} (kernel-managed)", self.irq, self.name),
            IrqKind::LocalTimer => "the local timer (scheduler tick)".to_string(),
        }
    }
}

/// Per-CPU kernel threads of one CPU (they cannot leave it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuThreads {
    pub cpu: u32,
    pub kthreads: u32,
    /// Their CPU time, µs per second of their lifetime.
    pub us_per_s: f64,
}

/// What the machine tells about unmovable work, per CPU.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Facts {
    pub online: CpuSet,
    pub hits: Vec<IrqHit>,
    pub threads: Vec<CpuThreads>,
    /// How long /proc/interrupts was sampled (0: since-boot means only).
    pub window_ms: u64,
}

/// One part of a CPU's score.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cause {
    pub what: String,
    pub us_per_s: f64,
}

/// A CPU's estimated unmovable work, µs per second, and what it is made of.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuScore {
    pub cpu: u32,
    pub us_per_s: f64,
    pub causes: Vec<Cause>,
}

/// The chosen RT CPUs, every CPU's score and the reason in one sentence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RtChoice {
    pub rt: CpuSet,
    pub scores: Vec<CpuScore>,
    pub reason: String,
}

/// Score every online CPU.
pub fn scores(f: &Facts) -> Vec<CpuScore> {
    f.online
        .iter()
        .map(|cpu| {
            let mut causes = Vec::new();
            if cpu == 0 {
                causes.push(Cause {
                    what: "boot-CPU housekeeping".into(),
                    us_per_s: CPU0_HOUSEKEEPING_US,
                });
            }
            for h in f.hits.iter().filter(|h| h.cpu == cpu) {
                if h.kind == IrqKind::Managed && h.per_s > 0.0 {
                    causes.push(Cause {
                        what: format!("{} {}/s", h.label(), rate(h.per_s)),
                        us_per_s: h.per_s * IRQ_COST_US,
                    });
                }
            }
            if let Some(t) = f.threads.iter().find(|t| t.cpu == cpu) {
                causes.push(Cause {
                    what: format!("{} per-CPU kernel threads", t.kthreads),
                    us_per_s: t.us_per_s,
                });
            }
            CpuScore {
                cpu,
                us_per_s: causes.iter().map(|c| c.us_per_s).sum(),
                causes,
            }
        })
        .collect()
}

/// The `n` CPUs with the least unmovable work (ties: the highest-numbered,
/// as rtmgr's earlier default, the last CPU), with the reason.
pub fn choose(f: &Facts, n: u32) -> Result<RtChoice, ConfigError> {
    let online = f.online.len() as u32;
    if n == 0 {
        return Err(ConfigError::BadAuto("auto:0".into()));
    }
    if n >= online {
        return Err(ConfigError::AutoTooMany(n, online));
    }
    let all = scores(f);
    let mut order: Vec<&CpuScore> = all.iter().collect();
    order.sort_by(|a, b| a.us_per_s.total_cmp(&b.us_per_s).then(b.cpu.cmp(&a.cpu)));
    let rt: CpuSet = order.iter().take(n as usize).map(|s| s.cpu).collect();
    let describe = |s: &CpuScore| {
        let parts: Vec<String> = s
            .causes
            .iter()
            .filter(|c| c.us_per_s > 0.0 || c.what.contains("kernel threads"))
            .map(|c| format!("{} ≈ {:.0}", c.what, c.us_per_s))
            .collect();
        format!(
            "CPU {} ≈ {:.0} µs/s ({})",
            s.cpu,
            s.us_per_s,
            if parts.is_empty() {
                "nothing unmovable".to_string()
            } else {
                parts.join(", ")
            }
        )
    };
    let chosen: Vec<String> = order.iter().take(n as usize).map(|s| describe(s)).collect();
    let others: Vec<String> = order.iter().skip(n as usize).map(|s| describe(s)).collect();
    let reason = format!(
        "least unmovable work (estimated µs per second, an interrupt counted as {IRQ_COST_US:.0} µs{}): {} rather than {}",
        if f.window_ms > 0 {
            format!(", rates over {} ms or since boot", f.window_ms)
        } else {
            ", rates since boot".to_string()
        },
        chosen.join("; "),
        others.join("; ")
    );
    Ok(RtChoice {
        rt,
        scores: all,
        reason,
    })
}

/// A rate for people: no decimals above 10/s.
fn rate(per_s: f64) -> String {
    if per_s >= 10.0 {
        format!("{per_s:.0}")
    } else {
        format!("{per_s:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(ncpu: u32) -> Facts {
        Facts {
            online: (0..ncpu).collect(),
            hits: Vec::new(),
            threads: (0..ncpu)
                .map(|cpu| CpuThreads {
                    cpu,
                    kthreads: 6,
                    us_per_s: 5.0,
                })
                .collect(),
            window_ms: 500,
        }
    }

    fn managed(cpu: u32, per_s: f64) -> IrqHit {
        IrqHit {
            irq: "36".into(),
            name: "virtio1-req.0".into(),
            cpu,
            kind: IrqKind::Managed,
            since_boot: 463_326,
            per_s,
        }
    }

    #[test]
    fn a_managed_irq_on_cpu_1_makes_cpu_0_the_rt_cpu() {
        let mut f = facts(2);
        f.hits.push(managed(1, 57.0));
        let c = choose(&f, 1).unwrap();
        assert_eq!(c.rt.to_list(), "0");
        assert!(c.reason.contains("IRQ 36 virtio1-req.0"), "{}", c.reason);
        assert!(c.reason.contains("57/s"), "{}", c.reason);
        assert!(c.reason.starts_with("least unmovable work"), "{}", c.reason);
    }

    #[test]
    fn without_unmovable_interrupts_the_last_cpu_wins() {
        let c = choose(&facts(4), 1).unwrap();
        assert_eq!(c.rt.to_list(), "3");
        let c = choose(&facts(4), 2).unwrap();
        assert_eq!(c.rt.to_list(), "2-3");
    }

    #[test]
    fn timer_ticks_do_not_count_and_kernel_threads_do() {
        let mut f = facts(3);
        f.hits.push(IrqHit {
            irq: "LOC".into(),
            name: "Local timer interrupts".into(),
            cpu: 1,
            kind: IrqKind::LocalTimer,
            since_boot: 10,
            per_s: 1000.0,
        });
        f.threads[2].us_per_s = 500.0;
        let c = choose(&f, 1).unwrap();
        assert_eq!(c.rt.to_list(), "1");
        let hit = &f.hits[0];
        assert_eq!(hit.boot_option(&c.rt), "nohz_full=1");
        assert_eq!(
            managed(1, 1.0).boot_option(&c.rt),
            "isolcpus=managed_irq,domain,1"
        );
    }

    #[test]
    fn a_faint_managed_irq_is_better_than_cpu_0() {
        let mut f = facts(2);
        f.hits.push(managed(1, 0.5));
        assert_eq!(choose(&f, 1).unwrap().rt.to_list(), "1");
    }

    #[test]
    fn bad_counts_are_refused() {
        let f = facts(2);
        assert!(matches!(choose(&f, 0), Err(ConfigError::BadAuto(_))));
        assert_eq!(choose(&f, 2), Err(ConfigError::AutoTooMany(2, 2)));
        let e = choose(&f, 5).unwrap_err().to_string();
        assert!(e.contains("at most auto:1"), "{e}");
    }
}
