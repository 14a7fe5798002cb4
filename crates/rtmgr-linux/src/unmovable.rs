//! What user space cannot move off a CPU, read from the machine (McKenney
//! §2.1: what must be shut down on a real-time CPU; DROPS §4.2: the RT side
//! must not depend on interrupts Linux handles): kernel-managed interrupts
//! (asked with `irq::movable`) and the local timer with their rates, per-CPU
//! kernel threads with their CPU time, and the block devices whose completion
//! interrupt is one of them. The RT-CPU choice itself is pure
//! (`rtmgr_core::partition::placement`).

use crate::host::{Host, Result};
use crate::{cpus, irq, tasks};
use rtmgr_core::partition::placement::{self, CpuThreads, Facts, IrqHit, IrqKind, RtChoice};
use rtmgr_core::partition::ConfigError;
use rtmgr_core::CpuSet;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// How long /proc/interrupts is sampled for rates (besides the since-boot means).
pub const SAMPLE_WINDOW: Duration = Duration::from_millis(500);

/// Seconds since boot (None in a tree without /proc/uptime).
pub(crate) fn uptime_s(host: &Host) -> Option<f64> {
    host.read_opt("/proc/uptime")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Per-CPU kernel threads (the kernel forbids moving them), by CPU.
pub fn pinned_kthreads(host: &Host) -> BTreeMap<u32, Vec<tasks::TaskInfo>> {
    let mut by_cpu: BTreeMap<u32, Vec<tasks::TaskInfo>> = BTreeMap::new();
    for t in tasks::all(host).unwrap_or_default() {
        if t.kthread && t.no_setaffinity {
            if let Ok(aff) = host.get_affinity(t.tid) {
                if let (1, Some(cpu)) = (aff.len(), aff.first()) {
                    by_cpu.entry(cpu).or_default().push(t);
                }
            }
        }
    }
    by_cpu
}

fn cpu_threads(host: &Host, uptime: Option<f64>) -> Vec<CpuThreads> {
    let tps = rtmgr_sys::time::clock_ticks_per_second().max(1) as f64;
    pinned_kthreads(host)
        .into_iter()
        .map(|(cpu, list)| {
            let us_per_s = list
                .iter()
                .filter_map(|t| {
                    let age = uptime? - t.start_time as f64 / tps;
                    (age > 1.0).then(|| t.cpu_ticks as f64 / tps / age * 1e6)
                })
                .sum();
            CpuThreads {
                cpu,
                kthreads: list.len() as u32,
                us_per_s,
            }
        })
        .collect()
}

/// The unmovable interrupts on each CPU, with their rates: over the window
/// between `before` and `after`, or the mean since boot, whichever is larger.
fn irq_hits(
    host: &Host,
    before: &BTreeMap<String, (Vec<u64>, String)>,
    after: &BTreeMap<String, (Vec<u64>, String)>,
    window: Duration,
    uptime: Option<f64>,
    online: &CpuSet,
) -> Vec<IrqHit> {
    let window_s = window.as_secs_f64();
    let rate = |now: u64, then: u64| {
        let w = if window_s > 0.0 {
            now.saturating_sub(then) as f64 / window_s
        } else {
            0.0
        };
        let b = uptime.filter(|u| *u > 0.0).map_or(0.0, |u| now as f64 / u);
        w.max(b)
    };
    let mut hits = Vec::new();
    for (key, (counts, desc)) in after {
        let old = before.get(key).map(|b| b.0.as_slice()).unwrap_or(&[]);
        if key == "LOC" {
            for (cpu, &n) in counts.iter().enumerate() {
                hits.push(IrqHit {
                    irq: key.clone(),
                    name: desc.clone(),
                    cpu: cpu as u32,
                    kind: IrqKind::LocalTimer,
                    since_boot: n,
                    per_s: rate(n, old.get(cpu).copied().unwrap_or(0)),
                });
            }
            continue;
        }
        let Ok(n) = key.parse::<u32>() else { continue };
        if irq::movable(host, n) != Some(false) {
            continue;
        }
        let lands = irq::effective(host, n)
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| online.clone());
        let per_s = rate(counts.iter().sum(), old.iter().sum()) / lands.len().max(1) as f64;
        for cpu in lands.iter() {
            hits.push(IrqHit {
                irq: key.clone(),
                name: desc.split_whitespace().last().unwrap_or("").to_string(),
                cpu,
                kind: IrqKind::Managed,
                since_boot: counts.get(cpu as usize).copied().unwrap_or(0),
                per_s,
            });
        }
    }
    hits
}

/// Everything unmovable on this machine, sampling interrupts for `window`
/// (zero: since-boot means only). Kernel-managed interrupts are told apart
/// only as root; otherwise none is listed.
pub fn facts(host: &Host, window: Duration) -> Result<Facts> {
    let online = cpus::online(host)?;
    Ok(Facts {
        hits: unmovable_irqs(host, window)?,
        threads: cpu_threads(host, uptime_s(host)),
        window_ms: window.as_millis() as u64,
        online,
    })
}

/// The unmovable interrupts on every CPU, sampled over `window` (zero:
/// since-boot means only).
pub fn unmovable_irqs(host: &Host, window: Duration) -> Result<Vec<IrqHit>> {
    let online = cpus::online(host)?;
    let before = irq::interrupts_table(host)?;
    if !window.is_zero() {
        std::thread::sleep(window);
    }
    let after = irq::interrupts_table(host)?;
    let uptime = uptime_s(host);
    Ok(irq_hits(host, &before, &after, window, uptime, &online))
}

/// Why the RT CPUs could not be chosen.
#[derive(Debug, thiserror::Error)]
pub enum ChoiceError {
    #[error(transparent)]
    Input(#[from] ConfigError),
    #[error(transparent)]
    Host(#[from] crate::host::HostError),
}

/// `--rt-cpus auto:N`: the N CPUs with the least unmovable work, and why.
pub fn choose_rt_cpus(
    host: &Host,
    n: u32,
    window: Duration,
) -> std::result::Result<RtChoice, ChoiceError> {
    let online = cpus::online(host)?;
    // Refuse a bad N before sampling.
    if n == 0 || n >= online.len() as u32 {
        placement::choose(
            &Facts {
                online,
                ..Default::default()
            },
            n,
        )?;
    }
    Ok(placement::choose(&facts(host, window)?, n)?)
}

/// A block device and the interrupts of the device behind it (none for
/// loop, zram and other devices that complete in the submitter's context).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDevice {
    pub name: String,
    pub irqs: Vec<u32>,
    /// `queue/rq_affinity` as the kernel shows it.
    pub rq_affinity: Option<String>,
}

/// The interrupts of the nearest device above a sysfs device path: its MSI
/// vectors, or its legacy `irq`.
fn device_irqs(host: &Host, dev: &Path) -> Vec<u32> {
    for dir in dev
        .ancestors()
        .take_while(|d| d.starts_with("/sys/devices/"))
    {
        let msi: Vec<u32> = host
            .list_dir(dir.join("msi_irqs"))
            .unwrap_or_default()
            .iter()
            .filter_map(|n| n.parse().ok())
            .collect();
        if !msi.is_empty() {
            return msi;
        }
        if let Some(n) = host
            .read_opt(dir.join("irq"))
            .and_then(|t| t.trim().parse::<u32>().ok())
            .filter(|n| *n > 0)
        {
            return vec![n];
        }
    }
    Vec::new()
}

/// Every block device with its completion interrupts.
pub fn block_devices(host: &Host) -> Vec<BlockDevice> {
    host.list_dir("/sys/block")
        .unwrap_or_default()
        .into_iter()
        .map(|name| {
            let base = Path::new("/sys/block").join(&name);
            let irqs = host
                .canonical(base.join("device"))
                .map(|dev| device_irqs(host, &dev))
                .unwrap_or_default();
            BlockDevice {
                rq_affinity: host
                    .read_opt(base.join("queue/rq_affinity"))
                    .map(|t| t.trim().to_string()),
                name,
                irqs,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeMachine;

    #[test]
    fn a_managed_irq_on_cpu_1_makes_cpu_0_the_rt_cpu_in_a_fake_tree() {
        let m = FakeMachine::new(2)
            .typical_tasks()
            .managed_irq(36, 1, 57_000)
            .build();
        let host = m.host();
        let c = choose_rt_cpus(&host, 1, Duration::ZERO).unwrap();
        assert_eq!(c.rt.to_list(), "0", "{}", c.reason);
        assert!(c.reason.contains("IRQ 36 virtio1-req.0"), "{}", c.reason);
        // 57 000 since boot over 1 000 s of uptime.
        assert!(c.reason.contains("57/s"), "{}", c.reason);
        let f = facts(&host, Duration::ZERO).unwrap();
        let managed: Vec<&IrqHit> = f
            .hits
            .iter()
            .filter(|h| h.kind == IrqKind::Managed)
            .collect();
        assert_eq!(managed.len(), 1);
        assert_eq!((managed[0].cpu, managed[0].since_boot), (1, 57_000));
        assert_eq!(f.threads.len(), 2, "one ksoftirqd per CPU");
    }

    #[test]
    fn without_managed_irqs_the_last_cpu_and_bad_counts_refused() {
        let m = FakeMachine::new(4).typical_tasks().build();
        let host = m.host();
        assert_eq!(
            choose_rt_cpus(&host, 2, Duration::ZERO)
                .unwrap()
                .rt
                .to_list(),
            "2-3"
        );
        for n in [0, 4, 9] {
            assert!(matches!(
                choose_rt_cpus(&host, n, Duration::ZERO),
                Err(ChoiceError::Input(_))
            ));
        }
    }

    #[test]
    fn block_devices_and_their_interrupts() {
        let m = FakeMachine::new(2).build();
        let devs = block_devices(&m.host());
        let vda = devs.iter().find(|d| d.name == "vda").unwrap();
        assert_eq!(vda.irqs, vec![35, 36]);
        assert_eq!(vda.rq_affinity.as_deref(), Some("1"));
        let lo = devs.iter().find(|d| d.name == "loop0").unwrap();
        assert!(lo.irqs.is_empty());
    }

    #[test]
    fn this_machine_reads() {
        let host = Host::real();
        let f = facts(&host, Duration::from_millis(50)).unwrap();
        assert!(f.hits.iter().any(|h| h.kind == IrqKind::LocalTimer));
        let _ = block_devices(&host);
    }
}
