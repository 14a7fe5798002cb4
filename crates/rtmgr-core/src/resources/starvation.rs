//! The starvation guard's policy (stalld's job beside isolated CPUs; DROPS
//! §4.1: the manager owns the RT CPUs, so it answers for the kernel's own
//! per-CPU work there; McKenney §5: an RT task that never sleeps starves the
//! kernel threads bound to its CPU). A per-CPU kernel thread of an RT CPU
//! (ksoftirqd/N, kworker/N:*, rcuc/N) that is runnable and has neither run
//! nor switched since it was first seen so is starving; past the threshold
//! it is boosted with SCHED_DEADLINE for a few periods, then put back.
//! stalld's defaults: 20 µs every 1 s, for 3 s (its threshold is 60 s; the
//! issue asks for 30 s). Pure: samples in, decisions out.

use crate::CpuSet;
use std::collections::BTreeMap;

/// The guard's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GuardPolicy {
    /// Starved this long → boosted.
    pub threshold_ns: u64,
    /// SCHED_DEADLINE runtime and period of a boost.
    pub runtime_ns: u64,
    pub period_ns: u64,
    /// How long a boost lasts before the thread is put back.
    pub boost_ns: u64,
}

impl Default for GuardPolicy {
    fn default() -> Self {
        GuardPolicy {
            threshold_ns: 30_000_000_000,
            runtime_ns: 20_000,
            period_ns: 1_000_000_000,
            boost_ns: 3_000_000_000,
        }
    }
}

impl GuardPolicy {
    pub fn validate(&self) -> Result<(), String> {
        if self.runtime_ns < 1_024 || self.runtime_ns > self.period_ns {
            return Err(format!(
                "boost runtime {} ns must be at least 1024 ns (the kernel's minimum) and at most the period {} ns",
                self.runtime_ns, self.period_ns
            ));
        }
        if self.threshold_ns < 1_000_000_000 || self.boost_ns < self.period_ns {
            return Err("threshold at least 1 s, boost at least one period".into());
        }
        Ok(())
    }
}

/// `[starvation]` of the daemon's config.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StarvationConfig {
    /// Run the guard beside the RT CPUs.
    #[serde(default = "yes")]
    pub enabled: bool,
    #[serde(default = "default_threshold_s")]
    pub threshold_s: u64,
    #[serde(default = "default_runtime_us")]
    pub boost_runtime_us: u64,
    #[serde(default = "default_period_ms")]
    pub boost_period_ms: u64,
    #[serde(default = "default_boost_s")]
    pub boost_s: u64,
    /// With the guard running, lift RT throttling (sched_rt_runtime_us = -1):
    /// an RT task may then use all of its CPU, and the guard is what keeps
    /// the CPU's kernel threads alive. The old value comes back on stop.
    #[serde(default)]
    pub lift_rt_throttling: bool,
}

fn yes() -> bool {
    true
}
fn default_threshold_s() -> u64 {
    30
}
fn default_runtime_us() -> u64 {
    20
}
fn default_period_ms() -> u64 {
    1000
}
fn default_boost_s() -> u64 {
    3
}

impl Default for StarvationConfig {
    fn default() -> Self {
        StarvationConfig {
            enabled: true,
            threshold_s: default_threshold_s(),
            boost_runtime_us: default_runtime_us(),
            boost_period_ms: default_period_ms(),
            boost_s: default_boost_s(),
            lift_rt_throttling: false,
        }
    }
}

impl StarvationConfig {
    pub fn policy(&self) -> GuardPolicy {
        GuardPolicy {
            threshold_ns: self.threshold_s.saturating_mul(1_000_000_000),
            runtime_ns: self.boost_runtime_us.saturating_mul(1_000),
            period_ns: self.boost_period_ms.saturating_mul(1_000_000),
            boost_ns: self.boost_s.saturating_mul(1_000_000_000),
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        if self.lift_rt_throttling && !self.enabled {
            return Err(
                "[starvation] lift_rt_throttling needs the guard (enabled = true): without it a busy RT task starves its CPU's kernel threads for good".into(),
            );
        }
        self.policy()
            .validate()
            .map_err(|e| format!("[starvation] {e}"))
    }
}

/// One thread as /proc shows it at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sample {
    pub tid: u32,
    pub start_time: u64,
    pub comm: String,
    /// State 'R' (runnable or running).
    pub runnable: bool,
    /// Voluntary + involuntary context switches.
    pub switches: u64,
    /// User + system CPU time, clock ticks.
    pub cpu_ticks: u64,
}

impl Sample {
    /// From the text of /proc/TID/stat and /proc/TID/status.
    pub fn parse(tid: u32, stat: &str, status: &str) -> Option<Sample> {
        let st = crate::proctext::TaskStat::parse(stat.as_bytes())?;
        let get = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0)
        };
        Some(Sample {
            tid,
            start_time: st.starttime,
            comm: st.comm.to_string(),
            runnable: st.state == 'R',
            switches: get("voluntary_ctxt_switches:") + get("nonvoluntary_ctxt_switches:"),
            cpu_ticks: st.utime + st.stime,
        })
    }
}

/// The RT CPU a per-CPU kernel thread the guard watches is bound to, from its
/// name: ksoftirqd/N, kworker/N:M (and kworker/N:MH), rcuc/N.
pub fn guarded_cpu(comm: &str, rt: &CpuSet) -> Option<u32> {
    let n = if let Some(r) = comm.strip_prefix("ksoftirqd/") {
        r.parse().ok()?
    } else if let Some(r) = comm.strip_prefix("rcuc/") {
        r.parse().ok()?
    } else if let Some(r) = comm.strip_prefix("kworker/") {
        let (cpu, _) = r.split_once(':')?;
        cpu.parse().ok()?
    } else {
        return None;
    };
    rt.contains(n).then_some(n)
}

/// What to do now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Decisions {
    /// Boost these: (tid, start_time, comm, starved for ns).
    pub boost: Vec<(u32, u64, String, u64)>,
    /// Put these back: (tid, start_time).
    pub unboost: Vec<(u32, u64)>,
}

#[derive(Debug, Clone, Copy)]
struct Watch {
    since_ns: u64,
    switches: u64,
    cpu_ticks: u64,
}

/// The guard's memory between samples.
#[derive(Debug, Clone, Default)]
pub struct Tracker {
    pub policy: GuardPolicy,
    watching: BTreeMap<(u32, u64), Watch>,
    /// Boosted threads and when their boost ends.
    boosted: BTreeMap<(u32, u64), u64>,
}

impl Tracker {
    pub fn new(policy: GuardPolicy) -> Self {
        Tracker {
            policy,
            ..Tracker::default()
        }
    }

    /// Threads boosted now.
    pub fn boosted(&self) -> impl Iterator<Item = &(u32, u64)> {
        self.boosted.keys()
    }

    /// One look at the watched threads at `now_ns`: a thread runnable with
    /// the same switches and CPU time as when first seen so is starving
    /// since then (stalld's merge of `since`); anything else starts over.
    /// Boosts end after `boost_ns`, or when the thread is gone.
    pub fn observe(&mut self, now_ns: u64, samples: &[Sample]) -> Decisions {
        let mut d = Decisions::default();
        let present: Vec<(u32, u64)> = samples.iter().map(|s| (s.tid, s.start_time)).collect();
        self.watching.retain(|k, _| present.contains(k));
        let ended: Vec<(u32, u64)> = self
            .boosted
            .iter()
            .filter(|(k, until)| **until <= now_ns || !present.contains(k))
            .map(|(k, _)| *k)
            .collect();
        for k in ended {
            self.boosted.remove(&k);
            d.unboost.push(k);
        }
        for s in samples {
            let key = (s.tid, s.start_time);
            if self.boosted.contains_key(&key) {
                continue;
            }
            if !s.runnable {
                self.watching.remove(&key);
                continue;
            }
            let w = self.watching.entry(key).or_insert(Watch {
                since_ns: now_ns,
                switches: s.switches,
                cpu_ticks: s.cpu_ticks,
            });
            if w.switches != s.switches || w.cpu_ticks != s.cpu_ticks {
                *w = Watch {
                    since_ns: now_ns,
                    switches: s.switches,
                    cpu_ticks: s.cpu_ticks,
                };
                continue;
            }
            let starved = now_ns - w.since_ns;
            if starved >= self.policy.threshold_ns {
                d.boost.push((s.tid, s.start_time, s.comm.clone(), starved));
                self.watching.remove(&key);
                self.boosted.insert(key, now_ns + self.policy.boost_ns);
            }
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    /// Recorded on this VM (a 2-vCPU guest, kernel 6.x), with the state and
    /// counters edited to tell the story of each test.
    fn ksoftirqd(state: &str, switches: u64, ticks: u64) -> Sample {
        let stat = format!(
            "22 (ksoftirqd/1) {state} 2 0 0 0 -1 69238848 0 0 0 0 {ticks} 0 0 0 20 0 1 0 37 0 0 18446744073709551615 0 0 0 0 0 0 0 2147483647 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 0"
        );
        let status = format!(
            "Name:\tksoftirqd/1\nState:\t{state} (running)\nvoluntary_ctxt_switches:\t{switches}\nnonvoluntary_ctxt_switches:\t0\n"
        );
        Sample::parse(22, &stat, &status).unwrap()
    }

    #[test]
    fn samples_parse_from_proc_text() {
        let s = ksoftirqd("R", 4711, 9);
        assert_eq!(
            (s.tid, s.start_time, s.comm.as_str()),
            (22, 37, "ksoftirqd/1")
        );
        assert!(s.runnable);
        assert_eq!((s.switches, s.cpu_ticks), (4711, 9));
        assert!(!ksoftirqd("S", 1, 1).runnable);
    }

    #[test]
    fn only_per_cpu_kernel_threads_of_rt_cpus_are_guarded() {
        let rt = CpuSet::single(1);
        assert_eq!(guarded_cpu("ksoftirqd/1", &rt), Some(1));
        assert_eq!(guarded_cpu("kworker/1:2H", &rt), Some(1));
        assert_eq!(guarded_cpu("rcuc/1", &rt), Some(1));
        assert_eq!(guarded_cpu("ksoftirqd/0", &rt), None);
        assert_eq!(guarded_cpu("kworker/u4:1", &rt), None);
        assert_eq!(guarded_cpu("migration/1", &rt), None);
    }

    #[test]
    fn a_thread_starved_past_the_threshold_is_boosted_then_put_back() {
        let mut t = Tracker::new(GuardPolicy::default());
        // Runnable, never runs: starving since the first look.
        for sec in [0, 10, 29] {
            assert_eq!(
                t.observe(sec * S, &[ksoftirqd("R", 4711, 9)]),
                Decisions::default()
            );
        }
        let d = t.observe(30 * S, &[ksoftirqd("R", 4711, 9)]);
        assert_eq!(d.boost, vec![(22, 37, "ksoftirqd/1".to_string(), 30 * S)]);
        assert_eq!(t.boosted().count(), 1);
        // Boosted: not boosted again; after 3 s put back.
        assert_eq!(
            t.observe(31 * S, &[ksoftirqd("R", 4720, 10)]),
            Decisions::default()
        );
        let d = t.observe(33 * S, &[ksoftirqd("S", 4730, 10)]);
        assert_eq!(d.unboost, vec![(22, 37)]);
        assert_eq!(t.boosted().count(), 0);
    }

    #[test]
    fn running_switching_or_sleeping_threads_start_over() {
        let mut t = Tracker::new(GuardPolicy::default());
        t.observe(0, &[ksoftirqd("R", 1, 1)]);
        // It ran (CPU time moved): not starving, the clock starts again.
        t.observe(20 * S, &[ksoftirqd("R", 1, 2)]);
        assert!(t.observe(40 * S, &[ksoftirqd("R", 1, 2)]).boost.is_empty());
        // It slept in between: starts over again.
        t.observe(45 * S, &[ksoftirqd("S", 2, 2)]);
        t.observe(46 * S, &[ksoftirqd("R", 2, 2)]);
        assert!(t.observe(70 * S, &[ksoftirqd("R", 2, 2)]).boost.is_empty());
        assert_eq!(t.observe(76 * S, &[ksoftirqd("R", 2, 2)]).boost.len(), 1);
        // Gone while boosted: put back (nothing to do but forget it).
        assert_eq!(t.observe(77 * S, &[]).unboost, vec![(22, 37)]);
    }

    #[test]
    fn stalld_defaults_validate_and_nonsense_does_not() {
        assert!(GuardPolicy::default().validate().is_ok());
        let c: StarvationConfig = toml::from_str("").unwrap();
        assert_eq!(c.policy(), GuardPolicy::default());
        let no: StarvationConfig =
            toml::from_str("enabled = false\nlift_rt_throttling = true").unwrap();
        assert!(no.validate().is_err());
        let short: StarvationConfig = toml::from_str("boost_runtime_us = 0").unwrap();
        assert!(short.validate().is_err());
        let p = GuardPolicy {
            runtime_ns: 2 * S,
            ..Default::default()
        };
        assert!(p.validate().is_err());
    }
}
