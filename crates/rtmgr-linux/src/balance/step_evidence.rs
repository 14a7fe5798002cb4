//! What one step of the live balancer adds to its observation and tells
//! its sink (ARTiS §2.3: the RT CPUs watched, what the guard and the
//! kernel-entry watch caught): guests' children, the lending evidence, guard
//! trips, kernel entries, the live figures.

use super::entry_watch::Entry;
use super::guard::{Counts, Trip};
use super::mover::Mover;
use super::observe::Observer;
use super::LiveReport;
use crate::Host;
use rtmgr_core::balance::{Balancer, Observation};
use std::collections::{BTreeMap, BTreeSet};

/// Threads and processes a guest created inherit its RT-CPU pinning (and
/// SCHED_IDLE): each is made a guest of the same CPU under the same rules
/// while the task it came from is still lent, else sent back at once to what
/// that task had before its lend.
pub(super) fn track_children(
    report: &mut LiveReport,
    mover: &mut Mover,
    observer: &Observer,
    guests: &BTreeMap<u32, u32>,
    lent: &BTreeMap<u32, (u32, u64)>,
    seen: &mut BTreeSet<(u32, u64)>,
    rt: &rtmgr_core::CpuSet,
) {
    for (tid, start, from) in observer.children_of_guests(guests, lent) {
        if !seen.insert((tid, start)) {
            continue;
        }
        match mover.adopt_child(tid, start, from, rt) {
            Ok(Some(_)) if guests.contains_key(&from) => report.children_lent += 1,
            Ok(Some(_)) => match mover.restore(tid) {
                Ok(()) => report.children_sent_back += 1,
                Err(e) => report.refused.push(format!("send back child {tid}: {e}")),
            },
            Ok(None) => {}
            Err(e) if e.is_gone() => {}
            Err(e) => report
                .refused
                .push(format!("child {tid} of guest {from}: {e}")),
        }
    }
}

/// The lending controller's evidence per RT CPU for this window: the guard's
/// samples and late samples, the CPU's steal, and whether it had a guest.
/// Late samples count as host-stalled when the CPU's steal advanced in the
/// window (steal is accounted at the tick after the vCPU runs again, 10 ms
/// resolution; the balancer's window is 50 ms).
pub(super) fn add_evidence(
    obs: &mut Observation,
    counts: &BTreeMap<u32, Counts>,
    steal_ns: &BTreeMap<u32, u64>,
    guests: &BTreeMap<u32, u32>,
) {
    for c in obs.cpus.iter_mut().filter(|c| c.rt) {
        let n = counts.get(&c.cpu).copied().unwrap_or_default();
        c.samples = n.samples;
        c.late_samples = n.late;
        c.steal_ns = steal_ns.get(&c.cpu).copied().unwrap_or(0);
        c.host_stalled_samples = if c.steal_ns > 0 { n.late } else { 0 };
        c.lent_ns = if guests.values().any(|&g| g == c.cpu) {
            obs.window_ns
        } else {
            0
        };
    }
}

/// Tell the event sink (the daemon's live figures) each RT CPU's guests,
/// host-stalled late samples and lending state after this step.
pub(super) fn report_step(
    ev: &super::EventSink,
    obs: &Observation,
    guests: &BTreeMap<u32, u32>,
    policy: &Balancer,
    now: u64,
) {
    for status in policy.lending_status(now) {
        let on_cpu: Vec<u32> = guests
            .iter()
            .filter(|(_, &c)| c == status.cpu)
            .map(|(&t, _)| t)
            .collect();
        let stalled = obs
            .cpus
            .iter()
            .find(|c| c.cpu == status.cpu)
            .map_or(0, |c| c.host_stalled_samples);
        ev.0.step(status.cpu, &on_cpu, stalled, &status);
    }
}

/// Clock ticks since boot (the unit of a task's start time in /proc), rounded
/// down; 0 when /proc/uptime cannot be read (every task then counts as new).
pub(super) fn uptime_ticks(host: &Host) -> u64 {
    let secs = crate::unmovable::uptime_s(host).unwrap_or(0.0);
    (secs * rtmgr_sys::time::clock_ticks_per_second() as f64) as u64
}

/// The guard's trips since the last step: counted, and given to the policy
/// as trips (`CpuObs::guard_trips`), so that it closes the CPU to guests
/// for its back-off (the guests already left).
pub(super) fn note_trips(report: &mut LiveReport, obs: &mut Observation, trips: &[Trip]) {
    for t in trips {
        report.guard_trips += t.trips;
        report.guard_evictions += t.evicted;
        if let Some(c) = obs.cpus.iter_mut().find(|c| c.cpu == t.cpu) {
            c.guard_trips += t.trips.max(1);
        }
    }
}

/// A guest the watch saw entering the kernel on its RT CPU was already sent
/// away: the policy learns it as a non-preemptible entry (Fig. 3's history).
pub(super) fn mark_entries(report: &mut LiveReport, obs: &mut Observation, entries: &[Entry]) {
    for e in entries {
        let n = report.kernel_entry_evictions;
        report.kernel_entry_evictions += 1;
        report.entry_evict_delay_max_ns = report.entry_evict_delay_max_ns.max(Some(e.delay_ns));
        let mean = report.entry_evict_delay_mean_ns.unwrap_or(0);
        report.entry_evict_delay_mean_ns = Some((mean * n + e.delay_ns) / (n + 1));
        if let Some(nr) = e.syscall {
            *report
                .entry_syscalls
                .entry(rtmgr_core::trace::syscall_name(nr))
                .or_default() += 1;
        } else {
            *report
                .entry_syscalls
                .entry("page fault".into())
                .or_default() += 1;
        }
        if let Some(t) = obs.tasks.iter_mut().find(|t| t.id == u64::from(e.tid)) {
            t.np_entered = true;
        }
    }
}
