//! The live balancer's loop (ARTiS §2.2–2.3 from user space): every T ms
//! observe /proc, feed the policy what the kernel-entry watch and the
//! latency guard caught since the last step, apply its pushes; on stop (or
//! error) undo every change.

use super::entry_watch::Entry;
use super::guard::{Counts, Trip};
use super::mover::Mover;
use super::observe::Observer;
use super::step::Run;
use super::{v2_lending, BalanceError, LiveConfig, LiveReport};
use crate::partition::Applied;
use crate::Host;
use rtmgr_core::balance::{Balancer, LendingPrior, Move, Observation};
use rtmgr_sys::time::{mono_ns, sleep_until, thread_cpu_ns};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};

/// How often a balancer with nothing to lend still looks at the machine.
const IDLE_LOOK_NS: u64 = 1_000_000_000;

/// Run the live balancer on an applied partition until `stop` is set (or the
/// configured duration passes). Restores every change before returning, on
/// success and on error. `progress` is called after each sample.
pub fn run_balancer(
    host: &Host,
    applied: &Applied,
    cfg: &LiveConfig,
    stop: &AtomicBool,
    progress: impl FnMut(&LiveReport, &[Move]),
) -> Result<LiveReport, BalanceError> {
    let mut policy = Balancer::new(cfg.policy.clone());
    run_balancer_with(host, applied, cfg, &mut policy, stop, progress)
}

/// `run_balancer` with a policy that outlives the run: its memory (back-offs,
/// the lending controller's state, the guards' baselines) carries over to the
/// next run, as between evaluate's "balanced" segments. Its times are
/// CLOCK_MONOTONIC, so a pause between runs counts as time passed.
pub fn run_balancer_with(
    host: &Host,
    applied: &Applied,
    cfg: &LiveConfig,
    policy: &mut Balancer,
    stop: &AtomicBool,
    mut progress: impl FnMut(&LiveReport, &[Move]),
) -> Result<LiveReport, BalanceError> {
    if !applied.complete {
        return Err(BalanceError::Incomplete);
    }
    // Before the run's mover: dropped after it, once every guest has left.
    let _lending = v2_lending::MemberWhileLending::open(host, applied)?;
    let mut run = Run::start(host, applied, cfg)?;
    apply_host_prior(policy, cfg, &mut run.report);
    let (t0, cpu0) = (mono_ns(), thread_cpu_ns());
    let mut next = t0;
    let mut next_look = t0;
    while !stop.load(Ordering::Relaxed) {
        let now = mono_ns();
        if cfg.duration_ns.is_some_and(|d| now.saturating_sub(t0) >= d) {
            break;
        }
        // Lending off on every RT CPU and no guest: nothing to decide until
        // a retry is due; look once a second (new RT1+ tasks to adopt).
        if run.idle(policy, now) {
            if now < next_look {
                run.report.idle_steps += 1;
                run.forward_guard_samples();
                next += cfg.period_ns;
                sleep_until(next);
                continue;
            }
            next_look = now + IDLE_LOOK_NS;
        }
        let moves = run.step(policy, now);
        progress(&run.report, &moves);
        next += cfg.period_ns;
        sleep_until(next);
    }
    Ok(run.finish(policy, t0, cpu0))
}

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

/// Start from what a host-preemption test found (`LiveConfig::host_prior`,
/// else the cached `rtmgr status --host-test` result): on a host that
/// preempts busy vCPUs, lending starts off and says why.
fn apply_host_prior(policy: &mut Balancer, cfg: &LiveConfig, report: &mut LiveReport) {
    let max_age = std::time::Duration::from_secs(cfg.policy.lending.prior_max_age_s);
    let prior = match &cfg.host_prior {
        Some(p) => Some(p.clone()),
        None if cfg.read_host_cache => {
            match crate::host_preemption::recent_host_preemption(max_age) {
                Ok(hp) => Some(lending_prior(&hp)),
                Err(e) => {
                    report.notes.push(format!(
                        "no host-preemption test to start from ({e}); lending starts on and learns"
                    ));
                    None
                }
            }
        }
        None => None,
    };
    if let Some(p) = prior {
        let cause = p.off_cause(&cfg.policy.lending);
        if policy.set_lending_prior(p, crate::now_unix_s()) {
            let cause = cause.unwrap_or_default();
            report.notes.push(format!(
                "the host test found that {cause}: lending starts off"
            ));
        } else if cause.is_none() {
            report.notes.push(
                "the host test saw no host preemption and capacity that lending adds: lending starts on"
                    .into(),
            );
        }
    }
}

/// The controller's prior from a host-preemption test result (with its
/// capacity measurement, when it has one).
pub fn lending_prior(hp: &rtmgr_core::host_preemption::HostPreemption) -> LendingPrior {
    let cap = hp.cpu_capacity.as_ref();
    LendingPrior {
        host_preempts_busy_vcpus: hp.preempts,
        stall_ns: hp.stall_max_ns.unwrap_or(0).max(0) as u64,
        measured_at_unix_s: hp.setup.measured_at_unix_s,
        marginal_capacity: cap.map(|c| c.marginal),
        effective_cpus: cap.map(|c| c.effective_cpus),
    }
}

/// Clock ticks since boot (the unit of a task's start time in /proc), rounded
/// down; 0 when /proc/uptime cannot be read (every task then counts as new).
pub(super) fn uptime_ticks(host: &Host) -> u64 {
    let secs = crate::unmovable::uptime_s(host).unwrap_or(0.0);
    (secs * procfs::ticks_per_second() as f64) as u64
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
