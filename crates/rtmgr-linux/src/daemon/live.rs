//! The live figures of the `status` reply (issue 23, `rtmgr top`): the
//! latency guard's recent samples per RT CPU (ARTiS §2.2–2.3), evictions and
//! starvation boosts, and steal. A [`LiveEvents`] sink that keeps a bounded
//! ring per RT CPU and passes every event on to the metrics when they run.

use crate::balance::{EventSink, LiveEvents};
use crate::Host;
use rtmgr_core::balance::LendingStatus;
use rtmgr_core::protocol::{Guest, LatencyWindow, Lending, LiveCpu, LiveStatus, LIVE_VERSION};
use rtmgr_core::CpuSet;
use rtmgr_sys::time::mono_ns;
use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

/// The window of a latency summary (ns).
pub const WINDOW_NS: u64 = 1_000_000_000;
/// How many past windows the sparkline covers.
pub const HISTORY: usize = 30;
/// Samples kept per RT CPU: 30 s of the guard's 10 ms samples, about 64 KiB.
const RING: usize = 4096;
/// The windows end where the guard's samples were last passed on (an idle
/// balancer does that once a second), unless that is older than this.
const FORWARDED_FRESH_NS: u64 = 2 * WINDOW_NS;

#[derive(Default)]
struct CpuFigures {
    /// (when, latency) of the latest samples, oldest first.
    recent: VecDeque<(u64, u64)>,
    samples: u64,
    evictions: BTreeMap<&'static str, u64>,
    boosts: u64,
    /// From the balancer's last step: guests, host-stalled samples so far,
    /// lending on or off and why (None until the balancer has stepped).
    guests: Option<Vec<u32>>,
    host_stalls: Option<u64>,
    lending: Option<Lending>,
    /// Every sample taken before this was passed on (`guard_forwarded`).
    forwarded_to: Option<u64>,
}

/// What the daemon has seen of each RT CPU; cheap to feed (one uncontended
/// lock per event), bounded in memory, summarised on a `status` request.
pub struct LiveFigures {
    cpus: BTreeMap<u32, Mutex<CpuFigures>>,
    forward: Option<EventSink>,
}

impl LiveFigures {
    /// Figures of the RT CPUs `rt`; events go on to `forward` (the metrics).
    pub fn new(rt: &CpuSet, forward: Option<EventSink>) -> LiveFigures {
        LiveFigures {
            cpus: rt.iter().map(|c| (c, Mutex::default())).collect(),
            forward,
        }
    }

    fn with(&self, cpu: u32, f: impl FnOnce(&mut CpuFigures)) {
        if let Some(m) = self.cpus.get(&cpu) {
            f(&mut m.lock().unwrap_or_else(|p| p.into_inner()));
        }
    }

    /// The figures now (`now_ns` on the monotonic clock), steal from /proc/stat.
    pub fn snapshot(&self, host: &Host, now_ns: u64) -> LiveStatus {
        let steal = host
            .read_opt("/proc/stat")
            .map(|t| rtmgr_core::proctext::cpu_times(&t));
        let cpus = self
            .cpus
            .iter()
            .map(|(&cpu, m)| {
                // Copy under the lock, read /proc after: a sink never waits
                // for a file read (balance/events.rs).
                let (mut live, guests) = {
                    let f = m.lock().unwrap_or_else(|p| p.into_inner());
                    (figures_of(&f, now_ns), f.guests.clone())
                };
                live.cpu = cpu;
                live.steal_ticks = steal.as_ref().and_then(|s| s.get(&cpu)).map(|t| t.steal);
                live.guests = guests.map(|g| g.iter().map(|&tid| guest(host, tid)).collect());
                live
            })
            .collect();
        LiveStatus {
            version: LIVE_VERSION,
            window_ms: WINDOW_NS / 1_000_000,
            cpus,
        }
    }
}

/// One RT CPU's figures but its guests and steal (under its lock: no I/O).
/// The windows end where the samples were last passed on, so the last one
/// is whole (not the part of a second forwarded so far), when that is fresh.
fn figures_of(f: &CpuFigures, now_ns: u64) -> LiveCpu {
    let end = match f.forwarded_to {
        Some(t) if now_ns.saturating_sub(t) < FORWARDED_FRESH_NS => t.min(now_ns),
        _ => now_ns,
    };
    let mut live = summarise(&f.recent, end);
    live.guard_samples = f.samples;
    live.evictions = f
        .evictions
        .iter()
        .map(|(k, v)| (k.to_string(), *v))
        .collect();
    live.starvation_boosts = f.boosts;
    live.host_stalls = f.host_stalls;
    live.lending = f.lending.clone();
    live
}

fn guest(host: &Host, tid: u32) -> Guest {
    Guest {
        pid: tid,
        comm: host
            .read_opt(format!("/proc/{tid}/comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_default(),
        evictions: 0,
    }
}

/// The last window's summary and the largest sample of each of the
/// `HISTORY` windows before now (0 where a window had none).
fn summarise(recent: &VecDeque<(u64, u64)>, now_ns: u64) -> LiveCpu {
    let mut last = Vec::new();
    let mut history = vec![0u64; HISTORY];
    for &(at, ns) in recent {
        let age = now_ns.saturating_sub(at) / WINDOW_NS;
        if age == 0 {
            last.push(ns);
        }
        if (age as usize) < HISTORY {
            let i = HISTORY - 1 - age as usize;
            history[i] = history[i].max(ns);
        }
    }
    let first = recent
        .front()
        .map(|&(at, _)| (now_ns.saturating_sub(at) / WINDOW_NS) as usize);
    // No leading zeros for the time before the first sample.
    let keep = first.map_or(0, |a| (a + 1).min(HISTORY));
    LiveCpu {
        latency: LatencyWindow::of(&mut last),
        latency_history_ns: history.split_off(HISTORY - keep),
        ..LiveCpu::default()
    }
}

impl LiveEvents for LiveFigures {
    fn guard_sample(&self, cpu: u32, latency_ns: u64) {
        self.guard_sample_at(cpu, mono_ns(), latency_ns);
    }

    fn guard_sample_at(&self, cpu: u32, at_ns: u64, latency_ns: u64) {
        self.with(cpu, |f| {
            if f.recent.len() == RING {
                f.recent.pop_front();
            }
            f.recent.push_back((at_ns, latency_ns));
            f.samples += 1;
        });
        if let Some(s) = &self.forward {
            s.0.guard_sample_at(cpu, at_ns, latency_ns);
        }
    }

    fn guard_forwarded(&self, cpu: u32, upto_ns: u64) {
        self.with(cpu, |f| f.forwarded_to = Some(upto_ns));
        if let Some(s) = &self.forward {
            s.0.guard_forwarded(cpu, upto_ns);
        }
    }

    fn eviction(&self, cpu: u32, cause: &'static str, n: u64) {
        self.with(cpu, |f| *f.evictions.entry(cause).or_default() += n);
        if let Some(s) = &self.forward {
            s.0.eviction(cpu, cause, n);
        }
    }

    fn step(&self, cpu: u32, guests: &[u32], host_stalled: u64, lending: &LendingStatus) {
        self.with(cpu, |f| {
            f.guests = Some(guests.to_vec());
            f.host_stalls = Some(f.host_stalls.unwrap_or(0) + host_stalled);
            let why = match &lending.reason {
                Some(r) => r.clone(),
                None => format!(
                    "lending on: {} lent windows judged, {} stalled by the host",
                    lending.lends, lending.lends_stalled
                ),
            };
            f.lending = Some(Lending {
                on: lending.lending,
                why,
            });
        });
        if let Some(s) = &self.forward {
            s.0.step(cpu, guests, host_stalled, lending);
        }
    }

    fn starvation_boost(&self, cpu: u32) {
        self.with(cpu, |f| f.boosts += 1);
        if let Some(s) = &self.forward {
            s.0.starvation_boost(cpu);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    #[derive(Default)]
    struct Count(AtomicU64);
    impl LiveEvents for Count {
        fn guard_sample(&self, _: u32, _: u64) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn the_last_window_is_summarised_and_older_ones_make_the_sparkline() {
        let s = 1_000_000_000u64;
        let now = 100 * s;
        // 3 s ago: 900 ns; 1 s ago: 500; in the last second: 10..=100.
        let mut recent = VecDeque::from([(now - 3 * s, 900), (now - s - 1, 500)]);
        recent.extend((1..=10).map(|i| (now - s / 2, i * 10)));
        let live = summarise(&recent, now);
        let w = live.latency.unwrap();
        assert_eq!((w.samples, w.p50_ns, w.max_ns), (10, 60, 100));
        assert_eq!(live.latency_history_ns, vec![900, 0, 500, 100]);
        assert_eq!(summarise(&VecDeque::new(), now), LiveCpu::default());
    }

    /// An idle balancer passes the samples on once a second: the last
    /// window ends there (whole), unless that was long ago.
    #[test]
    fn the_windows_end_where_the_samples_were_last_passed_on() {
        let s = 1_000_000_000u64;
        let (t, p) = (100 * s, 11);
        let live = LiveFigures::new(&CpuSet::parse_list(&p.to_string()).unwrap(), None);
        for i in 1..=10 {
            live.guard_sample_at(p, t - s + i * s / 10 - 1, i * 10);
        }
        let last = |now| {
            let f = live.cpus[&p].lock().unwrap();
            figures_of(&f, now).latency.map_or(0, |w| w.samples)
        };
        // Nothing said yet: the window ends now, 0.9 s after the 10 samples' first.
        assert_eq!(last(t + 9 * s / 10), 1);
        live.guard_forwarded(p, t);
        assert_eq!(last(t + 9 * s / 10), 10);
        assert_eq!(last(t + FORWARDED_FRESH_NS + 1), 0);
    }

    #[test]
    fn events_are_kept_per_rt_cpu_bounded_and_passed_on() {
        let count = Arc::new(Count::default());
        let live = LiveFigures::new(
            &CpuSet::parse_list("1").unwrap(),
            Some(EventSink(count.clone())),
        );
        for _ in 0..RING + 5 {
            live.guard_sample(1, 1000);
        }
        live.guard_sample(0, 1000); // not an RT CPU: passed on only
        live.eviction(1, "guard", 2);
        live.starvation_boost(1);
        let m = crate::fake::FakeMachine::new(2).build();
        m.host()
            .write(
                "/proc/stat",
                "cpu  0 0 0 0 0 0 0 7\ncpu0 0 0 0 0\ncpu1 1 0 0 5 0 0 0 7\n",
            )
            .unwrap();
        let snap = live.snapshot(&m.host(), mono_ns());
        assert_eq!(snap.version, LIVE_VERSION);
        let cpu = &snap.cpus[0];
        assert_eq!(
            (snap.cpus.len(), cpu.cpu, cpu.guard_samples),
            (1, 1, RING as u64 + 5)
        );
        assert_eq!(cpu.latency.unwrap().samples, RING as u64);
        assert_eq!((cpu.evictions["guard"], cpu.starvation_boosts), (2, 1));
        assert_eq!(count.0.load(Ordering::Relaxed), RING as u64 + 6);
        assert_eq!((cpu.guests.clone(), cpu.host_stalls), (None, None));
        assert_eq!(cpu.steal_ticks, Some(7));
    }

    #[test]
    fn the_balancer_step_fills_guests_host_stalls_and_lending() {
        let live = LiveFigures::new(&CpuSet::parse_list("1").unwrap(), None);
        let m = crate::fake::FakeMachine::new(2).build();
        std::fs::create_dir_all(m.host().path("/proc/77")).unwrap();
        m.host().write("/proc/77/comm", "stress-ng\n").unwrap();
        let off = LendingStatus {
            cpu: 1,
            lending: false,
            reason: Some("lending off on CPU 1: 1 of 3 lent windows stalled by the host".into()),
            retry_at_ns: Some(5),
            lends: 3,
            lends_stalled: 1,
            lends_late: 0,
            stalled_steal_ns: 10_000_000,
            guest_cap: None,
            off_periods: Vec::new(),
        };
        live.step(1, &[77], 4, &off);
        live.step(1, &[], 2, &off);
        live.step(0, &[9], 1, &off); // not an RT CPU
        let cpu = &live.snapshot(&m.host(), mono_ns()).cpus[0];
        assert_eq!(cpu.host_stalls, Some(6));
        assert_eq!(cpu.guests, Some(vec![]));
        let l = cpu.lending.clone().unwrap();
        assert!(!l.on && l.why.contains("stalled by the host"), "{l:?}");
        live.step(
            1,
            &[77],
            0,
            &LendingStatus {
                lending: true,
                reason: None,
                ..off
            },
        );
        let cpu = &live.snapshot(&m.host(), mono_ns()).cpus[0];
        let g = cpu.guests.clone().unwrap();
        assert_eq!((g[0].pid, g[0].comm.as_str()), (77, "stress-ng"));
        assert!(cpu.lending.clone().unwrap().on);
    }
}
