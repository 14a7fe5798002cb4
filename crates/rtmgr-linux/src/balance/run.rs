//! The live balancer's loop (ARTiS §2.2–2.3 from user space): every T ms
//! observe /proc, feed the policy what the kernel-entry watch and the
//! latency guard caught since the last step, apply its pushes; idle (no
//! guest, lending off), one look a second and asleep between; on stop (or
//! error) undo every change.

use super::step::Run;
use super::{v2_lending, BalanceError, LiveConfig, LiveReport};
use crate::partition::Applied;
use crate::Host;
use rtmgr_core::balance::{Balancer, LendingPrior, Move};
use rtmgr_sys::time::{mono_ns, sleep_until, thread_cpu_ns};
use std::sync::atomic::{AtomicBool, Ordering};

/// How often a balancer with nothing to lend still looks at the machine.
const IDLE_LOOK_NS: u64 = 1_000_000_000;
/// The longest an idle balancer sleeps without looking at `stop`: what a
/// stop costs a caller that does not also unpark the balancer's thread.
const IDLE_SLICE_NS: u64 = 250_000_000;

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
/// next run, as between a measurement's segments. Its times are
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
    let end = cfg.duration_ns.map(|d| t0.saturating_add(d));
    while !stop.load(Ordering::Relaxed) {
        let now = mono_ns();
        if end.is_some_and(|e| now >= e) {
            break;
        }
        // Lending off on every RT CPU and no guest: nothing to decide until
        // a retry is due; look once a second (new RT1+ tasks to adopt, the
        // guard's samples on to the sink) and sleep in between.
        let idle = run.idle(policy, now);
        if idle && now < next_look {
            idle_wait(stop, end.map_or(next_look, |e| e.min(next_look)));
            next = mono_ns();
            // The periods slept through: the steps an active loop would have made.
            run.report.idle_steps += next.saturating_sub(now) / cfg.period_ns.max(1);
            continue;
        }
        if idle {
            next_look = now + IDLE_LOOK_NS;
        }
        let moves = run.step(policy, now);
        progress(&run.report, &moves);
        if !run.idle(policy, now) {
            next += cfg.period_ns;
            sleep_until(next);
        }
    }
    Ok(run.finish(policy, t0, cpu0))
}

/// Sleep until `until` (CLOCK_MONOTONIC), or until `stop` is set: parked,
/// so whoever sets `stop` and unparks the thread (the daemon) ends the
/// sleep at once; `stop` alone is seen within `IDLE_SLICE_NS`.
fn idle_wait(stop: &AtomicBool, until: u64) {
    loop {
        let now = mono_ns();
        if now >= until || stop.load(Ordering::Relaxed) {
            return;
        }
        let ns = (until - now).min(IDLE_SLICE_NS);
        std::thread::park_timeout(std::time::Duration::from_nanos(ns));
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

/// A run that could not undo every change is an error (the machine is not as it was).
pub fn check_restored(rep: &LiveReport) -> Result<(), BalanceError> {
    if rep.restore_failures.is_empty() {
        Ok(())
    } else {
        Err(BalanceError::Restore(rep.restore_failures.join("; ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// An idle wait ends at its time, or before it once `stop` is set:
    /// at once when the setter also unparks, within a slice when not.
    #[test]
    fn an_idle_wait_ends_at_its_time_or_at_stop() {
        let stop = AtomicBool::new(false);
        let until = mono_ns() + 20_000_000;
        idle_wait(&stop, until);
        assert!(mono_ns() >= until);
        for unpark in [true, false] {
            let stop = Arc::new(AtomicBool::new(false));
            let until = mono_ns() + 60 * 1_000_000_000;
            let s = stop.clone();
            let h = std::thread::spawn(move || {
                idle_wait(&s, until);
                mono_ns()
            });
            std::thread::sleep(std::time::Duration::from_millis(20));
            stop.store(true, Ordering::Relaxed);
            if unpark {
                h.thread().unpark();
            }
            let ended = h.join().unwrap();
            assert!(ended < until, "unpark {unpark}: slept to its time");
        }
    }
}
