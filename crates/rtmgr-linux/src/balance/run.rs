//! The live balancer's loop (ARTiS §2.2–2.3 from user space): every T ms
//! observe /proc, feed the policy what the kernel-entry watch and the
//! latency guard caught since the last step, apply its pushes; on stop (or
//! error) undo every change.

use super::entry_watch::{Entry, EntryWatch};
use super::guard::{Counts, GuardOptions, Immediate, LatencyGuard, Trip};
use super::mover::Mover;
use super::observe::Observer;
use super::steal::StealWindow;
use super::{reason_name, v2_lending, BalanceError, LiveConfig, LiveReport};
use crate::partition::Applied;
use crate::Host;
use rtmgr_core::balance::{Balancer, LendingPrior, Move, Observation, Place};
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
    let plan = &applied.plan;
    // Before the mover: dropped after it, once every guest has left.
    let _lending = v2_lending::MemberWhileLending::open(host, applied)?;
    let mut mover = Mover::new(host, applied);
    let mut report = LiveReport::default();
    let guard = if cfg.guard {
        let opts = GuardOptions {
            interval_ns: cfg.guard_interval_ns,
            immediate: match (cfg.immediate_guard, cfg.policy.latency_bound_ns) {
                (true, Some(bound_ns)) => Some(Immediate {
                    bound_ns,
                    evictor: mover.evictor(),
                }),
                _ => None,
            },
            events: cfg.events.clone(),
            bound_ns: cfg.policy.latency_bound_ns,
        };
        Some(match &cfg.guard_feed {
            Some(feed) => LatencyGuard::fed(feed, opts),
            None => LatencyGuard::start(host, applied, &plan.rt, opts)?,
        })
    } else {
        None
    };
    let mut watch = if cfg.watch_entries {
        match EntryWatch::start(&plan.rt, mover.evictor()) {
            Ok(w) => Some(w),
            Err(e) => {
                report
                    .notes
                    .push(format!("kernel entries of guests not watched: {e}"));
                None
            }
        }
    } else {
        None
    };
    report.entry_watch = watch.is_some();
    let mut observer = Observer::new(
        host.root(),
        plan.rt.clone(),
        plan.nrt.clone(),
        cfg.scope.clone(),
    );
    observer.set_scan_every(cfg.scan_every);
    observer.set_hot_ns(cfg.period_ns / 100);
    // Below the floor, switch-ins stand for voluntary switches (an upper
    // bound); the user-mode prediction needs them exact near its own limit.
    let switch_limit = if cfg.policy.predict_user_mode {
        cfg.policy
            .switch_rate_max
            .min(cfg.policy.lend_switch_rate_max)
    } else {
        cfg.policy.switch_rate_max
    };
    observer.set_switch_floor(switch_limit / 4.0);
    apply_host_prior(policy, cfg, &mut report);
    let mut steal = StealWindow::new(host);
    let mut refused: BTreeSet<u64> = BTreeSet::new();
    // Processes that had a guest in this run (pid → the thread lent), and
    // the children of guests already handled (tid, start time).
    let mut lent: BTreeMap<u32, (u32, u64)> = BTreeMap::new();
    let mut children_seen: BTreeSet<(u32, u64)> = BTreeSet::new();
    let (t0, cpu0) = (mono_ns(), thread_cpu_ns());
    let mut next = t0;
    let mut last = t0;
    let mut reads = 0u64;
    let mut next_look = t0;
    while !stop.load(Ordering::Relaxed) {
        let now = mono_ns();
        if cfg.duration_ns.is_some_and(|d| now.saturating_sub(t0) >= d) {
            break;
        }
        // Lending off on every RT CPU and no guest: nothing to decide until
        // a retry is due; look once a second (new RT1+ tasks to adopt).
        if mover.guests().is_empty() && plan.rt.iter().all(|c| !policy.lending_allows(c, now)) {
            if now < next_look {
                report.idle_steps += 1;
                next += cfg.period_ns;
                sleep_until(next);
                continue;
            }
            next_look = now + IDLE_LOOK_NS;
        }
        let entries = watch.as_ref().map(|w| w.take()).unwrap_or_default();
        let trips = guard.as_ref().map(|g| g.take_trips()).unwrap_or_default();
        let mut p99 = guard.as_ref().map(|g| g.p99()).unwrap_or_default();
        note_trips(&mut report, &mut p99, &trips);
        if let Some(ev) = &cfg.events {
            for t in &trips {
                ev.0.eviction(t.cpu, "guard", t.evicted.len() as u64);
            }
            for e in entries.iter().filter(|e| !e.evict_failed) {
                ev.0.eviction(e.cpu, "kernel_entry", 1);
            }
        }
        for (&c, &v) in &p99 {
            let m = report.guard_p99_max_ns.entry(c).or_insert(0);
            *m = (*m).max(v);
        }
        let counts = guard.as_ref().map(|g| g.take_counts()).unwrap_or_default();
        let steal_ns = steal.take(host);
        let guests = mover.guests();
        let mut obs = observer.sample(now, now.saturating_sub(last).max(1), &guests, &p99);
        add_evidence(&mut obs, &counts, &steal_ns, &guests);
        last = now;
        reads += observer.last.reads as u64;
        report.proc_listings += u64::from(observer.last.listed);
        report.stat_sweeps += u64::from(observer.last.swept);
        report.open_files_max = report.open_files_max.max(observer.open_files());
        report.scans_skipped_calm += u64::from(observer.last.skipped);
        report.psi = observer.has_psi();
        report.schedstat = observer.has_schedstat();
        mark_entries(&mut report, &mut obs, &entries);
        for (tid, start) in observer.spanning_rt1(&guests) {
            match mover.adopt(tid, start) {
                Ok(()) => report.adopted += 1,
                Err(e) if e.is_gone() => {}
                Err(e) => report.refused.push(format!("adopt RT1+ task {tid}: {e}")),
            }
        }
        track_children(
            &mut report,
            &mut mover,
            &observer,
            &guests,
            &lent,
            &mut children_seen,
            &plan.rt,
        );
        for t in obs.tasks.iter_mut() {
            if refused.contains(&t.id) && t.place == Place::Nrt {
                t.place = Place::Fixed;
            }
        }
        let moves = policy.step(&obs);
        for m in &moves {
            let tid = m.task as u32;
            let r = match m.to {
                Place::Rt(cpu) => {
                    let st = observer.start_time(tid).unwrap_or(0);
                    let class = obs
                        .tasks
                        .iter()
                        .find(|t| t.id == m.task)
                        .map(|t| t.class)
                        .unwrap_or(rtmgr_core::class::TaskClass::Linux);
                    report.lends += 1;
                    let pid = observer.process_of(tid).unwrap_or(tid);
                    lent.entry(pid).or_insert((tid, uptime_ticks(host)));
                    mover.to_rt(tid, cpu, st, class)
                }
                Place::Nrt => mover.restore(tid),
                Place::Fixed => Ok(()),
            };
            match r {
                Ok(()) => {
                    *report
                        .moves
                        .entry(reason_name(m.reason).into())
                        .or_default() += 1
                }
                Err(e) if e.is_gone() => {}
                Err(e) => {
                    refused.insert(m.task);
                    report.refused.push(format!("task {tid}: {e}"));
                }
            }
        }
        let guests = mover.guests();
        if let Some(ev) = &cfg.events {
            report_step(ev, &obs, &guests, policy, now);
        }
        if let Some(w) = watch.as_mut() {
            w.watch(&guests);
        }
        if let Some(g) = &guard {
            g.set_guests(&guests);
        }
        report.samples += 1;
        report.tasks_known_max = report.tasks_known_max.max(observer.known_tasks());
        progress(&report, &moves);
        next += cfg.period_ns;
        sleep_until(next);
    }
    report.lending = policy.lending_status(mono_ns());
    let (restored, fails) = mover.restore_all();
    drop(guard);
    if let Some(w) = watch {
        if let Ok(st) = w.finish() {
            report.entry_events = st.events;
            report.entry_watch_cpu_s = st.cpu_ns as f64 / 1e9;
        }
    }
    report.restored = restored;
    report.restore_failures = fails;
    report.wall_s = mono_ns().saturating_sub(t0) as f64 / 1e9;
    report.balancer_cpu_s = thread_cpu_ns().saturating_sub(cpu0) as f64 / 1e9;
    report.overhead_percent = 100.0 * report.balancer_cpu_s / report.wall_s.max(1e-9);
    report.mean_task_reads_per_sample = reads as f64 / report.samples.max(1) as f64;
    report.prediction_hit_rate = (report.lends > 0)
        .then(|| 1.0 - report.kernel_entry_evictions as f64 / report.lends as f64);
    Ok(report)
}

/// Threads and processes a guest created inherit its RT-CPU pinning (and
/// SCHED_IDLE): each is made a guest of the same CPU under the same rules
/// while the task it came from is still lent, else sent back at once to what
/// that task had before its lend.
fn track_children(
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
fn add_evidence(
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
fn report_step(
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
fn uptime_ticks(host: &Host) -> u64 {
    let secs = crate::unmovable::uptime_s(host).unwrap_or(0.0);
    (secs * procfs::ticks_per_second() as f64) as u64
}

/// A guard trip: the policy sees the late sample as the CPU's p99, so it
/// closes the CPU to guests for its back-off (the guests already left).
fn note_trips(report: &mut LiveReport, p99: &mut BTreeMap<u32, u64>, trips: &[Trip]) {
    for t in trips {
        report.guard_trips += 1;
        report.guard_evictions += t.evicted.len() as u64;
        let p = p99.entry(t.cpu).or_insert(0);
        *p = (*p).max(t.latency_ns);
    }
}

/// A guest the watch saw entering the kernel on its RT CPU was already sent
/// away: the policy learns it as a non-preemptible entry (Fig. 3's history).
fn mark_entries(report: &mut LiveReport, obs: &mut Observation, entries: &[Entry]) {
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
