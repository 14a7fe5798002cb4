//! The event loop: per-CPU run queues (FIFO priorities above a round-robin
//! fair class), ticks, device interrupts, non-preemptible sections, wake-ups,
//! migrations and the accounting behind the lbµ figures (ARTiS §3.3).

use crate::balancers::{self, Balancer};
use crate::{SimConfig, SimError, SimReport, TaskDef, TaskReport};
use rtmgr_core::class::TaskClass;
use rtmgr_core::stats::Hist;
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

/// splitmix64: small, fast, and the same on every platform.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Machine-wide events; per-CPU segment ends and ticks live in `Timers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Ev {
    /// The running segment of a CPU ends.
    Run {
        cpu: u32,
    },
    Wake {
        task: u32,
    },
    Tick {
        cpu: u32,
    },
    Irq,
    Balance,
    Sample,
}

/// Per-CPU deadlines (segment end, next tick) in a tournament tree: the
/// earliest CPU event in O(1), an update in O(log N), no stale entries.
#[derive(Debug, Clone)]
struct Timers {
    size: usize,
    run: Vec<u64>,
    tick: Vec<u64>,
    /// (time, cpu) per node; leaves at [size, 2·size).
    tree: Vec<(u64, u32)>,
}

impl Timers {
    fn new(n: usize) -> Self {
        let size = n.next_power_of_two();
        let mut tree = vec![(u64::MAX, u32::MAX); 2 * size];
        for (c, leaf) in tree[size..size + n].iter_mut().enumerate() {
            leaf.1 = c as u32;
        }
        for i in (1..size).rev() {
            tree[i] = tree[2 * i].min(tree[2 * i + 1]);
        }
        Timers {
            size,
            run: vec![u64::MAX; n],
            tick: vec![u64::MAX; n],
            tree,
        }
    }
    fn update(&mut self, cpu: u32) {
        let c = cpu as usize;
        let mut i = self.size + c;
        self.tree[i] = (self.run[c].min(self.tick[c]), cpu);
        while i > 1 {
            i /= 2;
            self.tree[i] = self.tree[2 * i].min(self.tree[2 * i + 1]);
        }
    }
    fn set_run(&mut self, cpu: u32, t: u64) {
        self.run[cpu as usize] = t;
        self.update(cpu);
    }
    fn set_tick(&mut self, cpu: u32, t: u64) {
        self.tick[cpu as usize] = t;
        self.update(cpu);
    }
    /// The earliest CPU event (a segment end before a tick at the same time).
    fn first(&self) -> Option<(u64, Ev)> {
        let (t, cpu) = self.tree[1];
        if t == u64::MAX {
            return None;
        }
        Some(if self.run[cpu as usize] == t {
            (t, Ev::Run { cpu })
        } else {
            (t, Ev::Tick { cpu })
        })
    }
}

impl Ev {
    fn code(self) -> u64 {
        match self {
            Ev::Run { cpu, .. } => u64::from(cpu) << 3,
            Ev::Wake { task } => (u64::from(task) << 3) | 1,
            Ev::Tick { cpu } => (u64::from(cpu) << 3) | 2,
            Ev::Irq => 3,
            Ev::Balance => 4,
            Ev::Sample => 5,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Ready,
    Running,
    Sleeping,
    Done,
}

#[derive(Debug, Clone)]
pub(crate) struct Task {
    pub(crate) def: TaskDef,
    pub(crate) prio: u8,
    pub(crate) mask: Vec<bool>,
    /// The policy may move it (not RT0, not pinned by its scenario mask).
    pub(crate) movable: bool,
    pub(crate) cpu: u32,
    pub(crate) state: State,
    work_left: u64,
    burst_left: u64,
    np_next: u64,
    pub(crate) np_left: u64,
    slice_left: i64,
    wake_at: Option<u64>,
    // accounting
    pub(crate) per_cpu: Vec<u64>,
    pub(crate) kernel_ns: u64,
    pub(crate) switches: u64,
    pub(crate) migrations: u64,
    pub(crate) pingpongs: u64,
    last_cross: Option<(u64, bool)>,
    pub(crate) done_at: Option<u64>,
    // sampling window (rtmgr observer)
    pub(crate) w_user: u64,
    pub(crate) w_kernel: u64,
    pub(crate) w_vol: u64,
    pub(crate) w_invol: u64,
    pub(crate) w_np: bool,
}

impl Task {
    pub(crate) fn total_ns(&self) -> u64 {
        self.per_cpu.iter().sum()
    }
}

#[derive(Debug, Clone, Default)]
pub(crate) struct Cpu {
    pub(crate) rt: bool,
    pub(crate) running: Option<u32>,
    seg_start: u64,
    seg_end: u64,
    irq_until: u64,
    tick_armed: bool,
    need_resched: bool,
    /// FIFO tasks, highest priority first, FIFO among equals.
    pub(crate) fifo: Vec<u32>,
    pub(crate) fair: VecDeque<u32>,
    pub(crate) busy_ns: u64,
    /// Time taken by unmovable work (RT0, pinned tasks, interrupts) since a
    /// balancer last read it.
    pub(crate) w_fixed: u64,
    /// Recent RT0 wake-up latencies (the simulated latency probe).
    pub(crate) w_lat: Vec<u64>,
}

impl Cpu {
    pub(crate) fn nr_running(&self) -> usize {
        self.fifo.len() + self.fair.len() + usize::from(self.running.is_some())
    }
}

/// The model machine: CPUs, tasks, the pending events and the accounting.
/// What a balancer decides reaches it through the methods that take a
/// `&dyn Balancer` (a dispatch on an idle CPU may pull a task).
pub(crate) struct Machine {
    pub(crate) cfg: SimConfig,
    pub(crate) now: u64,
    heap: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    timers: Timers,
    seq: u64,
    pub(crate) rng: Rng,
    pub(crate) cpus: Vec<Cpu>,
    pub(crate) tasks: Vec<Task>,
    pub(crate) nrt: Vec<u32>,
    /// The CPUs device interrupts go to (all, until a partition steers them).
    pub(crate) irq_cpus: Vec<u32>,
    lat: Hist,
    left: usize,
    all_rt0: bool,
}

pub struct Sim {
    m: Machine,
    balancer: Box<dyn Balancer>,
    events: u64,
    hash: u64,
    pub trace: Vec<(u64, u64)>,
}

impl Machine {
    fn new(cfg: SimConfig, defs: Vec<TaskDef>) -> Result<Machine, SimError> {
        if cfg.cpus == 0 || cfg.cpus > 4096 {
            return Err(SimError::Cpus(cfg.cpus));
        }
        if cfg.rt.iter().any(|c| c >= cfg.cpus) {
            return Err(SimError::RtOutside(cfg.rt.clone(), cfg.cpus));
        }
        if defs.is_empty() {
            return Err(SimError::NoTasks);
        }
        let n = cfg.cpus as usize;
        let nrt: Vec<u32> = (0..cfg.cpus).filter(|c| !cfg.rt.contains(*c)).collect();
        if nrt.is_empty() {
            return Err(SimError::NoNrt(cfg.rt.to_list()));
        }
        let mut tasks = Vec::new();
        for d in defs {
            if d.class == TaskClass::Rt0 && (d.mask.len() != 1 || !d.mask.is_subset(&cfg.rt)) {
                return Err(SimError::Rt0Placement(d.name.clone()));
            }
            let whole = d.mask.len() == n;
            let movable = d.class != TaskClass::Rt0 && whole;
            let mask: Vec<bool> = (0..cfg.cpus).map(|c| d.mask.contains(c)).collect();
            tasks.push(Task {
                prio: d.prio(),
                work_left: d.work_ns,
                burst_left: if d.burst_ns > 0 { d.burst_ns } else { u64::MAX },
                np_next: if d.np_every_ns > 0 {
                    d.np_every_ns
                } else {
                    u64::MAX
                },
                np_left: 0,
                slice_left: cfg.slice_ns as i64,
                wake_at: None,
                mask,
                movable,
                cpu: 0,
                state: State::Sleeping,
                per_cpu: vec![0; n],
                kernel_ns: 0,
                switches: 0,
                migrations: 0,
                pingpongs: 0,
                last_cross: None,
                done_at: None,
                w_user: 0,
                w_kernel: 0,
                w_vol: 0,
                w_invol: 0,
                w_np: false,
                def: d,
            });
        }
        let cpus = (0..cfg.cpus)
            .map(|c| Cpu {
                rt: cfg.rt.contains(c),
                ..Default::default()
            })
            .collect();
        // The run ends when every non-RT0 task is done (RT0 tasks are then
        // stopped), or when every task is done if there are only RT0 tasks.
        let others = tasks
            .iter()
            .filter(|t| t.def.class != TaskClass::Rt0)
            .count();
        let all_rt0 = others == 0;
        let left = if all_rt0 { tasks.len() } else { others };
        Ok(Machine {
            rng: Rng(cfg.seed ^ 0x0005_eed0_fa11),
            irq_cpus: (0..cfg.cpus).collect(),
            cfg,
            now: 0,
            heap: BinaryHeap::new(),
            timers: Timers::new(n),
            seq: 0,
            cpus,
            tasks,
            nrt,
            lat: Hist::new(),
            left,
            all_rt0,
        })
    }

    fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, ev)));
    }

    /// Fork placement: all tasks start at once, each on the allowed CPU with
    /// the fewest tasks so far (RT tasks first, like lbµ's RT0s).
    fn start(&mut self, sample_period: Option<u64>) {
        let mut order: Vec<u32> = (0..self.tasks.len() as u32).collect();
        order.sort_by_key(|&i| Reverse(self.tasks[i as usize].prio));
        let mut count = vec![0usize; self.cpus.len()];
        for i in order {
            let t = &self.tasks[i as usize];
            let cpu = (0..self.cfg.cpus)
                .filter(|&c| t.mask[c as usize])
                .min_by_key(|&c| (count[c as usize], c))
                .expect("non-empty mask");
            count[cpu as usize] += 1;
            self.tasks[i as usize].cpu = cpu;
            self.push(0, Ev::Wake { task: i });
        }
        if self.cfg.irq_per_s > 0.0 {
            let dt = self.irq_gap();
            self.push(dt, Ev::Irq);
        }
        self.push(self.cfg.balance_ns, Ev::Balance);
        if let Some(p) = sample_period {
            self.push(p, Ev::Sample);
        }
    }

    fn irq_gap(&mut self) -> u64 {
        let u = self.rng.unit().max(1e-12);
        ((-u.ln()) * 1e9 / self.cfg.irq_per_s).max(1.0) as u64
    }

    /// The next event, taken off the queue (a CPU event before a machine-wide
    /// one at the same time); None when nothing is pending.
    fn next_event(&mut self) -> Option<(u64, Ev)> {
        let heap_first = self.heap.peek().map(|Reverse((t, _, ev))| (*t, *ev));
        match (self.timers.first(), heap_first) {
            (Some(c), Some(h)) if c.0 <= h.0 => Some(c),
            (_, Some(h)) => {
                self.heap.pop();
                Some(h)
            }
            (Some(c), None) => Some(c),
            (None, None) => None,
        }
    }

    /// Charge the running task of `cpu` for the time since its segment began.
    fn account(&mut self, cpu: u32) {
        let now = self.now;
        let c = &mut self.cpus[cpu as usize];
        let Some(ti) = c.running else { return };
        let e = now.saturating_sub(c.seg_start);
        if e == 0 {
            return;
        }
        c.seg_start = now;
        c.busy_ns += e;
        let t = &mut self.tasks[ti as usize];
        if !t.movable {
            c.w_fixed += e;
        }
        t.per_cpu[cpu as usize] += e;
        if t.np_left > 0 {
            t.np_left -= e.min(t.np_left);
            t.kernel_ns += e;
            t.w_kernel += e;
        } else {
            t.work_left -= e.min(t.work_left);
            if t.burst_left != u64::MAX {
                t.burst_left -= e.min(t.burst_left);
            }
            if t.np_next != u64::MAX {
                t.np_next -= e.min(t.np_next);
            }
            t.w_user += e;
        }
        t.slice_left -= e as i64;
    }

    fn boundary(t: &Task) -> u64 {
        if t.np_left > 0 {
            t.np_left
        } else {
            t.work_left.min(t.burst_left).min(t.np_next)
        }
    }

    /// Start the best queued task on an idle CPU (or one the balancer pulls).
    pub(crate) fn dispatch(&mut self, cpu: u32, b: &dyn Balancer) {
        debug_assert!(self.cpus[cpu as usize].running.is_none());
        let c = &mut self.cpus[cpu as usize];
        let next = if !c.fifo.is_empty() {
            Some(c.fifo.remove(0))
        } else {
            c.fair.pop_front()
        };
        let next = match next {
            Some(n) => n,
            None => match balancers::idle_pull(self, b, cpu) {
                Some(n) => n,
                None => return,
            },
        };
        let now = self.now;
        let c = &mut self.cpus[cpu as usize];
        let start = now.max(c.irq_until);
        let t = &mut self.tasks[next as usize];
        t.state = State::Running;
        t.cpu = cpu;
        if let Some(w) = t.wake_at.take() {
            if t.def.class == TaskClass::Rt0 {
                let l = start - w + self.cfg.switch_ns;
                self.lat.record(l as i64);
                c.w_lat.push(l);
            }
        }
        if t.slice_left <= 0 {
            t.slice_left = self.cfg.slice_ns as i64;
        }
        c.running = Some(next);
        c.need_resched = false;
        c.seg_start = start;
        c.seg_end = start + Self::boundary(t);
        let end = c.seg_end;
        let arm = !c.tick_armed;
        c.tick_armed = true;
        self.timers.set_run(cpu, end);
        if arm {
            let tick = self.cfg.tick_ns;
            let phase = u64::from(cpu) * 7919 % tick;
            let next_tick = (now.saturating_sub(phase) / tick + 1) * tick + phase;
            self.timers.set_tick(cpu, next_tick);
        }
    }

    /// Take the running task off its CPU (still runnable or not).
    pub(crate) fn deschedule(&mut self, cpu: u32) -> Option<u32> {
        self.account(cpu);
        let c = &mut self.cpus[cpu as usize];
        let ti = c.running.take()?;
        self.timers.set_run(cpu, u64::MAX);
        let t = &mut self.tasks[ti as usize];
        t.switches += 1;
        t.state = State::Ready;
        Some(ti)
    }

    /// Put a runnable task on a CPU's queue; preempt if it is more urgent.
    pub(crate) fn enqueue(&mut self, cpu: u32, ti: u32, front: bool, b: &dyn Balancer) {
        let prio = self.tasks[ti as usize].prio;
        {
            let t = &mut self.tasks[ti as usize];
            t.cpu = cpu;
            t.state = State::Ready;
        }
        let c = &mut self.cpus[cpu as usize];
        if prio > 0 {
            let pos = if front {
                c.fifo
                    .iter()
                    .position(|&o| self.tasks[o as usize].prio <= prio)
            } else {
                c.fifo
                    .iter()
                    .position(|&o| self.tasks[o as usize].prio < prio)
            };
            c.fifo.insert(pos.unwrap_or(c.fifo.len()), ti);
        } else if front {
            c.fair.push_front(ti);
        } else {
            c.fair.push_back(ti);
        }
        self.check_preempt(cpu, b);
    }

    fn check_preempt(&mut self, cpu: u32, b: &dyn Balancer) {
        let c = &self.cpus[cpu as usize];
        let Some(r) = c.running else {
            self.dispatch(cpu, b);
            return;
        };
        let top = c.fifo.first().map_or(0, |&f| self.tasks[f as usize].prio);
        if top > self.tasks[r as usize].prio {
            if self.tasks[r as usize].np_left > 0 {
                self.cpus[cpu as usize].need_resched = true;
            } else {
                self.preempt(cpu, b);
            }
        }
    }

    fn preempt(&mut self, cpu: u32, b: &dyn Balancer) {
        if let Some(r) = self.deschedule(cpu) {
            self.tasks[r as usize].w_invol += 1;
            let prio = self.tasks[r as usize].prio;
            let c = &mut self.cpus[cpu as usize];
            if prio > 0 {
                let pos = c
                    .fifo
                    .iter()
                    .position(|&o| self.tasks[o as usize].prio < prio);
                c.fifo.insert(pos.unwrap_or(c.fifo.len()), r);
            } else {
                c.fair.push_front(r);
            }
        }
        self.dispatch(cpu, b);
    }

    fn on_run(&mut self, cpu: u32, b: &mut dyn Balancer) {
        let c = &self.cpus[cpu as usize];
        debug_assert!(c.running.is_some() && c.seg_end == self.now);
        let was_np = {
            let ti = c.running.unwrap();
            self.tasks[ti as usize].np_left > 0
        };
        self.account(cpu);
        let ti = self.cpus[cpu as usize].running.unwrap();
        let now = self.now;
        let t = &mut self.tasks[ti as usize];
        if t.np_left == 0 && t.work_left == 0 {
            // Finished.
            self.deschedule(cpu);
            let t = &mut self.tasks[ti as usize];
            t.state = State::Done;
            t.done_at = Some(now);
            t.w_vol += 1;
            if t.def.class != TaskClass::Rt0 || self.all_rt0 {
                self.left -= 1;
            }
            self.dispatch(cpu, b);
            return;
        }
        if !was_np && t.burst_left == 0 {
            t.burst_left = t.def.burst_ns;
            self.deschedule(cpu);
            let t = &mut self.tasks[ti as usize];
            t.state = State::Sleeping;
            t.w_vol += 1;
            let at = now + t.def.sleep_ns;
            self.push(at, Ev::Wake { task: ti });
            self.dispatch(cpu, b);
            return;
        }
        if !was_np && t.np_next == 0 {
            t.np_next = t.def.np_every_ns;
            t.np_left = t.def.np_len_ns;
            t.w_np = true;
            if b.on_nonpreemptible_entry(self, cpu, ti) {
                return;
            }
        }
        let c = &mut self.cpus[cpu as usize];
        if c.need_resched {
            self.preempt(cpu, b);
            return;
        }
        let t = &self.tasks[ti as usize];
        c.seg_end = now.max(c.seg_start) + Self::boundary(t);
        let end = c.seg_end;
        self.timers.set_run(cpu, end);
    }

    fn on_wake(&mut self, ti: u32, b: &dyn Balancer) {
        let now = self.now;
        let t = &mut self.tasks[ti as usize];
        if t.state != State::Sleeping {
            return;
        }
        t.wake_at = Some(now);
        let t = &self.tasks[ti as usize];
        let prev = t.cpu;
        let cpu = if t.mask[prev as usize]
            && (t.prio > 0 || self.cpus[prev as usize].running.is_none())
        {
            prev
        } else {
            // Wake balancing: an idle allowed CPU, else the previous one if
            // allowed, else the least loaded allowed one.
            let idle = (0..self.cfg.cpus)
                .find(|&c| t.mask[c as usize] && self.cpus[c as usize].nr_running() == 0);
            match idle {
                Some(c) => c,
                None if t.mask[prev as usize] => prev,
                None => {
                    let allowed: Vec<u32> =
                        (0..self.cfg.cpus).filter(|&c| t.mask[c as usize]).collect();
                    self.least_loaded(&allowed, ti)
                }
            }
        };
        self.note_migration(ti, cpu);
        self.enqueue(cpu, ti, false, b);
    }

    fn on_tick(&mut self, cpu: u32, b: &dyn Balancer) {
        let c = &mut self.cpus[cpu as usize];
        let Some(r) = c.running else {
            c.tick_armed = false;
            self.timers.set_tick(cpu, u64::MAX);
            return;
        };
        let now = self.now;
        self.interrupt(cpu, self.cfg.tick_cost_ns);
        let c = &self.cpus[cpu as usize];
        let t = &self.tasks[r as usize];
        if t.prio == 0 && t.np_left == 0 && t.slice_left <= 0 && !c.fair.is_empty() {
            self.tasks[r as usize].slice_left = self.cfg.slice_ns as i64;
            if let Some(r) = self.deschedule(cpu) {
                self.tasks[r as usize].w_invol += 1;
                self.cpus[cpu as usize].fair.push_back(r);
            }
            self.dispatch(cpu, b);
        }
        self.timers.set_tick(cpu, now + self.cfg.tick_ns);
    }

    /// A non-preemptible interrupt handler of `cost` runs on `cpu` now.
    fn interrupt(&mut self, cpu: u32, cost: u64) {
        let now = self.now;
        self.account(cpu);
        let c = &mut self.cpus[cpu as usize];
        c.irq_until = c.irq_until.max(now) + cost;
        c.w_fixed += cost;
        c.busy_ns += cost;
        if c.running.is_some() {
            c.seg_start = c.seg_start.max(now) + cost;
            c.seg_end += cost;
            let end = c.seg_end;
            self.timers.set_run(cpu, end);
        }
    }

    fn on_irq(&mut self) {
        let k = (self.rng.next() % self.irq_cpus.len() as u64) as usize;
        let cpu = self.irq_cpus[k];
        self.interrupt(cpu, self.cfg.irq_cost_ns);
        let dt = self.irq_gap();
        self.push(self.now + dt, Ev::Irq);
    }

    /// Least loaded CPU among `cpus` for task `ti` (ties: lowest number).
    pub(crate) fn least_loaded(&self, cpus: &[u32], ti: u32) -> u32 {
        let _ = ti;
        *cpus
            .iter()
            .min_by_key(|&&c| (self.cpus[c as usize].nr_running(), c))
            .expect("non-empty CPU list")
    }

    /// Count a migration of `ti` to `to` (and a ping-pong if it reverses the
    /// previous cross-role migration soon after), charging the migration cost.
    pub(crate) fn note_migration(&mut self, ti: u32, to: u32) {
        let now = self.now;
        let to_rt = self.cpus[to as usize].rt;
        let from = self.tasks[ti as usize].cpu;
        if from == to {
            return;
        }
        let from_rt = self.cpus[from as usize].rt;
        let window = self.cfg.pingpong_ns;
        let cost = self.cfg.migration_cost_ns;
        let t = &mut self.tasks[ti as usize];
        t.migrations += 1;
        if t.work_left > 0 {
            t.work_left += cost;
        }
        if from_rt != to_rt {
            if let Some((at, was_to_rt)) = t.last_cross {
                if was_to_rt != to_rt && now - at <= window {
                    t.pingpongs += 1;
                }
            }
            t.last_cross = Some((now, to_rt));
        }
    }

    /// Take `ti` off the queues of `cpu` (if it is queued there).
    pub(crate) fn unqueue(&mut self, cpu: u32, ti: u32) {
        let c = &mut self.cpus[cpu as usize];
        if let Some(p) = c.fair.iter().position(|&x| x == ti) {
            c.fair.remove(p);
        } else if let Some(p) = c.fifo.iter().position(|&x| x == ti) {
            c.fifo.remove(p);
        }
    }

    /// Move a task that is not running (queued or just descheduled) to `to`.
    pub(crate) fn migrate_queued(&mut self, ti: u32, to: u32, b: &dyn Balancer) {
        let from = self.tasks[ti as usize].cpu;
        self.unqueue(from, ti);
        self.note_migration(ti, to);
        self.enqueue(to, ti, false, b);
    }

    /// Move any task (running, queued or sleeping) so that it respects its mask.
    pub(crate) fn enforce_mask(&mut self, ti: u32, target: Option<u32>, b: &dyn Balancer) {
        let t = &self.tasks[ti as usize];
        if t.mask[t.cpu as usize] || t.state == State::Done {
            return;
        }
        let allowed: Vec<u32> = (0..self.cfg.cpus).filter(|&c| t.mask[c as usize]).collect();
        let to = target.unwrap_or_else(|| self.least_loaded(&allowed, ti));
        match t.state {
            State::Sleeping => {
                self.note_migration(ti, to);
                self.tasks[ti as usize].cpu = to;
            }
            State::Running => {
                let cpu = t.cpu;
                self.deschedule(cpu);
                self.migrate_queued(ti, to, b);
                self.dispatch(cpu, b);
            }
            State::Ready => self.migrate_queued(ti, to, b),
            State::Done => {}
        }
    }
}

impl Sim {
    pub fn new(cfg: SimConfig, defs: Vec<TaskDef>) -> Result<Sim, SimError> {
        let mut m = Machine::new(cfg, defs)?;
        let mut balancer = balancers::new(&m.cfg);
        balancer.attach(&mut m);
        m.start(balancer.sample_period());
        Ok(Sim {
            m,
            balancer,
            events: 0,
            hash: 0xcbf2_9ce4_8422_2325,
            trace: Vec::new(),
        })
    }

    /// Run to completion (or `max_ns`).
    pub fn run(&mut self) {
        let m = &mut self.m;
        let b = &mut *self.balancer;
        while m.left > 0 {
            let Some((t, ev)) = m.next_event() else { break };
            if t > m.cfg.max_ns {
                m.now = m.cfg.max_ns;
                break;
            }
            m.now = t;
            self.events += 1;
            let code = ev.code();
            self.hash = (self.hash ^ t ^ code.rotate_left(29)).wrapping_mul(0x0100_0000_01b3);
            if m.cfg.keep_trace {
                self.trace.push((t, code));
            }
            match ev {
                Ev::Run { cpu } => m.on_run(cpu, b),
                Ev::Wake { task } => m.on_wake(task, b),
                Ev::Tick { cpu } => m.on_tick(cpu, b),
                Ev::Irq => m.on_irq(),
                Ev::Balance => {
                    balancers::periodic_balance(m, b);
                    m.push(m.now + m.cfg.balance_ns, Ev::Balance);
                }
                Ev::Sample => {
                    b.sample(m);
                    let period = b.sample_period().expect("sampling balancer");
                    m.push(m.now + period, Ev::Sample);
                }
            }
        }
        // Close the books of running tasks.
        for c in 0..m.cpus.len() as u32 {
            m.account(c);
        }
    }

    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn report(&self) -> SimReport {
        let m = &self.m;
        let sim_ns = m.now.max(1);
        let tasks: Vec<TaskReport> = m
            .tasks
            .iter()
            .map(|t| {
                let total = t.total_ns();
                TaskReport {
                    name: t.def.name.clone(),
                    class: t.def.class,
                    completion_ns: t.done_at,
                    cpu_ns: total,
                    kernel_ns: t.kernel_ns,
                    cpu_percent: t
                        .per_cpu
                        .iter()
                        .map(|&x| 100.0 * x as f64 / total.max(1) as f64)
                        .collect(),
                    switches: t.switches,
                    migrations: t.migrations,
                    pingpongs: t.pingpongs,
                }
            })
            .collect();
        let (min, max, spread) = crate::completion(&tasks);
        SimReport {
            balancer: m.cfg.balancer,
            seed: m.cfg.seed,
            cpus: m.cfg.cpus,
            rt_cpus: m.cfg.rt.clone(),
            sim_ns,
            events: self.events,
            trace_hash: self.hash,
            unfinished: tasks
                .iter()
                .filter(|t| t.class != TaskClass::Rt0 && t.completion_ns.is_none())
                .count(),
            migrations: tasks.iter().map(|t| t.migrations).sum(),
            pingpongs: tasks.iter().map(|t| t.pingpongs).sum(),
            tasks,
            rt0_latency: m.lat.summary(0),
            cpu_busy_percent: m
                .cpus
                .iter()
                .map(|c| 100.0 * c.busy_ns as f64 / sim_ns as f64)
                .collect(),
            completion_min_ns: min,
            completion_max_ns: max,
            completion_spread: spread,
        }
    }
}
