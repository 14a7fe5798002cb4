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
        self.handle.thread().unpark();
        self.handle
            .join()
            .unwrap_or_else(|_| vec!["starvation guard panicked".into()])
    }
}

/// The per-CPU kernel threads of the RT CPUs, found among kthreadd's
/// children (`/proc/2/task/2/children`, one read) rather than in every
/// task's `stat`: a thread's name is read when it first appears, and all
/// names again every `RENAME_EVERY` looks (a thread id reused meanwhile).
#[derive(Debug, Default)]
pub struct KernelThreads {
    /// Per kernel thread: the RT CPU it works for, if any.
    guarded: BTreeMap<u32, Option<u32>>,
    looks: u64,
}

/// Looks between two readings of every kernel thread's name.
const RENAME_EVERY: u64 = 10;

impl KernelThreads {
    pub fn sample(&mut self, host: &Host, rt: &CpuSet) -> Vec<Sample> {
        let Some(children) = host.read_opt("/proc/2/task/2/children") else {
            return sample(host, rt);
        };
        let tids: std::collections::BTreeSet<u32> = children
            .split_whitespace()
            .filter_map(|t| t.parse().ok())
            .collect();
        if self.looks.is_multiple_of(RENAME_EVERY) {
            self.guarded.clear();
        }
        self.looks += 1;
        self.guarded.retain(|t, _| tids.contains(t));
        for &tid in &tids {
            self.guarded.entry(tid).or_insert_with(|| {
                tasks::info(host, tid, tid)
                    .filter(|t| t.kthread)
                    .and_then(|t| guarded_cpu(&t.comm, rt))
            });
        }
        let guarded = self.guarded.iter().filter(|(_, cpu)| cpu.is_some());
        guarded
            .filter_map(|(&tid, _)| read_sample(host, tid))
            .collect()
    }
}

fn read_sample(host: &Host, tid: u32) -> Option<Sample> {
    let stat = host.read_opt(format!("/proc/{tid}/stat"))?;
    let status = host.read_opt(format!("/proc/{tid}/status"))?;
    Sample::parse(tid, &stat, &status)
}

/// The per-CPU kernel threads of the RT CPUs, as samples, from every task
/// (without /proc/PID/task/TID/children, CONFIG_PROC_CHILDREN).
pub fn sample(host: &Host, rt: &CpuSet) -> Vec<Sample> {
    let Ok(all) = tasks::all(host) else {
        return Vec::new();
    };
    all.into_iter()
        .filter(|t| t.kthread && guarded_cpu(&t.comm, rt).is_some())
        .filter_map(|t| read_sample(host, t.tid))
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
    // stalld looks every threshold/20 (at least 1 s); a stop unparks it.
    let poll_ns = (policy.threshold_ns / 20).max(1_000_000_000);
    let mut next = 0u64;
    let mut kthreads = KernelThreads::default();
    while !stop.load(Ordering::Relaxed) {
        let now = rtmgr_sys::time::mono_ns();
        if now >= next {
            next = now + poll_ns;
            let d = tracker.observe(now, &kthreads.sample(host, rt));
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
        // Until the next look; `Guard::stop` unparks it.
        let left = next.saturating_sub(rtmgr_sys::time::mono_ns());
        std::thread::park_timeout(std::time::Duration::from_nanos(left));
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
    fn on_this_machine_kthreadds_children_give_the_same_softirq_threads_as_every_task() {
        let host = Host::real();
        if host.read_opt("/proc/2/task/2/children").is_none() {
            eprintln!("skipped: no /proc/2/task/2/children (CONFIG_PROC_CHILDREN)");
            return;
        }
        let rt = crate::cpus::online(&host).unwrap();
        let softirq = |s: Vec<Sample>| -> Vec<u32> {
            let mut v: Vec<u32> = s
                .iter()
                .filter(|s| {
                    tasks::info(&host, s.tid, s.tid)
                        .is_some_and(|t| t.comm.starts_with("ksoftirqd/"))
                })
                .map(|s| s.tid)
                .collect();
            v.sort();
            v
        };
        let every = softirq(sample(&host, &rt));
        assert_eq!(every.len(), rt.len(), "one ksoftirqd per online CPU");
        assert_eq!(softirq(KernelThreads::default().sample(&host, &rt)), every);
    }

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
        // The same from kthreadd's children alone (300 is no kernel thread,
        // whatever its name says); a thread gone from the list is forgotten.
        let children = m.root().join("proc/2/task/2/children");
        std::fs::create_dir_all(children.parent().unwrap()).unwrap();
        std::fs::write(&children, "15 22 300 ").unwrap();
        let mut k = KernelThreads::default();
        let tids = |s: Vec<Sample>| s.iter().map(|s| s.tid).collect::<Vec<_>>();
        assert_eq!(tids(k.sample(&host, &rt)), vec![22]);
        assert_eq!(tids(k.sample(&host, &rt)), vec![22]);
        std::fs::write(&children, "15 300").unwrap();
        assert!(k.sample(&host, &rt).is_empty());
        assert_eq!(k.guarded.len(), 2);
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
