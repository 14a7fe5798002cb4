//! What the live balancer did during evaluate's "balanced" segments (ARTiS
//! §2.2–2.3; issue 20): lends, evictions by cause, guard trips, guests'
//! children, the lending controller's state, and what its machinery cost —
//! summed over the segments, so a reader sees why balanced lent or did not.

use rtmgr_core::balance::{Balancer, LendingStatus};
use rtmgr_linux::balance::LiveReport;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BalancerSummary {
    /// Balancer runs (one per "balanced" segment) and their wall time.
    pub runs: u32,
    pub wall_s: f64,
    /// Tasks lent an RT CPU.
    pub lends: u64,
    /// Guests sent back to the NRT CPUs, by cause: `kernel_entry` (the entry
    /// watch), `latency_guard` (a late sample), and the policy's own moves.
    pub evictions: BTreeMap<String, u64>,
    pub guard_trips: u64,
    /// Threads and processes created by guests: kept as guests, or sent back.
    pub children_lent: u64,
    pub children_sent_back: u64,
    /// CPU time of the balancer's loop (observing /proc, deciding, moving)
    /// and of its entry-watch reader, both on the NRT side; their sum's
    /// share of the wall time, % of one CPU.
    pub loop_cpu_s: f64,
    pub entry_watch_cpu_s: f64,
    pub machinery_cpu_s: f64,
    pub machinery_cpu_percent: f64,
    /// Events the entry watch read (0 while it was paused: no guest lent).
    pub entry_watch_events: u64,
    /// The lending controller's state per RT CPU at the end of the last run
    /// (its reason reads e.g. "lending off on CPU 0: …; retry in 64 s").
    pub lending: Vec<LendingStatus>,
    /// Changes it could not make or undo, and notes.
    pub notes: Vec<String>,
}

impl BalancerSummary {
    /// Add one run's report; `policy` is the policy after the run.
    pub fn add_run(&mut self, rep: &LiveReport, policy: Option<&Balancer>, now_ns: u64) {
        self.runs += 1;
        self.wall_s += rep.wall_s;
        self.lends += rep.lends;
        *self.evictions.entry("kernel_entry".into()).or_default() += rep.kernel_entry_evictions;
        *self.evictions.entry("latency_guard".into()).or_default() += rep.guard_evictions;
        for (reason, n) in &rep.moves {
            if !matches!(reason.as_str(), "fill" | "rotate") {
                *self.evictions.entry(reason.clone()).or_default() += n;
            }
        }
        self.guard_trips += rep.guard_trips;
        self.children_lent += rep.children_lent;
        self.children_sent_back += rep.children_sent_back;
        self.loop_cpu_s += rep.balancer_cpu_s;
        self.entry_watch_cpu_s += rep.entry_watch_cpu_s;
        self.machinery_cpu_s += rep.balancer_cpu_s + rep.entry_watch_cpu_s;
        self.machinery_cpu_percent = 100.0 * self.machinery_cpu_s / self.wall_s.max(1e-9);
        self.entry_watch_events += rep.entry_events;
        if let Some(p) = policy {
            self.lending = p.lending_status(now_ns);
        }
        for n in rep
            .refused
            .iter()
            .chain(&rep.restore_failures)
            .chain(&rep.notes)
        {
            if !self.notes.contains(n) && self.notes.len() < 20 {
                self.notes.push(n.clone());
            }
        }
    }

    /// One line for the table's notes.
    pub fn line(&self) -> String {
        let evicted: u64 = self.evictions.values().sum();
        let mut s = format!(
            "balancer: {} lends, {evicted} evictions, {} guard trips, machinery {:.1} % of a CPU (loop {:.2} s, entry watch {:.2} s)",
            self.lends, self.guard_trips, self.machinery_cpu_percent, self.loop_cpu_s, self.entry_watch_cpu_s
        );
        for l in &self.lending {
            let _ = match &l.reason {
                Some(why) => write!(s, "; {why}"),
                None => write!(
                    s,
                    "; lending on on CPU {} ({} lent windows judged, {} stalled by the host)",
                    l.cpu, l.lends, l.lends_stalled
                ),
            };
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rtmgr_core::balance::PolicyConfig;

    fn run(lends: u64, guard: u64, entry: u64, loop_s: f64) -> LiveReport {
        LiveReport {
            wall_s: 2.0,
            lends,
            guard_evictions: guard,
            guard_trips: guard.min(1),
            kernel_entry_evictions: entry,
            balancer_cpu_s: loop_s,
            entry_watch_cpu_s: 0.01,
            moves: BTreeMap::from([("fill".into(), lends), ("rebalance".into(), 2)]),
            refused: vec!["task 7: gone".into()],
            ..Default::default()
        }
    }

    #[test]
    fn runs_add_up_and_the_line_says_what_happened() {
        let mut s = BalancerSummary::default();
        let policy = Balancer::new(PolicyConfig::default());
        s.add_run(&run(3, 2, 1, 0.02), Some(&policy), 0);
        s.add_run(&run(1, 0, 0, 0.02), None, 0);
        assert_eq!((s.runs, s.lends, s.guard_trips), (2, 4, 1));
        assert_eq!(s.evictions["latency_guard"], 2);
        assert_eq!(s.evictions["kernel_entry"], 1);
        assert_eq!(s.evictions["rebalance"], 4);
        assert!(
            !s.evictions.contains_key("fill"),
            "a fill is a lend, not an eviction"
        );
        assert!((s.machinery_cpu_percent - 100.0 * 0.06 / 4.0).abs() < 1e-9);
        assert_eq!(
            s.notes,
            vec!["task 7: gone".to_string()],
            "notes are not repeated"
        );
        let line = s.line();
        assert!(
            line.contains("4 lends, 7 evictions, 1 guard trips"),
            "{line}"
        );
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<BalancerSummary>(&json).unwrap(), s);
    }
}
