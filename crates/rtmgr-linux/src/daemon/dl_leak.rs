//! Deadline bandwidth the kernel leaves booked, given back (budget-based
//! RTAI §3.3: hard reservations as SCHED_DEADLINE, admitted by the kernel
//! per root domain). Linux (6.18 and earlier) keeps the bandwidth of a
//! thread set back from SCHED_DEADLINE while it sleeps past its 0-lag time
//! booked in its root domain for good (docs/kernel-dl-bandwidth-leak.md).
//!
//! A revocation that finds such a thread asleep marks its RT CPU; the CPU's
//! root domain is rebuilt (`domains::rebuild`: the kernel recounts the
//! bandwidth from the deadline tasks it finds) once every thread that left
//! SCHED_DEADLINE there is past its 0-lag time. Sooner would count a
//! departed thread twice: its inactive timer, still armed, subtracts its
//! bandwidth again from the recounted total when it fires. A grant the
//! kernel refuses SCHED_DEADLINE is not retried here: its threads wait at
//! SCHED_FIFO 1 (`pending.rs`), with no sleep on the daemon's loop.

use super::domains::{self, Domains};
use super::grants_journal::Grant;
use crate::host::{Host, HostError};
use crate::tasks;
use rtmgr_sys::time::mono_ns;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Is a thread of this deadline grant asleep (a revocation now may leak
/// its bandwidth)?
pub fn asleep(host: &Host, g: &Grant) -> bool {
    g.demand.is_hard()
        && g.threads
            .iter()
            .filter(|t| tasks::same_task(host, t.tid, t.start_time))
            .any(|t| !tasks::runnable(host, t.tid))
}

/// Which RT CPUs need a root-domain rebuild, and from when it is safe.
#[derive(Debug, Default)]
pub struct LeakWatch {
    /// Per CPU: every thread that left SCHED_DEADLINE there is past its
    /// 0-lag time from this instant (monotonic ns).
    quiet_from: BTreeMap<u32, u64>,
    /// CPUs where a thread left SCHED_DEADLINE asleep.
    marked: BTreeSet<u32>,
    /// CPUs whose rebuild the grant worker does now (a thread leaving
    /// asleep meanwhile marks its CPU again, for a rebuild after this one).
    rebuilding: BTreeSet<u32>,
    /// Rebuilds done (the daemon's stats).
    pub rebuilds: u64,
}

impl LeakWatch {
    /// A thread left SCHED_DEADLINE on `cpu`; its 0-lag time is before `quiet_ns`.
    pub fn departed(&mut self, cpu: u32, quiet_ns: u64) {
        let q = self.quiet_from.entry(cpu).or_insert(quiet_ns);
        *q = (*q).max(quiet_ns);
    }

    /// A thread left SCHED_DEADLINE on `cpu` while asleep: its bandwidth may leak.
    pub fn mark(&mut self, cpu: u32) {
        self.marked.insert(cpu);
    }

    /// When a rebuild of `cpu`'s root domain counts no departed thread twice.
    pub fn quiet_from(&self, cpu: u32) -> u64 {
        self.quiet_from.get(&cpu).copied().unwrap_or(0)
    }

    /// Does the kernel still hold, on `cpu`, bandwidth of threads that left
    /// SCHED_DEADLINE there (before their 0-lag time, or leaked until the
    /// rebuild)? A grant it refuses (EBUSY) waits for it (`pending.rs`).
    pub fn returning(&self, cpu: u32, now: u64) -> bool {
        self.marked.contains(&cpu) || self.rebuilding.contains(&cpu) || self.quiet_from(cpu) > now
    }

    /// Is any CPU waiting for its rebuild?
    pub fn any_marked(&self) -> bool {
        !self.marked.is_empty()
    }

    /// The marked CPUs that are quiet at `now`.
    pub fn due(&self, now: u64) -> Vec<u32> {
        self.marked
            .iter()
            .copied()
            .filter(|&cpu| self.quiet_from(cpu) <= now)
            .collect()
    }

    /// Rebuild `cpu`'s root domain now (the caller made sure it is quiet).
    pub fn rebuild(&mut self, host: &Host, domains: &Domains, cpu: u32) {
        let Some(dir) = self.start_rebuild(domains, cpu) else {
            return;
        };
        let t0 = mono_ns();
        let done = domains::rebuild(host, &dir);
        self.rebuilt(cpu, done, mono_ns() - t0);
    }

    /// A rebuild of `cpu` begins (here or on the grant worker): the cpuset
    /// directory to rebuild, None when the CPU has none (nothing to do).
    pub fn start_rebuild(&mut self, domains: &Domains, cpu: u32) -> Option<PathBuf> {
        self.marked.remove(&cpu);
        let dir = domains.dir(cpu)?.clone();
        self.rebuilding.insert(cpu);
        Some(dir)
    }

    /// A rebuild of `cpu` ended after `took_ns`.
    pub fn rebuilt(&mut self, cpu: u32, done: Result<(), HostError>, took_ns: u64) {
        self.rebuilding.remove(&cpu);
        match done {
            Ok(()) => {
                self.rebuilds += 1;
                tracing::debug!("CPU {cpu}: root domain rebuilt in {} µs", took_ns / 1000);
            }
            Err(e) => tracing::warn!("CPU {cpu}: rebuilding its root domain: {e}"),
        }
    }

    /// Is a rebuild of `cpu` under way?
    pub fn is_rebuilding(&self, cpu: u32) -> bool {
        self.rebuilding.contains(&cpu)
    }

    /// Rebuild every marked CPU that is quiet.
    pub fn rebuild_due(&mut self, host: &Host, domains: &Domains) {
        for cpu in self.due(mono_ns()) {
            self.rebuild(host, domains, cpu);
        }
    }

    /// Wait until every marked CPU is quiet and rebuild it (stop).
    pub fn rebuild_all(&mut self, host: &Host, domains: &Domains) {
        let last = self.marked.iter().map(|&c| self.quiet_from(c)).max();
        if let Some(last) = last {
            rtmgr_sys::time::sleep_until(last);
            self.rebuild_due(host, domains);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marked_cpu_is_due_only_when_every_departure_is_past_its_zero_lag() {
        let mut w = LeakWatch::default();
        w.departed(1, 100);
        w.mark(1);
        w.departed(1, 300);
        w.departed(2, 50);
        assert!(w.due(200).is_empty());
        assert_eq!(w.due(300), vec![1]);
        // CPU 2 had a departure but nothing asleep: no rebuild.
        assert_eq!(w.due(1_000), vec![1]);
        // An earlier departure does not shorten the wait.
        w.departed(1, 10);
        assert_eq!(w.quiet_from(1), 300);
    }

    #[test]
    fn a_cpu_without_its_own_cpuset_is_unmarked_without_a_rebuild() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        let domains = Domains {
            dirs: BTreeMap::new(),
            note: "cgroup v2".into(),
        };
        let mut w = LeakWatch::default();
        w.mark(1);
        w.rebuild_due(&host, &domains);
        assert!(!w.marked.contains(&1));
        assert_eq!(w.rebuilds, 0);
    }
}
