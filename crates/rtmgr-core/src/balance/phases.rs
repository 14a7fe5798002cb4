//! One balancing step (ARTiS §2.2–2.3 from user space): `Balancer::step` and
//! its phases, each a method over a `Step` that holds the observation and
//! what the earlier phases found and decided: learn, guard, evict, weigh,
//! push back, fill, rotate.

use super::cpu_map::CpuMap;
use super::policy::Balancer;
use super::{CpuObs, Move, Observation, Place, Reason, TaskId, TaskObs};
use crate::class::TaskClass;
use std::collections::BTreeMap;

impl Balancer {
    /// One balancing step: learn from the observation, then decide the
    /// pushes, phase by phase over a [`Step`].
    pub fn step(&mut self, obs: &Observation) -> Vec<Move> {
        self.steps += 1;
        let mut s = Step::new(obs);
        self.learn_history(&s);
        self.track_seats(&s);
        self.forget_unseen(&s);
        self.trip_latency_guards(&mut s);
        self.judge_lending(&s);
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
        let mut guests = std::mem::take(&mut self.seen_guests);
        guests.clear();
        let seen = s
            .obs
            .tasks
            .iter()
            .filter(|t| matches!(t.place, Place::Rt(_)));
        guests.extend(seen.map(|t| t.id));
        guests.sort_unstable();
        // The guests seen now keep their seat's start; new ones start now.
        self.seated.retain(|id, _| guests.binary_search(id).is_ok());
        for &id in &guests {
            self.seated.entry(id).or_insert(s.now);
        }
        self.seen_guests = guests;
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
    /// probe too, and guests are not to blame for that) by a quarter; or
    /// when the live guard already tripped on it (`CpuObs::guard_trips`).
    fn trip_latency_guards(&mut self, s: &mut Step) {
        let Some(bound) = self.cfg.latency_bound_ns else {
            return;
        };
        let (now, backoff) = (s.now, self.cfg.guard_backoff_ns);
        let mut with_guests: Vec<u32> = s
            .obs
            .tasks
            .iter()
            .filter_map(|t| match t.place {
                Place::Rt(c) => Some(c),
                _ => None,
            })
            .collect();
        with_guests.sort_unstable();
        for c in s.obs.cpus.iter().filter(|c| c.rt) {
            let has_guests = with_guests.binary_search(&c.cpu).is_ok();
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
            let limit = super::guard_limit_ns(bound, g.baseline_ns);
            let over = has_guests && c.latency_p99_ns.is_some_and(|p| p > limit);
            if (over || c.guard_trips > 0) && now >= g.closed_until_ns {
                let shift = g.trips.min(4);
                g.closed_until_ns = now + (backoff << shift);
                g.trips += 1;
                g.last_trip_ns = now;
                s.tripped.push(c.cpu);
            }
        }
    }

    /// Phase 4b (§2.1's promise kept by measurement, `lending.rs`): the
    /// lending controller judges each RT CPU's window, lent or guest-free;
    /// a CPU whose lends harm its RT tasks stops being lent.
    fn judge_lending(&mut self, s: &Step) {
        let tasks = &s.obs.tasks;
        let guests = |cpu: u32| {
            tasks
                .iter()
                .filter(|t| t.place == Place::Rt(cpu) && movable(t))
                .count()
        };
        // The CPUs it stops are no longer `allows`ed: `evict_guests` empties them.
        self.lending.observe(s.now, &s.obs.cpus, guests);
    }

    /// Phase 5 (§2.2, the migration trigger from user space): guests leave
    /// their RT CPU when the partition's rules no longer allow it there,
    /// when its guard tripped, when its lending stopped, or when they
    /// turned kernel-heavy (in that order of reasons); guard trips and
    /// kernel-heavy ones count as evictions (Fig. 3 back-off).
    fn evict_guests(&mut self, s: &mut Step) {
        let obs = s.obs;
        for t in obs.tasks.iter().filter(|t| movable(t)) {
            let Place::Rt(cpu) = t.place else { continue };
            let reason = if !s.rt_cpus.contains_key(cpu) {
                Reason::NotAllowed
            } else if s.tripped.contains(&cpu) {
                Reason::LatencyGuard
            } else if !self.lending.allows(cpu, s.now) {
                Reason::LendingOff
            } else if self.closed(cpu, s.now) {
                Reason::NotAllowed
            } else if self.history.get(&t.id).is_some_and(|h| h.heavy) {
                Reason::KernelHeavy
            } else {
                continue;
            };
            let h = self.history.entry(t.id).or_default();
            h.seen_ns = s.now;
            if !matches!(reason, Reason::NotAllowed | Reason::LendingOff) {
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
        s.guests = s.rt_cpus.map_values(|_| Vec::new());
        for t in obs.tasks.iter().filter(|t| movable(t) && t.runnable) {
            match (t.place, s.moved.contains_key(&t.id)) {
                (Place::Nrt, _) | (Place::Rt(_), true) => s.n_nrt += 1,
                (Place::Rt(c), false) => s.guests.or_default(c).push(t),
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
                    && s.rt_cpus.contains_key(c)
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
        for (cpu, list) in guests.iter_mut() {
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
    /// only when CPU-bound, poorest first; only tasks predicted to stay in
    /// user mode (§2.1), never a task whose next kernel-heavy phase is near.
    /// Returns the candidates left waiting.
    fn fill_rt_cpus<'a>(&self, s: &mut Step<'a>) -> Vec<&'a TaskObs> {
        let (cfg, obs, now) = (&self.cfg, s.obs, s.now);
        let w = obs.window_ns;
        let gain = 1.0 + cfg.hysteresis;
        s.linux_turn = self.steps.is_multiple_of(u64::from(cfg.linux_every.max(1)));
        let nrt_share = share(s.cap_nrt, s.n_nrt).min(1.0);
        // Sized once for every task: no regrowth while it fills.
        let mut candidates: Vec<&TaskObs> = Vec::with_capacity(obs.tasks.len());
        let eligible = obs
            .tasks
            .iter()
            .filter(|t| movable(t) && t.runnable && t.place == Place::Nrt)
            .filter(|t| s.linux_turn || t.class != TaskClass::Linux)
            // Linux tasks only when CPU-bound (half their NRT share at least).
            .filter(|t| t.class != TaskClass::Linux || used_share(t, 0.5 * nrt_share, w))
            // Only tasks that will not enter the kernel there.
            .filter(|t| self.predicted_user_mode(t, w, obs.time_resolution_ns))
            .filter(|t| {
                self.history
                    .get(&t.id)
                    .is_none_or(|h| h.may_return(now, cfg))
            });
        candidates.extend(eligible);
        candidates.sort_by_key(|t| (class_rank(t.class), t.total_ns, t.id));
        s.counts = s.guests.map_values(Vec::len);
        let mut filled = 0;
        for t in candidates.iter() {
            if s.moves.len() >= cfg.max_moves || s.n_nrt <= 1 {
                break;
            }
            let best = s
                .counts
                .iter()
                .filter(|&(c, &n)| self.accepting(c, now) && n < self.lending.guest_cap(c))
                .map(|(c, &n)| (c, share(s.cap(c), n + 1)))
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
            *s.counts.get_mut(cpu).expect("known cpu") += 1;
            s.n_nrt -= 1;
            filled += 1;
        }
        // The ones left waiting, in the same vector.
        candidates.drain(..filled);
        candidates.retain(|t| t.class == TaskClass::Linux);
        candidates
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
        let cap = |cpu: u32| capacity(rt_cpus[cpu]);
        // Poorest first; taken from both ends (the slice shrinks).
        let mut pool = candidates;
        let open = |c: u32| self.accepting(c, now) && cap(c) >= cfg.min_lend_capacity;
        for (cpu, &n) in counts.iter() {
            if moves.len() >= cfg.max_moves {
                return;
            }
            if n == 0 && open(cpu) && (n_nrt as f64 - 1.0) >= cap_nrt {
                if let Some((t, rest)) = pool.split_last() {
                    pool = rest;
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
        for (cpu, list) in guests.iter() {
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
                    pool.split_first()
                        .filter(|(p, _)| p.total_ns.saturating_add(q) < g.total_ns)
                } else {
                    pool.split_last()
                        .filter(|(r, _)| r.total_ns > g.total_ns.saturating_add(q))
                };
                let Some((o, rest)) = other else { continue };
                pool = rest;
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
    rt_cpus: CpuMap<&'a CpuObs>,
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
    guests: CpuMap<Vec<&'a TaskObs>>,
    /// Guests per RT CPU, the step's fills included.
    counts: CpuMap<usize>,
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
            guests: CpuMap::default(),
            counts: CpuMap::default(),
            linux_turn: false,
        }
    }

    /// Spare capacity of an RT CPU (RT-load weighted, §2.3).
    fn cap(&self, cpu: u32) -> f64 {
        capacity(self.rt_cpus[cpu])
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

/// Share of a CPU capacity split among `n` runnable tasks.
fn share(cap: f64, n: usize) -> f64 {
    if n == 0 {
        f64::INFINITY
    } else {
        cap / n as f64
    }
}

const MIN_CAPACITY: f64 = 0.001;

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
