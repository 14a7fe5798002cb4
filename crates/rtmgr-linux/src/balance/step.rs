//! One live balancer run's state and its step (ARTiS §2.2–2.3 from user
//! space): take what the kernel-entry watch and the latency guard caught,
//! observe /proc, ask the policy, apply its pushes, tell the guard and the
//! watch the guests now. `run.rs` paces the steps; `finish` undoes all.

use super::entry_watch::EntryWatch;
use super::guard::{GuardOptions, Immediate, LatencyGuard};
use super::mover::Mover;
use super::observe::Observer;
use super::steal::StealWindow;
use super::step_evidence::{
    add_evidence, mark_entries, note_trips, report_step, track_children, uptime_ticks,
};
use super::{reason_name, BalanceError, LiveConfig, LiveReport};
use crate::partition::Applied;
use crate::Host;
use rtmgr_core::balance::{Balancer, Move, Observation, Place};
use rtmgr_core::class::TaskClass;
use rtmgr_core::CpuSet;
use rtmgr_sys::time::{mono_ns, thread_cpu_ns};
use std::collections::{BTreeMap, BTreeSet};

/// A live run between its start and its `finish`.
pub(super) struct Run<'a> {
    host: &'a Host,
    cfg: &'a LiveConfig,
    rt: CpuSet,
    mover: Mover,
    guard: Option<LatencyGuard>,
    watch: Option<EntryWatch>,
    observer: Observer,
    steal: StealWindow,
    /// Tasks a move was refused for: the policy sees them as fixed.
    refused: BTreeSet<u64>,
    /// Processes that had a guest in this run (pid → the thread lent, when),
    /// and the children of guests already handled (tid, start time).
    lent: BTreeMap<u32, (u32, u64)>,
    children_seen: BTreeSet<(u32, u64)>,
    /// When the last step observed, and /proc reads so far.
    last: u64,
    reads: u64,
    pub report: LiveReport,
}

impl<'a> Run<'a> {
    /// The mover, the guard, the kernel-entry watch and the observer of a run.
    pub fn start(
        host: &'a Host,
        applied: &Applied,
        cfg: &'a LiveConfig,
    ) -> Result<Run<'a>, BalanceError> {
        let mut report = LiveReport::default();
        // What a run killed before its end lent goes back before this one lends.
        for p in super::lends::recover(host, &applied.journal)? {
            report
                .notes
                .push(format!("not given back after an earlier run: {p}"));
        }
        let mover = Mover::new(host, applied)?;
        let guard = start_guard(host, applied, cfg, &mover)?;
        let watch = start_watch(cfg, &applied.plan.rt, &mover, &mut report);
        report.entry_watch = watch.is_some();
        Ok(Run {
            host,
            cfg,
            rt: applied.plan.rt.clone(),
            mover,
            guard,
            watch,
            observer: observer(host, applied, cfg),
            steal: StealWindow::new(host),
            refused: BTreeSet::new(),
            lent: BTreeMap::new(),
            children_seen: BTreeSet::new(),
            last: mono_ns(),
            reads: 0,
            report,
        })
    }

    /// No guest and lending off on every RT CPU: nothing to decide now.
    pub fn idle(&self, policy: &Balancer, now: u64) -> bool {
        self.mover.guests().is_empty() && self.rt.iter().all(|c| !policy.lending_allows(c, now))
    }

    /// The guard's samples on to the event sink (also between idle steps).
    pub fn forward_guard_samples(&self) {
        if let Some(g) = &self.guard {
            g.forward_samples();
        }
    }

    /// One step: observe, decide, apply; the moves the policy made.
    pub fn step(&mut self, policy: &mut Balancer, now: u64) -> Vec<Move> {
        let mut obs = self.observe(now);
        self.adopt_rt1();
        let guests = self.mover.guests();
        track_children(
            &mut self.report,
            &mut self.mover,
            &self.observer,
            &guests,
            &self.lent,
            &mut self.children_seen,
            &self.rt,
        );
        for t in obs.tasks.iter_mut() {
            if self.refused.contains(&t.id) && t.place == Place::Nrt {
                t.place = Place::Fixed;
            }
        }
        let moves = policy.step(&obs);
        for m in &moves {
            self.apply(m, &obs);
        }
        self.after_moves(&obs, policy, now);
        moves
    }

    /// What the watch and the guard caught, and /proc, as the policy's observation.
    fn observe(&mut self, now: u64) -> Observation {
        let entries = self.watch.as_ref().map(|w| w.take()).unwrap_or_default();
        let trips = self
            .guard
            .as_ref()
            .map(|g| g.take_trips())
            .unwrap_or_default();
        let p99 = self.guard.as_mut().map(|g| g.p99()).unwrap_or_default();
        self.forward_guard_samples();
        if let Some(ev) = &self.cfg.events {
            for t in &trips {
                ev.0.eviction(t.cpu, "guard", t.evicted);
            }
            for e in entries.iter().filter(|e| !e.evict_failed) {
                ev.0.eviction(e.cpu, "kernel_entry", 1);
            }
        }
        for (&c, &v) in &p99 {
            let m = self.report.guard_p99_max_ns.entry(c).or_insert(0);
            *m = (*m).max(v);
        }
        let counts = self
            .guard
            .as_ref()
            .map(|g| g.take_counts())
            .unwrap_or_default();
        let steal_ns = self.steal.take(self.host);
        let guests = self.mover.guests();
        let window = now.saturating_sub(self.last).max(1);
        let mut obs = self.observer.sample(now, window, &guests, &p99);
        add_evidence(&mut obs, &counts, &steal_ns, &guests);
        note_trips(&mut self.report, &mut obs, &trips);
        self.last = now;
        self.count_reads();
        mark_entries(&mut self.report, &mut obs, &entries);
        obs
    }

    /// What the observer's last sample cost and found.
    fn count_reads(&mut self) {
        let (o, r) = (&self.observer, &mut self.report);
        self.reads += o.last.reads as u64;
        r.proc_listings += u64::from(o.last.listed);
        r.stat_sweeps += u64::from(o.last.swept);
        r.open_files_max = r.open_files_max.max(o.open_files());
        r.scans_skipped_calm += u64::from(o.last.skipped);
        r.psi = o.has_psi();
        r.schedstat = o.has_schedstat();
    }

    /// RT1+ tasks that span both sets are taken under the policy.
    fn adopt_rt1(&mut self) {
        let guests = self.mover.guests();
        for (tid, start) in self.observer.spanning_rt1(&guests) {
            match self.mover.adopt(tid, start) {
                Ok(()) => self.report.adopted += 1,
                Err(e) if e.is_gone() => {}
                Err(e) => self
                    .report
                    .refused
                    .push(format!("adopt RT1+ task {tid}: {e}")),
            }
        }
    }

    /// Apply one move; a lend wakes the CPU's guard to full rate first.
    fn apply(&mut self, m: &Move, obs: &Observation) {
        let tid = m.task as u32;
        let r = match m.to {
            Place::Rt(cpu) => {
                let st = self.observer.start_time(tid).unwrap_or(0);
                let class = obs
                    .tasks
                    .iter()
                    .find(|t| t.id == m.task)
                    .map_or(TaskClass::Linux, |t| t.class);
                self.report.lends += 1;
                let pid = self.observer.process_of(tid).unwrap_or(tid);
                self.lent
                    .entry(pid)
                    .or_insert((tid, uptime_ticks(self.host)));
                if let Some(g) = &self.guard {
                    g.lending(cpu);
                }
                self.mover.to_rt(tid, cpu, st, class)
            }
            Place::Nrt => self.mover.restore(tid),
            Place::Fixed => Ok(()),
        };
        match r {
            Ok(()) => {
                let reason = reason_name(m.reason).into();
                *self.report.moves.entry(reason).or_default() += 1
            }
            Err(e) if e.is_gone() => {}
            Err(e) => {
                self.refused.insert(m.task);
                self.report.refused.push(format!("task {tid}: {e}"));
            }
        }
    }

    /// The guests now to the sink, the watch and the guard.
    fn after_moves(&mut self, obs: &Observation, policy: &Balancer, now: u64) {
        let guests = self.mover.guests();
        if let Some(ev) = &self.cfg.events {
            report_step(ev, obs, &guests, policy, now);
        }
        if let Some(w) = self.watch.as_mut() {
            w.watch(&guests);
        }
        if let Some(g) = &self.guard {
            g.set_guests(&guests);
        }
        self.report.samples += 1;
        let known = self.observer.known_tasks();
        self.report.tasks_known_max = self.report.tasks_known_max.max(known);
    }

    /// Undo every change, stop the guard and the watch, and say what it cost.
    pub fn finish(mut self, policy: &Balancer, t0: u64, cpu0: u64) -> LiveReport {
        let mut report = std::mem::take(&mut self.report);
        report.lending = policy.lending_status(mono_ns());
        let (restored, fails) = self.mover.restore_all();
        drop(self.guard.take());
        if let Some(w) = self.watch.take() {
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
        report.mean_task_reads_per_sample = self.reads as f64 / report.samples.max(1) as f64;
        report.prediction_hit_rate = (report.lends > 0)
            .then(|| 1.0 - report.kernel_entry_evictions as f64 / report.lends as f64);
        report
    }
}

/// The latency guard of a run: its own threads, or the feed's probe.
fn start_guard(
    host: &Host,
    applied: &Applied,
    cfg: &LiveConfig,
    mover: &Mover,
) -> Result<Option<LatencyGuard>, BalanceError> {
    if !cfg.guard {
        return Ok(None);
    }
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
    Ok(Some(match &cfg.guard_feed {
        Some(feed) => LatencyGuard::fed(feed, opts),
        None => LatencyGuard::start(host, applied, &applied.plan.rt, opts)?,
    }))
}

/// The kernel-entry watch of the RT CPUs, when asked for and possible.
fn start_watch(
    cfg: &LiveConfig,
    rt: &CpuSet,
    mover: &Mover,
    report: &mut LiveReport,
) -> Option<EntryWatch> {
    if !cfg.watch_entries {
        return None;
    }
    EntryWatch::start(rt, mover.evictor())
        .map_err(|e| {
            report
                .notes
                .push(format!("kernel entries of guests not watched: {e}"))
        })
        .ok()
}

/// The /proc observer, tuned to the run's period and the policy's limits.
fn observer(host: &Host, applied: &Applied, cfg: &LiveConfig) -> Observer {
    let plan = &applied.plan;
    let scope = cfg.scope.clone();
    let mut o = Observer::new(host.root(), plan.rt.clone(), plan.nrt.clone(), scope);
    o.set_scan_every(cfg.scan_every);
    o.set_hot_ns(cfg.period_ns / 100);
    // Below the floor, switch-ins stand for voluntary switches (an upper
    // bound); the user-mode prediction needs them exact near its own limit.
    let p = &cfg.policy;
    let switch_limit = if p.predict_user_mode {
        p.switch_rate_max.min(p.lend_switch_rate_max)
    } else {
        p.switch_rate_max
    };
    o.set_switch_floor(switch_limit / 4.0);
    o
}
