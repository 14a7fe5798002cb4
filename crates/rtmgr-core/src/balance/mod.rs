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

    /// One balancing step: learn from the observation, then decide the pushes.
    pub fn step(&mut self, obs: &Observation) -> Vec<Move> {
        self.steps += 1;
        let now = obs.now_ns;
        let cfg = self.cfg.clone();
        // 1. History (only for tasks the policy may move, and only once they
        // were kernel-heavy or evicted: the others have nothing to remember).
        for t in obs.tasks.iter().filter(|t| movable(t)) {
            let heavy = self.is_heavy(t, obs.window_ns);
            if !heavy && !self.history.contains_key(&t.id) {
                continue;
            }
            let h = self.history.entry(t.id).or_default();
            if heavy && !h.heavy {
                h.phase_started(now);
            }
            h.heavy = heavy;
            h.seen_ns = now;
        }
        // Seats: when each guest was first seen on its RT CPU.
        let mut seated = std::mem::take(&mut self.seated);
        seated.retain(|id, _| {
            obs.tasks
                .iter()
                .any(|t| t.id == *id && matches!(t.place, Place::Rt(_)))
        });
        for t in obs.tasks.iter().filter(|t| matches!(t.place, Place::Rt(_))) {
            seated.entry(t.id).or_insert(now);
        }
        self.seated = seated;
        // A task unseen for longer than any back-off (exited, or asleep and
        // left out of the observation) is forgotten.
        let forget = cfg.max_backoff_ns;
        self.history
            .retain(|_, h| now.saturating_sub(h.seen_ns) <= forget);

        // 2. Latency guard: trips when a CPU with guests exceeds the bound and
        // what the CPU showed without guests (its own RT0 load delays the
        // probe too, and guests are not to blame for that) by a quarter.
        let mut tripped = Vec::new();
        if let Some(bound) = cfg.latency_bound_ns {
            for c in obs.cpus.iter().filter(|c| c.rt) {
                let has_guests = obs.tasks.iter().any(|t| t.place == Place::Rt(c.cpu));
                let g = self.guards.entry(c.cpu).or_default();
                if now >= g.last_trip_ns.saturating_add(10 * cfg.guard_backoff_ns) {
                    g.trips = 0;
                }
                if !has_guests {
                    g.clean_steps = g.clean_steps.saturating_add(1);
                }
                if let (false, Some(p)) = (has_guests, c.latency_p99_ns) {
                    g.baseline_ns = Some(g.baseline_ns.map_or(p, |b| (3 * b + p) / 4));
                }
                let limit = g.baseline_ns.map_or(bound, |b| bound.max(b + b / 4));
                if has_guests
                    && c.latency_p99_ns.is_some_and(|p| p > limit)
                    && now >= g.closed_until_ns
                {
                    let shift = g.trips.min(4);
                    g.closed_until_ns = now + (cfg.guard_backoff_ns << shift);
                    g.trips += 1;
                    g.last_trip_ns = now;
                    tripped.push(c.cpu);
                }
            }
        }

        let rt_cpus: BTreeMap<u32, &CpuObs> = obs
            .cpus
            .iter()
            .filter(|c| c.rt)
            .map(|c| (c.cpu, c))
            .collect();
        let mut moves = Vec::new();
        let mut moved = BTreeMap::new();

        // 3. Evictions: rules first, then the guard, then kernel-heavy guests.
        for t in obs.tasks.iter().filter(|t| movable(t)) {
            let Place::Rt(cpu) = t.place else { continue };
            let reason = if !rt_cpus.contains_key(&cpu) {
                Reason::NotAllowed
            } else if tripped.contains(&cpu) {
                Reason::LatencyGuard
            } else if self.closed(cpu, now) {
                Reason::NotAllowed
            } else if self.history.get(&t.id).is_some_and(|h| h.heavy) {
                Reason::KernelHeavy
            } else {
                continue;
            };
            let h = self.history.entry(t.id).or_default();
            h.seen_ns = now;
            if reason != Reason::NotAllowed {
                h.evicted(now, obs.window_ns, &cfg);
            }
            send_back(&mut moves, &mut moved, t, reason);
        }

        // 4. RT-load weighted capacities and run-queue lengths (§2.3).
        let cap_nrt: f64 = obs
            .cpus
            .iter()
            .filter(|c| !c.rt)
            .map(|c| (1.0 - c.rt_load).clamp(MIN_CAPACITY, 1.0))
            .sum();
        let mut n_nrt = 0usize;
        let mut guests: BTreeMap<u32, Vec<&TaskObs>> =
            rt_cpus.keys().map(|&c| (c, Vec::new())).collect();
        for t in obs.tasks.iter().filter(|t| movable(t) && t.runnable) {
            match (t.place, moved.contains_key(&t.id)) {
                (Place::Nrt, _) | (Place::Rt(_), true) => n_nrt += 1,
                (Place::Rt(c), false) => guests.entry(c).or_default().push(t),
                (Place::Fixed, _) => {}
            }
        }
        let cap = |cpu: u32| (1.0 - rt_cpus[&cpu].rt_load).clamp(MIN_CAPACITY, 1.0);
        let gain = 1.0 + cfg.hysteresis;
        let w = obs.window_ns;

        // A Linux guest that sleeps and barely used its seat goes back: an
        // RT CPU is lent to CPU-bound work, not to a task that wakes now and
        // then (it would wait behind RT0 at each wake-up).
        for t in obs.tasks.iter().filter(|t| movable(t) && !t.runnable) {
            if let (Place::Rt(c), false, TaskClass::Linux) =
                (t.place, moved.contains_key(&t.id), t.class)
            {
                if moves.len() < cfg.max_moves
                    && rt_cpus.contains_key(&c)
                    && !used_share(t, 0.1 * cap(c), w)
                {
                    send_back(&mut moves, &mut moved, t, Reason::Rebalance);
                }
            }
        }

        // 5. RT→NRT: Linux tasks go first, the ones that received most first.
        for (&cpu, list) in guests.iter_mut() {
            list.sort_by_key(|t| {
                (
                    t.class != TaskClass::Linux,
                    std::cmp::Reverse(t.total_ns),
                    t.id,
                )
            });
            // A lone Linux guest on an RT CPU with spare capacity, while the
            // NRT side is saturated without it, adds throughput whatever its
            // share: rotation (below) keeps that fair.
            let lone_rotating = |list: &Vec<&TaskObs>, n_nrt: usize| {
                cfg.rotate
                    && list.len() == 1
                    && list[0].class == TaskClass::Linux
                    && cap(cpu) >= cfg.min_lend_capacity
                    && n_nrt as f64 >= cap_nrt
            };
            while !list.is_empty()
                && moves.len() < cfg.max_moves
                && share(cap(cpu), list.len()) * gain < share(cap_nrt, n_nrt + 1)
                && !lone_rotating(list, n_nrt)
            {
                let t = list.remove(0);
                send_back(&mut moves, &mut moved, t, Reason::Rebalance);
                n_nrt += 1;
            }
        }

        // 6. NRT→RT: RT1+ tasks first (highest priority first) and at every
        // step; Linux tasks every `linux_every` steps, poorest first.
        let linux_turn = self.steps.is_multiple_of(u64::from(cfg.linux_every.max(1)));
        let nrt_share = share(cap_nrt, n_nrt).min(1.0);
        let mut candidates: Vec<&TaskObs> = obs
            .tasks
            .iter()
            .filter(|t| movable(t) && t.runnable && t.place == Place::Nrt)
            .filter(|t| linux_turn || t.class != TaskClass::Linux)
            // Linux tasks only when CPU-bound (half their NRT share at least).
            .filter(|t| t.class != TaskClass::Linux || used_share(t, 0.5 * nrt_share, w))
            .filter(|t| {
                self.history
                    .get(&t.id)
                    .is_none_or(|h| h.may_return(now, &cfg))
            })
            .collect();
        candidates.sort_by_key(|t| (class_rank(t.class), t.total_ns, t.id));
        let mut counts: BTreeMap<u32, usize> = guests.iter().map(|(&c, l)| (c, l.len())).collect();
        let mut filled = 0;
        for t in candidates.iter() {
            if moves.len() >= cfg.max_moves || n_nrt <= 1 {
                break;
            }
            let best = counts
                .iter()
                .filter(|(&c, _)| self.accepting(c, now))
                .map(|(&c, &n)| (c, share(cap(c), n + 1)))
                .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
            let Some((cpu, s)) = best else { break };
            if s < share(cap_nrt, n_nrt) * gain {
                break;
            }
            moves.push(Move {
                task: t.id,
                from: Place::Nrt,
                to: Place::Rt(cpu),
                reason: Reason::Fill,
            });
            moved.insert(t.id, ());
            *counts.get_mut(&cpu).expect("known cpu") += 1;
            n_nrt -= 1;
            filled += 1;
        }
        if cfg.rotate && linux_turn {
            let rest: Vec<&TaskObs> = candidates[filled..]
                .iter()
                .copied()
                .filter(|t| t.class == TaskClass::Linux)
                .collect();
            self.rotate(
                &rest, &guests, &counts, &rt_cpus, cap_nrt, n_nrt, now, w, &mut moves,
            );
        }
        moves
    }

    /// Step 7, rotation (Linux tasks only). An RT CPU without guests whose spare
    /// capacity is below the NRT share is lent anyway while the NRT side is
    /// saturated, to the richest candidate (the seat is the worse one); a
    /// guest trades places with the NRT task it is furthest from, by more
    /// than the quantum: with the poorest when its seat is the better one,
    /// with the richest when it is the worse one.
    #[allow(clippy::too_many_arguments)]
    fn rotate(
        &self,
        candidates: &[&TaskObs],
        guests: &BTreeMap<u32, Vec<&TaskObs>>,
        counts: &BTreeMap<u32, usize>,
        rt_cpus: &BTreeMap<u32, &CpuObs>,
        cap_nrt: f64,
        mut n_nrt: usize,
        now: u64,
        window_ns: u64,
        moves: &mut Vec<Move>,
    ) {
        let cfg = &self.cfg;
        let cap = |cpu: u32| (1.0 - rt_cpus[&cpu].rt_load).clamp(MIN_CAPACITY, 1.0);
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

/// Push `t` back to the NRT CPUs for `reason`.
fn send_back(moves: &mut Vec<Move>, moved: &mut BTreeMap<TaskId, ()>, t: &TaskObs, reason: Reason) {
    moves.push(Move {
        task: t.id,
        from: t.place,
        to: Place::Nrt,
        reason,
    });
    moved.insert(t.id, ());
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
