//! The measured CPUs' steal counters read all through a segment (issue 21;
//! McKenney "Real Time vs Real Fast" §2.1: the hypervisor is part of the
//! latency path): a SCHED_OTHER thread off the measured CPUs reads
//! `/proc/stat` every `PERIOD` into preallocated series, so each late wake-up
//! can be labelled host on evidence (`rtmgr_core::host_stall::label_host`).

use crate::procstat::parse_steal;
use rtmgr_core::host_stall::StealReading;
use rtmgr_core::CpuSet;
use rtmgr_linux::{sched, Host};
use rtmgr_sys::time::mono_ns;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the counters are read. `/proc/stat` counts steal in 10 ms
/// ticks, so reading faster than that adds cost, not resolution.
pub const PERIOD: Duration = Duration::from_millis(5);

/// The series read during one segment, per measured CPU, with their cost.
#[derive(Debug, Clone, Default)]
pub struct StealSeries {
    pub per_cpu: BTreeMap<u32, Vec<StealReading>>,
    /// Reads of /proc/stat, and the time they took (the sampler's cost).
    pub reads: u64,
    pub read_ns: u64,
}

impl StealSeries {
    pub fn of(&self, cpu: u32) -> &[StealReading] {
        self.per_cpu.get(&cpu).map_or(&[], Vec::as_slice)
    }

    /// Mean time of one read, ns.
    pub fn read_cost_ns(&self) -> Option<u64> {
        self.read_ns.checked_div(self.reads)
    }
}

/// A running sampler.
pub struct StealSampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<StealSeries>,
}

impl StealSampler {
    /// Read the steal of `cpus` from now until `finish`, room for `planned`.
    /// The thread runs SCHED_OTHER on the CPUs the caller may use outside
    /// `cpus` (where there are any).
    pub fn start(host: &Host, cpus: &CpuSet, planned: Duration) -> std::io::Result<StealSampler> {
        let (host, cpus) = (host.clone(), cpus.clone());
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let capacity = (planned.as_nanos() / PERIOD.as_nanos()) as usize + 64;
        let handle = std::thread::Builder::new()
            .name("rtmgr-steal".into())
            .spawn(move || {
                if let Err(e) = sched::set_policy(0, sched::Policy::Other { nice: 0 }) {
                    tracing::warn!("steal sampler SCHED_OTHER: {e}");
                }
                if let Ok(mine) = sched::get_affinity(0) {
                    let others = mine.difference(&cpus);
                    if !others.is_empty() {
                        let _ = sched::set_affinity(0, &others);
                    }
                }
                sample(&host, &cpus, capacity, &flag)
            })?;
        Ok(StealSampler { stop, handle })
    }

    /// Stop after one more scheduler tick and period, so that the last late
    /// wake-ups have a reading after them; the series read.
    pub fn finish(self, tick_ns: u64) -> StealSeries {
        std::thread::sleep(Duration::from_nanos(tick_ns) + 2 * PERIOD);
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

fn sample(host: &Host, cpus: &CpuSet, capacity: usize, stop: &AtomicBool) -> StealSeries {
    let mut out = StealSeries {
        per_cpu: cpus
            .iter()
            .map(|c| (c, Vec::with_capacity(capacity)))
            .collect(),
        ..Default::default()
    };
    while !stop.load(Ordering::Relaxed) {
        let start_ns = mono_ns();
        let Some(stat) = host.read_opt("/proc/stat") else {
            break;
        };
        let end_ns = mono_ns();
        out.reads += 1;
        out.read_ns += end_ns - start_ns;
        for (cpu, steal_ticks) in parse_steal(&stat) {
            if let Some(series) = out.per_cpu.get_mut(&cpu) {
                series.push(StealReading {
                    start_ns,
                    end_ns,
                    steal_ticks,
                });
            }
        }
        rtmgr_sys::time::sleep_until(start_ns + PERIOD.as_nanos() as u64);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_series_in_time_order_and_stops() {
        let host = Host::real();
        let cpus = CpuSet::single(0);
        let s = StealSampler::start(&host, &cpus, Duration::from_millis(50)).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        let series = s.finish(1_000_000);
        let r = series.of(0);
        assert!(r.len() >= 3, "{} readings in 40 ms", r.len());
        assert!(r
            .windows(2)
            .all(|w| w[0].end_ns <= w[1].start_ns && w[0].steal_ticks <= w[1].steal_ticks));
        assert!(series.of(1000).is_empty());
        assert!(series.read_cost_ns().is_some());
    }

    #[test]
    fn no_proc_stat_no_readings() {
        let dir = std::env::temp_dir().join(format!("rtmgr-steal-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let host = Host::fake(&dir);
        let s = StealSampler::start(&host, &CpuSet::single(0), Duration::from_millis(10)).unwrap();
        let series = s.finish(0);
        assert!(series.of(0).is_empty());
        assert_eq!(series.reads, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
