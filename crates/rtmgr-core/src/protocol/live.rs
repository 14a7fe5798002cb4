//! The live figures of a `status` reply, for `rtmgr top` (issue 23; ARTiS
//! §2.2–2.3: the latency guard's samples and its evictions per RT CPU;
//! DROPS §4.1: the manager answers what it owns). Every field is optional or
//! defaulted, so a client reads the reply of an older daemon (no `live`) and
//! an older client ignores what it does not know.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The version of `StatusInfo::live`; a client shows what it knows of a newer one.
pub const LIVE_VERSION: u32 = 1;

/// What the daemon sees right now, per RT CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct LiveStatus {
    pub version: u32,
    /// The window the latency summaries cover (ms).
    pub window_ms: u64,
    /// The RT CPUs, in order.
    #[serde(default)]
    pub cpus: Vec<LiveCpu>,
}

/// One RT CPU now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct LiveCpu {
    pub cpu: u32,
    /// The guard's wake-up latency over the last window (None: no sample in it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency: Option<LatencyWindow>,
    /// The largest sample of each of the last windows, oldest first, ns (a sparkline).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_history_ns: Vec<u64>,
    /// Guard samples since the daemon started.
    #[serde(default)]
    pub guard_samples: u64,
    /// Steal since boot, clock ticks (USER_HZ) of /proc/stat; None where unread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steal_ticks: Option<u64>,
    /// Host stalls seen (the trustworthy-numbers issue); None: not measured by this daemon.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_stalls: Option<u64>,
    /// Guests sent away since start, by cause ("guard", "kernel_entry").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub evictions: BTreeMap<String, u64>,
    /// Starved tasks given CPU time since start.
    #[serde(default)]
    pub starvation_boosts: u64,
    /// Ordinary tasks lent this CPU now; None: this daemon does not tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guests: Option<Vec<Guest>>,
    /// Whether lending is on and why; None: this daemon does not tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lending: Option<Lending>,
}

/// p50/p99/max of the samples of one window, ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct LatencyWindow {
    pub samples: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub max_ns: u64,
}

impl LatencyWindow {
    /// The summary of `samples` (reordered); None when there is none.
    pub fn of(samples: &mut [u64]) -> Option<LatencyWindow> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let rank = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Some(LatencyWindow {
            samples: samples.len() as u64,
            p50_ns: rank(0.50),
            p99_ns: rank(0.99),
            max_ns: samples[samples.len() - 1],
        })
    }
}

/// An ordinary task running on an RT CPU lent to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Guest {
    pub pid: u32,
    pub comm: String,
    /// Times it was sent away from this CPU.
    #[serde(default)]
    pub evictions: u64,
}

/// Lending on one RT CPU: on or off, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lending {
    pub on: bool,
    pub why: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_has_its_median_tail_and_max() {
        let mut s: Vec<u64> = (1..=100).rev().collect();
        let w = LatencyWindow::of(&mut s).unwrap();
        assert_eq!(
            (w.samples, w.p50_ns, w.p99_ns, w.max_ns),
            (100, 51, 99, 100)
        );
        assert_eq!(LatencyWindow::of(&mut []), None);
        let w = LatencyWindow::of(&mut [7]).unwrap();
        assert_eq!((w.p50_ns, w.p99_ns, w.max_ns), (7, 7, 7));
    }

    #[test]
    fn an_old_reply_without_live_fields_reads() {
        let cpu: LiveCpu = serde_json::from_str(r#"{"cpu":3}"#).unwrap();
        assert_eq!(cpu.cpu, 3);
        assert_eq!(
            (&cpu.latency, &cpu.guests, &cpu.lending),
            (&None, &None, &None)
        );
        let text = serde_json::to_string(&cpu).unwrap();
        assert!(
            !text.contains("guests") && !text.contains("host_stalls"),
            "{text}"
        );
    }

    #[test]
    fn a_status_reply_of_an_older_daemon_reads_and_a_new_one_reads_in_an_old_shape() {
        let old = r#"{"v":1,"result":"status","status":{"daemon_pid":9,"uptime_s":1.0,"rt_cpus":"1","nrt_cpus":"0","layout":"v1","root_domains":"per-cpu","cap":0.9,"deadline_share":0.95,"placement":"FirstFit","cpus":[],"reservations":0,"requests":0,"granted":0,"refused":0,"errors":0,"balancer":"off","drift":{}}}"#;
        let r = crate::protocol::parse_response(old.as_bytes()).unwrap();
        let crate::protocol::Reply::Status { status } = r.reply else {
            panic!("{r:?}")
        };
        assert_eq!(status.live, None);
        let mut new = *status;
        new.live = Some(LiveStatus {
            version: LIVE_VERSION,
            window_ms: 1000,
            cpus: vec![LiveCpu {
                cpu: 1,
                ..LiveCpu::default()
            }],
        });
        let text = serde_json::to_string(&new).unwrap();
        assert!(text.contains(r#""live":{"version":1"#), "{text}");
        // StatusInfo denies no unknown field: an older client (without
        // `live`) reads this reply as this one reads a field it does not know.
        let future = text.replacen('{', r#"{"from_a_later_daemon":1,"#, 1);
        assert!(serde_json::from_str::<crate::protocol::StatusInfo>(&future).is_ok());
        let back: crate::protocol::StatusInfo = serde_json::from_str(&text).unwrap();
        assert_eq!(back.live.unwrap().cpus[0].cpu, 1);
    }
}
