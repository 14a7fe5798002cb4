//! The measured CPUs' steal counters read all through a segment (issue 21;
//! McKenney "Real Time vs Real Fast" §2.1: the hypervisor is part of the
//! latency path): a SCHED_OTHER thread off the measured CPUs reads
//! `/proc/stat` every `PERIOD` into preallocated series, so each late wake-up
//! can be labelled host on evidence (`rtmgr_core::host_stall::label_host`).
//! Where the kernel shows it, the steal in ns too (issue 28): debugfs
//! `sched/debug`'s `.clock − .clock_task`, opened in a private mount.

use crate::procstat::parse_steal;
use rtmgr_core::host_stall::{
    mend_torn_steal_ns, ns_steal_usable, sched_debug_steal_ns, StealReading,
};
use rtmgr_core::CpuSet;
use rtmgr_linux::{sched, Host};
use rtmgr_sys::time::mono_ns;
use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the counters are read. `/proc/stat` counts steal in 10 ms
/// ticks, so reading it faster adds cost, not resolution; `sched/debug`
/// (ns) costs ~0.15 ms a read here (it formats each CPU's run queues), so
/// every 5 ms is ~3 % of one CPU, off the measured ones.
pub const PERIOD: Duration = Duration::from_millis(5);
/// The debugfs file with each CPU's scheduler clocks.
pub const SCHED_DEBUG: &str = "sched/debug";

/// The series read during one segment, per measured CPU, with their cost.
#[derive(Debug, Clone, Default)]
pub struct StealSeries {
    pub per_cpu: BTreeMap<u32, Vec<StealReading>>,
    /// Reads of /proc/stat, and the time they took (the sampler's cost).
    pub reads: u64,
    pub read_ns: u64,
    /// Why the readings have no steal in ns (None: they have it).
    pub ns_note: Option<String>,
    /// Readings in ns mended as torn (`mend_torn_steal_ns`), all CPUs.
    pub torn_ns: usize,
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

/// `sched/debug` kept open: each read starts it again and stops once the
/// last wanted CPU's clocks came (the CPUs after it are not formatted).
pub struct SchedDebug {
    file: std::fs::File,
    last_cpu: u32,
    buf: Vec<u8>,
}

impl SchedDebug {
    /// Open it for `cpus` on `host`, or say why the ns source is not there.
    pub fn open(host: &Host, cpus: &CpuSet) -> Result<SchedDebug, String> {
        let config = rtmgr_linux::status::kernel_config(host);
        ns_steal_usable(config.as_deref())?;
        let last_cpu = cpus.iter().last().ok_or("no CPU to read")?;
        let file = host.open_debugfs(SCHED_DEBUG).map_err(|e| {
            format!(
                "debugfs {SCHED_DEBUG} unreadable ({e}): steal only in /proc/stat's 10 ms ticks"
            )
        })?;
        let mut d = SchedDebug {
            file,
            last_cpu,
            buf: Vec::with_capacity(64 << 10),
        };
        match d.read() {
            Some(m) if cpus.iter().all(|c| m.contains_key(&c)) => Ok(d),
            _ => Err(format!(
                "debugfs {SCHED_DEBUG} shows no .clock/.clock_task for CPU {cpus}: steal only in ticks"
            )),
        }
    }

    /// Each wanted CPU's `.clock − .clock_task`, ns (None on a read error).
    pub fn read(&mut self) -> Option<BTreeMap<u32, u64>> {
        self.file.seek(SeekFrom::Start(0)).ok()?;
        self.buf.clear();
        let mut chunk = [0u8; 8192];
        let want = format!("cpu#{},", self.last_cpu);
        loop {
            let n = self.file.read(&mut chunk).ok()?;
            self.buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&self.buf);
            let done = text
                .find(&want)
                .is_some_and(|i| text[i..].contains(".clock_task"));
            if n == 0 || done {
                return Some(sched_debug_steal_ns(&text));
            }
        }
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
    let mut ns_source = match SchedDebug::open(host, cpus) {
        Ok(d) => Some(d),
        Err(why) => {
            out.ns_note = Some(why);
            None
        }
    };
    while !stop.load(Ordering::Relaxed) {
        let start_ns = mono_ns();
        let Some(stat) = host.read_opt("/proc/stat") else {
            break;
        };
        let ns = ns_source.as_mut().and_then(SchedDebug::read);
        let end_ns = mono_ns();
        out.reads += 1;
        out.read_ns += end_ns - start_ns;
        for (cpu, steal_ticks) in parse_steal(&stat) {
            if let Some(series) = out.per_cpu.get_mut(&cpu) {
                series.push(StealReading {
                    start_ns,
                    end_ns,
                    steal_ticks,
                    steal_ns: ns.as_ref().and_then(|m| m.get(&cpu).copied()),
                });
            }
        }
        rtmgr_sys::time::sleep_until(start_ns + PERIOD.as_nanos() as u64);
    }
    out.torn_ns = out
        .per_cpu
        .values_mut()
        .map(|s| mend_torn_steal_ns(s))
        .sum();
    if out.torn_ns > 0 {
        tracing::debug!(
            "steal sampler: {} torn sched/debug readings mended",
            out.torn_ns
        );
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
        // Steal in ns on every reading, or a note saying why none.
        match &series.ns_note {
            None => assert!(
                r.iter().all(|x| x.steal_ns.is_some())
                    && r.windows(2).all(|w| w[0].steal_ns <= w[1].steal_ns)
            ),
            Some(why) => {
                eprintln!("no steal in ns here: {why}");
                assert!(r.iter().all(|x| x.steal_ns.is_none()));
            }
        }
    }

    #[test]
    fn sched_debug_read_in_a_private_mount_leaves_no_mount() {
        if !rtmgr_sys::process::is_root() {
            eprintln!("skip: debugfs needs root");
            return;
        }
        let mounts = || std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let before = mounts();
        let host = Host::real();
        match SchedDebug::open(&host, &CpuSet::single(0)) {
            // Two raw reads may disagree (a torn read, `mend_torn_steal_ns`):
            // each gives CPU 0's value.
            Ok(mut d) => {
                for _ in 0..2 {
                    assert!(d.read().unwrap().contains_key(&0));
                }
            }
            Err(why) => eprintln!("skip: {why}"),
        }
        assert_eq!(mounts(), before, "no mount left for others");
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
