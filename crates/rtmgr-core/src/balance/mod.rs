//! The asymmetric load-balancing policy of ARTiS §2.2–2.3, written once over an
//! observed state so that it runs unchanged live (`rtmgr balance`, observing
//! /proc) and in the simulator (`rtmgr-sim`). It decides which RT1+ and Linux
//! tasks may be guests on RT CPUs: RT-load weighting of the run-queue length,
//! eviction of guests about to be non-preemptible for long (the user-space
//! analogue of ARTiS's migration trigger), next-migration-attempt estimation
//! against ping-pong (Figs. 2–3), task/processor association, and pushes only.
//! `scenario` is the lbµ scenario format of ARTiS §3.3 (Fig. 4).

pub mod scenario;

use crate::class::TaskClass;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A task (thread) as the observer names it: a tid live, an index in the simulator.
pub type TaskId = u64;

/// Where a task may run, as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Place {
    /// Anywhere in the NRT set (the kernel balances inside it).
    Nrt,
    /// A guest pinned to this RT CPU.
    Rt(u32),
    /// Not the policy's business (RT0, per-CPU kernel threads, user-pinned tasks).
    Fixed,
}

/// One CPU in one observation window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuObs {
    pub cpu: u32,
    /// Is this an RT CPU of the partition?
    pub rt: bool,
    /// Share of the window (0..1) taken by what the policy does not move: RT0
    /// tasks on an RT CPU, pinned tasks, kernel threads and interrupts elsewhere.
    pub rt_load: f64,
    /// Recent p99 wake-up latency of the latency probe on this CPU, if probed.
    pub latency_p99_ns: Option<u64>,
}

/// One task in one observation window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskObs {
    pub id: TaskId,
    pub class: TaskClass,
    pub place: Place,
    /// Runnable (running or waiting for a CPU) at sampling time.
    pub runnable: bool,
    /// CPU time in user and kernel mode during the window.
    pub user_ns: u64,
    pub kernel_ns: u64,
    /// Context switches during the window.
    pub voluntary: u64,
    pub involuntary: u64,
    /// CPU time since the task started (fairness between candidates).
    pub total_ns: u64,
    /// The observer saw the task enter a non-preemptible section during the
    /// window (only an in-kernel observer such as the simulator can know).
    pub np_entered: bool,
}

/// What the observer saw at `now_ns` over the last `window_ns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Observation {
    pub now_ns: u64,
    pub window_ns: u64,
    pub cpus: Vec<CpuObs>,
    /// The tasks seen; an observer may leave out tasks that neither ran nor
    /// were runnable in the window, unless they are guests.
    pub tasks: Vec<TaskObs>,
}

/// Tunables; the defaults are the ones `rtmgr balance` and the simulator use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PolicyConfig {
    /// A task whose kernel-time share of its CPU time in the window reaches this is kernel-heavy.
    pub kernel_share_max: f64,
    /// ... and only if it ran at least this share of the window (noise floor).
    pub min_busy_share: f64,
    /// A task blocking (voluntary switches) this often per second is system-call/IRQ-heavy.
    pub switch_rate_max: f64,
    /// A guest should stay at least this long on its RT CPU for a move to pay off:
    /// a task whose next kernel-heavy phase is expected sooner is not brought back.
    pub min_stay_ns: u64,
    /// Forbidden-migration time after an eviction when no period is known yet;
    /// doubles with each further eviction, up to `max_backoff_ns`.
    pub initial_backoff_ns: u64,
    pub max_backoff_ns: u64,
    /// Relative gain in CPU share a move must bring (against oscillation).
    pub hysteresis: f64,
    /// Linux tasks are considered for NRT→RT moves every this many steps
    /// (RT1+ tasks at every step: ARTiS "checks more frequently for RT1+ tasks").
    pub linux_every: u32,
    /// At most this many moves per step.
    pub max_moves: usize,
    /// Latency bound of the RT CPUs; None disables the latency guard.
    pub latency_bound_ns: Option<u64>,
    /// How long an RT CPU stays closed to guests after its guard tripped (doubles on repeats).
    pub guard_backoff_ns: u64,
    /// With a latency bound, an RT CPU takes guests only after this many
    /// steps without any, so that the guard knows what its own RT tasks
    /// cost (an RT0 task in 9 ms bursts puts the p99 at ~9 ms by itself).
    pub guard_warmup_steps: u32,
    /// Rotate Linux tasks through the RT CPUs' spare capacity so that every
    /// one gets its turn (what ARTiS's balancer does by moving tasks): a
    /// lone guest is kept while the NRT side is saturated even when it gets
    /// less than an NRT share, and guests are swapped with NRT tasks as soon
    /// as their CPU time so far differs by `rotation_quantum_ns`.
    pub rotate: bool,
    pub rotation_quantum_ns: u64,
    /// A guest keeps its seat at least this long before a rotation swap
    /// (bounds the migrations when seats differ much from NRT shares).
    pub rotation_min_stay_ns: u64,
    /// An RT CPU with less spare capacity than this is not lent for rotation.
    pub min_lend_capacity: f64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            kernel_share_max: 0.30,
            min_busy_share: 0.02,
            switch_rate_max: 2000.0,
            min_stay_ns: 500_000_000,
            initial_backoff_ns: 1_000_000_000,
            max_backoff_ns: 32_000_000_000,
            hysteresis: 0.05,
            linux_every: 2,
            max_moves: 16,
            latency_bound_ns: None,
            guard_backoff_ns: 2_000_000_000,
            guard_warmup_steps: 10,
            rotate: true,
            rotation_quantum_ns: 50_000_000,
            rotation_min_stay_ns: 500_000_000,
            min_lend_capacity: 0.05,
        }
    }
}

/// Why a task was moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// Kernel-heavy guest pushed off an RT CPU (the ARTiS migration trigger).
    KernelHeavy,
    /// The latency guard of its RT CPU tripped: every guest leaves at once.
    LatencyGuard,
    /// Its RT CPU is no longer an open RT CPU (partition or guard rules).
    NotAllowed,
    /// RT→NRT: the guest gets less CPU than it would on the NRT CPUs.
    Rebalance,
    /// NRT→RT: the RT CPU has spare capacity for one more guest.
    Fill,
    /// A swap of a guest and an NRT task whose CPU time so far differ by
    /// more than the rotation quantum (each side of the swap is one move).
    Rotate,
}

/// A push decided by the policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    pub task: TaskId,
    pub from: Place,
    pub to: Place,
    pub reason: Reason,
}

/// What the policy remembers of one task (ARTiS §2.3, Fig. 3: "the period is
/// deducted from the study of the previous behavior of the given task").
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct History {
    /// Kernel-heavy in the last window.
    pub heavy: bool,
    /// Kernel-heavy phases seen so far.
    pub phases: u32,
    pub last_phase_start_ns: Option<u64>,
    /// Smoothed time between the starts of two kernel-heavy phases.
    pub mean_period_ns: Option<u64>,
    /// Evictions so far (drives the back-off when no period is known).
    pub evictions: u32,
    /// Hard lower bound for the next NRT→RT move, fixed at eviction time.
    pub not_before_ns: u64,
    /// When the task was last observed (its history is forgotten after
    /// `max_backoff_ns` unseen: by then no back-off it earned still holds).
    #[serde(default)]
    pub seen_ns: u64,
}

impl History {
    /// A kernel-heavy phase starts at `now` (its first window, or an ARTiS trigger).
    pub fn phase_started(&mut self, now: u64) {
        if let Some(last) = self.last_phase_start_ns {
            let p = now.saturating_sub(last).max(1);
            self.mean_period_ns = Some(match self.mean_period_ns {
                Some(m) => (m + p) / 2,
                None => p,
            });
        }
        self.last_phase_start_ns = Some(now);
        self.phases += 1;
    }

    /// When the next kernel-heavy phase is expected, if the task has a period.
    pub fn next_phase_ns(&self, now: u64) -> Option<u64> {
        let (last, p) = (self.last_phase_start_ns?, self.mean_period_ns?);
        let k = now.saturating_sub(last) / p + 1;
        Some(last + k * p)
    }

    /// The estimate of Fig. 3: is the next kernel-heavy phase far enough away
    /// for a stay on an RT CPU to pay off? Also honours the hard bound.
    pub fn may_return(&self, now: u64, cfg: &PolicyConfig) -> bool {
        if self.heavy || now < self.not_before_ns {
            return false;
        }
        match self.next_phase_ns(now) {
            Some(next) => next - now >= cfg.min_stay_ns,
            None => true,
        }
    }

    /// Record an eviction at `now` (after `phase_started` if it was one) and
    /// fix the earliest time the task may come back.
    pub fn evicted(&mut self, now: u64, window_ns: u64, cfg: &PolicyConfig) {
        self.evictions += 1;
        let periodic = self
            .mean_period_ns
            .is_some_and(|p| p >= cfg.min_stay_ns + window_ns);
        let wait = if periodic {
            // Rare, periodic phases: back once this phase is over.
            2 * window_ns
        } else {
            let shift = self.evictions.saturating_sub(1).min(16);
            cfg.initial_backoff_ns
                .saturating_mul(1u64 << shift)
                .min(cfg.max_backoff_ns)
        };
        self.not_before_ns = now + wait;
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Guard {
    trips: u32,
    closed_until_ns: u64,
    last_trip_ns: u64,
    /// Smoothed p99 of the CPU while it had no guest: what its own RT tasks cost.
    baseline_ns: Option<u64>,
    /// Steps seen without guests (the baseline needs a few before any lending).
    clean_steps: u32,
}

/// The policy with its memory. Deterministic: same observations, same moves.
#[derive(Debug, Clone)]
pub struct Balancer {
    pub cfg: PolicyConfig,
    history: BTreeMap<TaskId, History>,
    guards: BTreeMap<u32, Guard>,
    steps: u64,
    /// Since when each guest has been on its RT CPU (for rotation).
    seated: BTreeMap<TaskId, u64>,
}

/// Share of a CPU capacity split among `n` runnable tasks.
fn share(cap: f64, n: usize) -> f64 {
    if n == 0 {
        f64::INFINITY
    } else {
        cap / n as f64
    }
}

const MIN_CAPACITY: f64 = 0.001;

impl Balancer {
    pub fn new(cfg: PolicyConfig) -> Self {
        Balancer {
            cfg,
            history: BTreeMap::new(),
            guards: BTreeMap::new(),
            steps: 0,
            seated: BTreeMap::new(),
        }
    }

    pub fn history(&self, task: TaskId) -> Option<&History> {
        self.history.get(&task)
    }

    /// Is this RT CPU closed to guests by its latency guard at `now`?
    pub fn closed(&self, cpu: u32, now: u64) -> bool {
        self.guards
            .get(&cpu)
            .is_some_and(|g| now < g.closed_until_ns)
    }

    /// Does this RT CPU take new guests at `now`: not closed by its guard,
    /// and, with a latency bound, past the guard's warm-up?
    pub fn accepting(&self, cpu: u32, now: u64) -> bool {
        let warm = self.cfg.latency_bound_ns.is_none()
            || self
                .guards
                .get(&cpu)
                .is_some_and(|g| g.clean_steps >= self.cfg.guard_warmup_steps);
        warm && !self.closed(cpu, now)
    }

    fn is_heavy(&self, t: &TaskObs, window_ns: u64) -> bool {
        if t.np_entered {
            return true;
        }
        let busy = t.user_ns + t.kernel_ns;
        let w = window_ns.max(1) as f64;
        let kernel_heavy = busy as f64 >= self.cfg.min_busy_share * w
            && t.kernel_ns as f64 >= self.cfg.kernel_share_max * busy as f64;
        let switch_heavy = t.voluntary as f64 * 1e9 / w >= self.cfg.switch_rate_max;
        kernel_heavy || switch_heavy
    }

    /// One balancing step: learn from the observation, then decide the
    /// pushes, phase by phase over a [`Step`].
    pub fn step(&mut self, obs: &Observation) -> Vec<Move> {
        self.steps += 1;
        let mut s = Step::new(obs);
        self.learn_history(&s);
        self.track_seats(&s);
        self.forget_unseen(&s);
        self.trip_latency_guards(&mut s);
        self.evict_guests(&mut s);
        self.weigh_loads(&mut s);
        self.return_idle_guests(&mut s);
        self.push_back_to_nrt(&mut s);
        let waiting = self.fill_rt_cpus(&mut s);
        if self.cfg.rotate && s.linux_turn {
            self.rotate(&mut s, &waiting);
        }
        s.moves
    }

    /// Phase 1 (ARTiS §2.3, Fig. 3: "the period is deducted from the study of
    /// the previous behavior of the given task"): note which tasks were
    /// kernel-heavy and when their heavy phases began. Only for tasks the
    /// policy may move, and only once they were kernel-heavy or evicted: the
    /// others have nothing to remember.
    fn learn_history(&mut self, s: &Step) {
        for t in s.obs.tasks.iter().filter(|t| movable(t)) {
            let heavy = self.is_heavy(t, s.obs.window_ns);
            if !heavy && !self.history.contains_key(&t.id) {
                continue;
            }
            let h = self.history.entry(t.id).or_default();
            if heavy && !h.heavy {
                h.phase_started(s.now);
            }
            h.heavy = heavy;
            h.seen_ns = s.now;
        }
    }

    /// Phase 2 (rotation, rtmgr's extension of §2.3's balancing by moving
    /// tasks): when each guest was first seen on its RT CPU.
    fn track_seats(&mut self, s: &Step) {
        let mut seated = std::mem::take(&mut self.seated);
        seated.retain(|id, _| {
            s.obs
                .tasks
                .iter()
                .any(|t| t.id == *id && matches!(t.place, Place::Rt(_)))
        });
        for t in s
            .obs
            .tasks
            .iter()
            .filter(|t| matches!(t.place, Place::Rt(_)))
        {
            seated.entry(t.id).or_insert(s.now);
        }
        self.seated = seated;
    }

    /// Phase 3 (Fig. 3): a task unseen for longer than any back-off (exited,
    /// or asleep and left out of the observation) is forgotten.
    fn forget_unseen(&mut self, s: &Step) {
        let (now, forget) = (s.now, self.cfg.max_backoff_ns);
        self.history
            .retain(|_, h| now.saturating_sub(h.seen_ns) <= forget);
    }

    /// Phase 4 (§2.1's latency goal, measured rather than assumed): an RT
    /// CPU's guard trips when, with guests, its probe's p99 exceeds the bound
    /// and what the CPU showed without guests (its own RT0 load delays the
    /// probe too, and guests are not to blame for that) by a quarter.
    fn trip_latency_guards(&mut self, s: &mut Step) {
        let Some(bound) = self.cfg.latency_bound_ns else {
            return;
        };
        let (now, backoff) = (s.now, self.cfg.guard_backoff_ns);
        for c in s.obs.cpus.iter().filter(|c| c.rt) {
            let has_guests = s.obs.tasks.iter().any(|t| t.place == Place::Rt(c.cpu));
            let g = self.guards.entry(c.cpu).or_default();
            if now >= g.last_trip_ns.saturating_add(10 * backoff) {
                g.trips = 0;
            }
            if !has_guests {
                g.clean_steps = g.clean_steps.saturating_add(1);
            }
            if let (false, Some(p)) = (has_guests, c.latency_p99_ns) {
                g.baseline_ns = Some(g.baseline_ns.map_or(p, |b| (3 * b + p) / 4));
            }
            let limit = g.baseline_ns.map_or(bound, |b| bound.max(b + b / 4));
            if has_guests && c.latency_p99_ns.is_some_and(|p| p > limit) && now >= g.closed_until_ns
            {
                let shift = g.trips.min(4);
                g.closed_until_ns = now + (backoff << shift);
                g.trips += 1;
                g.last_trip_ns = now;
                s.tripped.push(c.cpu);
            }
        }
    }

    /// Phase 5 (§2.2, the migration trigger from user space): guests leave
    /// their RT CPU when the partition's rules no longer allow it there,
    /// when its guard tripped, or when they turned kernel-heavy (in that
    /// order of reasons); the last two count as evictions (Fig. 3 back-off).
    fn evict_guests(&mut self, s: &mut Step) {
        let obs = s.obs;
        for t in obs.tasks.iter().filter(|t| movable(t)) {
            let Place::Rt(cpu) = t.place else { continue };
            let reason = if !s.rt_cpus.contains_key(&cpu) {
                Reason::NotAllowed
            } else if s.tripped.contains(&cpu) {
                Reason::LatencyGuard
            } else if self.closed(cpu, s.now) {
                Reason::NotAllowed
            } else if self.history.get(&t.id).is_some_and(|h| h.heavy) {
                Reason::KernelHeavy
            } else {
                continue;
            };
            let h = self.history.entry(t.id).or_default();
            h.seen_ns = s.now;
            if reason != Reason::NotAllowed {
                h.evicted(s.now, obs.window_ns, &self.cfg);
            }
            s.send_back(t, reason);
        }
    }

    /// Phase 6 (§2.3, RT-load weighting): the NRT CPUs' capacity left by
    /// what the policy does not move, the runnable movable tasks it must
    /// share, and the runnable guests of each RT CPU.
    fn weigh_loads(&self, s: &mut Step) {
        let obs = s.obs;
        s.cap_nrt = obs.cpus.iter().filter(|c| !c.rt).map(capacity).sum();
        s.guests = s.rt_cpus.keys().map(|&c| (c, Vec::new())).collect();
        for t in obs.tasks.iter().filter(|t| movable(t) && t.runnable) {
            match (t.place, s.moved.contains_key(&t.id)) {
                (Place::Nrt, _) | (Place::Rt(_), true) => s.n_nrt += 1,
                (Place::Rt(c), false) => s.guests.entry(c).or_default().push(t),
                (Place::Fixed, _) => {}
            }
        }
    }

    /// Phase 7 (§2.3, task/processor association): a Linux guest that sleeps
    /// and barely used its seat goes back. An RT CPU is lent to CPU-bound
    /// work, not to a task that wakes now and then (it would wait behind RT0
    /// at each wake-up).
    fn return_idle_guests(&self, s: &mut Step) {
        let obs = s.obs;
        for t in obs.tasks.iter().filter(|t| movable(t) && !t.runnable) {
            if let (Place::Rt(c), false, TaskClass::Linux) =
                (t.place, s.moved.contains_key(&t.id), t.class)
            {
                if s.moves.len() < self.cfg.max_moves
                    && s.rt_cpus.contains_key(&c)
                    && !used_share(t, 0.1 * s.cap(c), obs.window_ns)
                {
                    s.send_back(t, Reason::Rebalance);
                }
            }
        }
    }

    /// Phase 8 (§2.3, push RT→NRT with association): while a guest would get
    /// a better share on the NRT CPUs, push one back, Linux tasks first and
    /// the ones that received most first. A lone Linux guest on an RT CPU
    /// with spare capacity, while the NRT side is saturated without it, adds
    /// throughput whatever its share: rotation keeps that fair.
    fn push_back_to_nrt(&self, s: &mut Step) {
        let cfg = &self.cfg;
        let gain = 1.0 + cfg.hysteresis;
        let mut guests = std::mem::take(&mut s.guests);
        for (&cpu, list) in guests.iter_mut() {
            list.sort_by_key(|t| {
                (
                    t.class != TaskClass::Linux,
                    std::cmp::Reverse(t.total_ns),
                    t.id,
                )
            });
            let (cap, cap_nrt) = (s.cap(cpu), s.cap_nrt);
            let lone_rotating = |list: &Vec<&TaskObs>, n_nrt: usize| {
                cfg.rotate
                    && list.len() == 1
                    && list[0].class == TaskClass::Linux
                    && cap >= cfg.min_lend_capacity
                    && n_nrt as f64 >= cap_nrt
            };
            while !list.is_empty()
                && s.moves.len() < cfg.max_moves
                && share(cap, list.len()) * gain < share(cap_nrt, s.n_nrt + 1)
                && !lone_rotating(list, s.n_nrt)
            {
                let t = list.remove(0);
                s.send_back(t, Reason::Rebalance);
                s.n_nrt += 1;
            }
        }
        s.guests = guests;
    }

    /// Phase 9 (§2.3, NRT→RT with association and Fig. 3's estimate): fill
    /// the RT CPUs' spare capacity, RT1+ tasks first (highest priority
    /// first) and at every step, Linux tasks every `linux_every` steps and
    /// only when CPU-bound, poorest first; never a task whose next
    /// kernel-heavy phase is near. Returns the candidates left waiting.
    fn fill_rt_cpus<'a>(&self, s: &mut Step<'a>) -> Vec<&'a TaskObs> {
        let (cfg, obs, now) = (&self.cfg, s.obs, s.now);
        let w = obs.window_ns;
        let gain = 1.0 + cfg.hysteresis;
        s.linux_turn = self.steps.is_multiple_of(u64::from(cfg.linux_every.max(1)));
        let nrt_share = share(s.cap_nrt, s.n_nrt).min(1.0);
        let mut candidates: Vec<&TaskObs> = obs
            .tasks
            .iter()
            .filter(|t| movable(t) && t.runnable && t.place == Place::Nrt)
            .filter(|t| s.linux_turn || t.class != TaskClass::Linux)
            // Linux tasks only when CPU-bound (half their NRT share at least).
            .filter(|t| t.class != TaskClass::Linux || used_share(t, 0.5 * nrt_share, w))
            .filter(|t| {
                self.history
                    .get(&t.id)
                    .is_none_or(|h| h.may_return(now, cfg))
            })
            .collect();
        candidates.sort_by_key(|t| (class_rank(t.class), t.total_ns, t.id));
        s.counts = s.guests.iter().map(|(&c, l)| (c, l.len())).collect();
        let mut filled = 0;
        for t in candidates.iter() {
            if s.moves.len() >= cfg.max_moves || s.n_nrt <= 1 {
                break;
            }
            let best = s
                .counts
                .iter()
                .filter(|(&c, _)| self.accepting(c, now))
                .map(|(&c, &n)| (c, share(s.cap(c), n + 1)))
                .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
            let Some((cpu, sh)) = best else { break };
            if sh < share(s.cap_nrt, s.n_nrt) * gain {
                break;
            }
            s.moves.push(Move {
                task: t.id,
                from: Place::Nrt,
                to: Place::Rt(cpu),
                reason: Reason::Fill,
            });
            s.moved.insert(t.id, ());
            *s.counts.get_mut(&cpu).expect("known cpu") += 1;
            s.n_nrt -= 1;
            filled += 1;
        }
        candidates[filled..]
            .iter()
            .copied()
            .filter(|t| t.class == TaskClass::Linux)
            .collect()
    }

    /// Phase 10, rotation (rtmgr's extension; ARTiS's balancer gives every
    /// task its turn by moving tasks), Linux tasks only. An RT CPU without
    /// guests whose spare capacity is below the NRT share is lent anyway
    /// while the NRT side is saturated, to the richest candidate (the seat
    /// is the worse one); a guest trades places with the NRT task it is
    /// furthest from, by more than the quantum: with the poorest when its
    /// seat is the better one, with the richest when it is the worse one.
    fn rotate(&self, s: &mut Step, candidates: &[&TaskObs]) {
        let cfg = &self.cfg;
        let Step {
            obs,
            now,
            rt_cpus,
            moves,
            cap_nrt,
            n_nrt,
            guests,
            counts,
            ..
        } = s;
        let (now, window_ns, cap_nrt, mut n_nrt) = (*now, obs.window_ns, *cap_nrt, *n_nrt);
        let cap = |cpu: u32| capacity(rt_cpus[&cpu]);
        // Poorest first; taken from both ends.
        let mut pool: std::collections::VecDeque<&TaskObs> = candidates.iter().copied().collect();
        let open = |c: u32| self.accepting(c, now) && cap(c) >= cfg.min_lend_capacity;
        for (&cpu, &n) in counts.iter() {
            if moves.len() >= cfg.max_moves {
                return;
            }
            if n == 0 && open(cpu) && (n_nrt as f64 - 1.0) >= cap_nrt {
                if let Some(t) = pool.pop_back() {
                    moves.push(Move {
                        task: t.id,
                        from: Place::Nrt,
                        to: Place::Rt(cpu),
                        reason: Reason::Fill,
                    });
                    n_nrt -= 1;
                }
            }
        }
        let seat_better = |cpu: u32, k: usize| share(cap(cpu), k) >= share(cap_nrt, n_nrt);
        let q = cfg.rotation_quantum_ns;
        for (&cpu, list) in guests.iter() {
            if !open(cpu) {
                continue;
            }
            let better = seat_better(cpu, list.len());
            let seat = share(cap(cpu), list.len()).min(1.0);
            let rotating = list
                .iter()
                .filter(|g| g.class == TaskClass::Linux && used_share(g, 0.5 * seat, window_ns));
            for g in rotating {
                if moves.len() + 2 > cfg.max_moves {
                    return;
                }
                if moves.iter().any(|m| m.task == g.id)
                    || self
                        .seated
                        .get(&g.id)
                        .is_some_and(|&t0| now < t0.saturating_add(cfg.rotation_min_stay_ns))
                {
                    continue;
                }
                let other = if better {
                    pool.front()
                        .filter(|p| p.total_ns.saturating_add(q) < g.total_ns)
                        .copied()
                } else {
                    pool.back()
                        .filter(|r| r.total_ns > g.total_ns.saturating_add(q))
                        .copied()
                };
                let Some(o) = other else { continue };
                if better {
                    pool.pop_front();
                } else {
                    pool.pop_back();
                }
                moves.push(Move {
                    task: g.id,
                    from: g.place,
                    to: Place::Nrt,
                    reason: Reason::Rotate,
                });
                moves.push(Move {
                    task: o.id,
                    from: Place::Nrt,
                    to: Place::Rt(cpu),
                    reason: Reason::Rotate,
                });
            }
        }
    }
}

/// One step's working state: the observation, and what the phases of
/// [`Balancer::step`] found and decided so far.
struct Step<'a> {
    obs: &'a Observation,
    now: u64,
    /// The RT CPUs of the partition, by number.
    rt_cpus: BTreeMap<u32, &'a CpuObs>,
    /// RT CPUs whose latency guard tripped in this step.
    tripped: Vec<u32>,
    moves: Vec<Move>,
    /// Tasks that a move of this step sends back to the NRT CPUs or fills in.
    moved: BTreeMap<TaskId, ()>,
    /// Capacity of the NRT CPUs (RT-load weighted) and the runnable movable
    /// tasks sharing it, moves so far included.
    cap_nrt: f64,
    n_nrt: usize,
    /// Runnable guests staying on each RT CPU.
    guests: BTreeMap<u32, Vec<&'a TaskObs>>,
    /// Guests per RT CPU, the step's fills included.
    counts: BTreeMap<u32, usize>,
    /// Do Linux tasks get their NRT→RT turn in this step?
    linux_turn: bool,
}

impl<'a> Step<'a> {
    fn new(obs: &'a Observation) -> Self {
        Step {
            obs,
            now: obs.now_ns,
            rt_cpus: obs
                .cpus
                .iter()
                .filter(|c| c.rt)
                .map(|c| (c.cpu, c))
                .collect(),
            tripped: Vec::new(),
            moves: Vec::new(),
            moved: BTreeMap::new(),
            cap_nrt: 0.0,
            n_nrt: 0,
            guests: BTreeMap::new(),
            counts: BTreeMap::new(),
            linux_turn: false,
        }
    }

    /// Spare capacity of an RT CPU (RT-load weighted, §2.3).
    fn cap(&self, cpu: u32) -> f64 {
        capacity(self.rt_cpus[&cpu])
    }

    /// Push `t` back to the NRT CPUs for `reason`.
    fn send_back(&mut self, t: &TaskObs, reason: Reason) {
        self.moves.push(Move {
            task: t.id,
            from: t.place,
            to: Place::Nrt,
            reason,
        });
        self.moved.insert(t.id, ());
    }
}

/// What a CPU offers to the tasks the policy moves (RT-load weighting, §2.3).
fn capacity(c: &CpuObs) -> f64 {
    (1.0 - c.rt_load).clamp(MIN_CAPACITY, 1.0)
}

/// Did the task use at least `share` of a CPU over the window?
fn used_share(t: &TaskObs, share: f64, window_ns: u64) -> bool {
    (t.user_ns + t.kernel_ns) as f64 >= share * window_ns as f64
}

/// The policy moves RT1+ and Linux tasks that are not fixed; never RT0.
fn movable(t: &TaskObs) -> bool {
    t.class != TaskClass::Rt0 && t.place != Place::Fixed
}

/// NRT→RT order: RT1+ (higher priority first) before Linux tasks.
fn class_rank(c: TaskClass) -> u32 {
    match c {
        TaskClass::Rt1 { priority } => 100 - u32::from(priority),
        TaskClass::Linux => 1000,
        TaskClass::Rt0 => 0,
    }
}

#[cfg(test)]
mod tests;
