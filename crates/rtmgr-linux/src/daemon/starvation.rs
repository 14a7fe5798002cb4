//! The starvation guard beside the RT CPUs (stalld's job; DROPS §4.1: the
//! manager owns the RT CPUs and answers for the kernel's per-CPU work there):
//! a thread of the daemon samples the per-CPU kernel threads of the RT CPUs
//! from /proc, asks the pure policy (`rtmgr_core::resources::starvation`)
//! which are starved, boosts those with SCHED_DEADLINE for a few periods and
//! puts them back — each boost journalled in the partition journal first, so
//! stop, `rtmgr partition reset` and a restart after `kill -9` undo it. Only
//! while it runs may RT throttling be lifted (`sched_rt_runtime_us = -1`).

use crate::balance::EventSink;
use crate::host::{Host, HostError};
use crate::journal::{Journal, Record};
use crate::resources::knobs::{self, Held};
use crate::tasks;
use rtmgr_core::partition::ResourceKnobId;
use rtmgr_core::resources::starvation::{guarded_cpu, Sample, StarvationConfig, Tracker};
use rtmgr_core::CpuSet;
use rtmgr_sys::sched::{SchedAttr, SCHED_DEADLINE};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub const RT_RUNTIME: &str = "/proc/sys/kernel/sched_rt_runtime_us";

/// The running guard.
pub struct Guard {
    /// RT throttling as the `rt_throttling` knob keeps it, when lifted.
    pub held: Option<Held>,
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Vec<String>>,
}

impl Guard {
    /// Stop it: boosted threads are put back, throttling restored. Returns
    /// what could not be undone.
    pub fn stop(self) -> Vec<String> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle
            .join()
            .unwrap_or_else(|_| vec!["starvation guard panicked".into()])
    }
}

/// The per-CPU kernel threads of the RT CPUs, as samples.
pub fn sample(host: &Host, rt: &CpuSet) -> Vec<Sample> {
    let Ok(all) = tasks::all(host) else {
        return Vec::new();
    };
    all.into_iter()
        .filter(|t| t.kthread && guarded_cpu(&t.comm, rt).is_some())
        .filter_map(|t| {
            let stat = host.read_opt(format!("/proc/{}/stat", t.tid))?;
            let status = host.read_opt(format!("/proc/{}/status", t.tid))?;
            Sample::parse(t.tid, &stat, &status)
        })
        .collect()
}

/// Start the guard (None when disabled); lift RT throttling first when
/// configured (journalled). `journal` is the partition journal; each boost
/// is also told to `events` (the daemon's metrics), by RT CPU.
pub fn start(
    host: &Host,
    cfg: &StarvationConfig,
    rt: &CpuSet,
    journal: &Path,
    events: Option<EventSink>,
) -> Result<Option<(Guard, String)>, HostError> {
    if !cfg.enabled {
        return Ok(None);
    }
    let mut j = Journal::append_to(host, journal)?;
    let p = cfg.policy();
    let mut line = format!(
        "guard running on the kernel threads of RT CPUs {rt}: starved {} s → SCHED_DEADLINE {} µs every {} ms for {} s",
        cfg.threshold_s, cfg.boost_runtime_us, cfg.boost_period_ms, cfg.boost_s
    );
    let mut lifted = None;
    let mut held = None;
    if cfg.lift_rt_throttling {
        match host.read_opt(RT_RUNTIME) {
            Some(old) => {
                let knob = ResourceKnobId::RtThrottling;
                held = knobs::set(host, &mut j, knob, Path::new(RT_RUNTIME), "-1")?;
                line.push_str(&format!(
                    "; RT throttling lifted (sched_rt_runtime_us -1, was {})",
                    old.trim()
                ));
                lifted = Some(old.trim().to_string());
            }
            None => line.push_str("; RT throttling: not available (no sched_rt_runtime_us)"),
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (h, s, rt) = (host.clone(), stop.clone(), rt.clone());
    let handle = std::thread::Builder::new()
        .name("rtmgr-starve".into())
        .spawn(move || run(&h, p, &rt, j, &s, lifted, events))
        .map_err(|e| crate::host::io_err("spawn", Path::new("rtmgr-starve"), e))?;
    Ok(Some((Guard { held, stop, handle }, line)))
}

fn run(
    host: &Host,
    policy: rtmgr_core::resources::starvation::GuardPolicy,
    rt: &CpuSet,
    mut j: Journal,
    stop: &AtomicBool,
    lifted: Option<String>,
    events: Option<EventSink>,
) -> Vec<String> {
    let mut tracker = Tracker::new(policy);
    let mut old: BTreeMap<(u32, u64), SchedAttr> = BTreeMap::new();
    let mut problems = Vec::new();
    // stalld looks every threshold/20 (at least 1 s); a stop is noticed within 100 ms.
    let poll_ns = (policy.threshold_ns / 20).max(1_000_000_000);
    let mut next = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let now = rtmgr_sys::time::mono_ns();
        if now >= next {
            next = now + poll_ns;
            let d = tracker.observe(now, &sample(host, rt));
            for key in d.unboost {
                unboost(host, &mut j, key, &mut old, &mut problems);
            }
            for (tid, start, comm, starved) in d.boost {
                match boost(host, &mut j, tid, start, &policy) {
                    Ok(a) => {
                        tracing::warn!(
                            "{comm}-{tid} starved for {} s: boosted",
                            starved / 1_000_000_000
                        );
                        old.insert((tid, start), a);
                        if let (Some(ev), Some(cpu)) = (&events, guarded_cpu(&comm, rt)) {
                            ev.0.starvation_boost(cpu);
                        }
                    }
                    Err(e) if e.is_gone() => {}
                    Err(e) => tracing::warn!("{comm}-{tid} starved, boost refused: {e}"),
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let keys: Vec<(u32, u64)> = old.keys().copied().collect();
    for key in keys {
        unboost(host, &mut j, key, &mut old, &mut problems);
    }
    // The guard stops: throttling back at once (the journal keeps the record
    // for reset; writing the old value twice is harmless).
    if let Some(v) = lifted {
        if let Err(e) = host.write(RT_RUNTIME, &v) {
            problems.push(format!("sched_rt_runtime_us back to {v}: {e}"));
        }
    }
    problems
}

fn boost(
    host: &Host,
    j: &mut Journal,
    tid: u32,
    start_time: u64,
    p: &rtmgr_core::resources::starvation::GuardPolicy,
) -> Result<SchedAttr, HostError> {
    let before = host.get_attr(tid)?;
    j.record(&Record::Boost {
        tid,
        start_time,
        old: before,
    })?;
    let attr = SchedAttr {
        policy: SCHED_DEADLINE,
        runtime: p.runtime_ns,
        deadline: p.period_ns,
        period: p.period_ns,
        ..SchedAttr::default()
    };
    if let Err(e) = host.set_attr(tid, &attr) {
        let _ = j.record(&Record::Unboost { tid });
        return Err(e);
    }
    Ok(before)
}

fn unboost(
    host: &Host,
    j: &mut Journal,
    key: (u32, u64),
    old: &mut BTreeMap<(u32, u64), SchedAttr>,
    problems: &mut Vec<String>,
) {
    let Some(attr) = old.remove(&key) else { return };
    let (tid, start) = key;
    if tasks::same_task(host, tid, start) {
        if let Err(e) = host.set_attr(tid, &attr) {
            if !e.is_gone() {
                problems.push(format!("thread {tid} back from its boost: {e}"));
                return;
            }
        }
    }
    let _ = j.record(&Record::Unboost { tid });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::FakeMachine;

    #[test]
    fn kernel_threads_of_rt_cpus_are_sampled_and_throttling_comes_back() {
        let m = FakeMachine::new(2)
            .task(22, "ksoftirqd/1")
            .with(|t| {
                t.kthread = true;
                t.per_cpu = true
            })
            .task(15, "ksoftirqd/0")
            .with(|t| {
                t.kthread = true;
                t.per_cpu = true
            })
            .task(300, "ksoftirqd/1")
            .build();
        let host = m.host();
        let rt = CpuSet::single(1);
        let s = sample(&host, &rt);
        assert_eq!(s.iter().map(|s| s.tid).collect::<Vec<_>>(), vec![22]);
        let jp = Path::new("/run/rtmgr/journal.jsonl");
        Journal::create(&host, jp).unwrap();
        std::fs::create_dir_all(m.root().join("proc/sys/kernel")).unwrap();
        std::fs::write(
            m.root().join("proc/sys/kernel/sched_rt_runtime_us"),
            "950000\n",
        )
        .unwrap();
        let cfg = StarvationConfig {
            lift_rt_throttling: true,
            ..Default::default()
        };
        let (g, line) = start(&host, &cfg, &rt, jp, None).unwrap().unwrap();
        assert!(line.contains("was 950000"), "{line}");
        assert_eq!(host.read(RT_RUNTIME).unwrap().trim(), "-1");
        assert_eq!(g.held.as_ref().map(|h| h.want.as_str()), Some("-1"));
        // Lifted throttling is a knob: verified, repaired.
        let held: Vec<Held> = g.held.iter().cloned().collect();
        assert!(knobs::verify(&host, jp, &held).unwrap().is_empty());
        host.write(RT_RUNTIME, "950000").unwrap();
        let drift = knobs::verify(&host, jp, &held).unwrap();
        assert_eq!(drift.len(), 1, "{drift:?}");
        assert_eq!(
            knobs::repair(&host, jp, &drift).unwrap(),
            vec![("rt_throttling", 1)]
        );
        assert_eq!(host.read(RT_RUNTIME).unwrap().trim(), "-1");
        // kill -9 now: reset restores from the journal alone.
        assert!(knobs::undo(&host, jp).unwrap().is_empty());
        assert_eq!(host.read(RT_RUNTIME).unwrap().trim(), "950000");
        host.write(RT_RUNTIME, "-1").unwrap();
        assert!(g.stop().is_empty());
        assert_eq!(host.read(RT_RUNTIME).unwrap().trim(), "950000");
        let off = StarvationConfig {
            enabled: false,
            ..Default::default()
        };
        assert!(start(&host, &off, &rt, jp, None).unwrap().is_none());
    }
}
