//! The state of the model machine: tasks (an lbµ task instance each, ARTiS
//! §3.3), CPUs with their run queues and window counters, the pending
//! events; built from a configuration, and the tasks' fork placement.

use super::events::{Ev, EventQueue, Rng};
use crate::{SimConfig, SimError, TaskDef};
use rtmgr_core::class::TaskClass;
use rtmgr_core::stats::Hist;
use std::cmp::Reverse;
use std::collections::VecDeque;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Ready,
    Running,
    Sleeping,
    Done,
}

/// A task. The fields every tick of its CPU touches come first, in one or
/// two cache lines (`repr(C)` keeps the order): with hundreds of tasks the
/// task array does not stay in the first-level cache.
#[derive(Debug, Clone)]
#[repr(C)]
pub(crate) struct Task {
    pub(super) work_left: u64,
    pub(super) burst_left: u64,
    pub(super) np_next: u64,
    pub(crate) np_left: u64,
    pub(super) slice_left: i64,
    /// CPU time so far (`per_cpu` holds it per CPU up to the running stint).
    pub(super) total_ns: u64,
    // sampling window (rtmgr observer)
    pub(crate) w_user: u64,
    pub(crate) w_kernel: u64,
    pub(crate) cpu: u32,
    pub(crate) class: TaskClass,
    pub(crate) prio: u8,
    /// The policy may move it (not RT0, not pinned by its scenario mask).
    pub(crate) movable: bool,
    pub(crate) state: State,
    /// `total_ns` when the task last started running (the stint's start).
    pub(super) stint_from: u64,
    pub(super) wake_at: Option<u64>,
    /// A periodic task's next release (see `TaskDef::periodic`).
    pub(super) release: u64,
    pub(crate) w_vol: u64,
    pub(crate) w_invol: u64,
    // accounting
    pub(crate) kernel_ns: u64,
    pub(crate) switches: u64,
    pub(crate) migrations: u64,
    pub(crate) pingpongs: u64,
    pub(super) last_cross: Option<(u64, bool)>,
    pub(crate) done_at: Option<u64>,
    pub(crate) w_np: bool,
    pub(crate) per_cpu: Vec<u64>,
    pub(crate) def: TaskDef,
}

impl Task {
    /// CPU time so far, including what the running stint has not yet
    /// handed to `per_cpu`.
    pub(crate) fn total_ns(&self) -> u64 {
        self.total_ns
    }

    /// The task stops running on `cpu`: hand the stint's time to `per_cpu`.
    pub(super) fn end_stint(&mut self, cpu: u32) {
        self.per_cpu[cpu as usize] += self.total_ns - self.stint_from;
        self.stint_from = self.total_ns;
    }
}

/// A CPU; the fields a tick touches first (`repr(C)` keeps the order).
#[derive(Debug, Clone, Default)]
#[repr(C)]
pub(crate) struct Cpu {
    pub(crate) running: Option<u32>,
    pub(super) seg_start: u64,
    pub(super) seg_end: u64,
    pub(super) irq_until: u64,
    pub(crate) busy_ns: u64,
    /// Time taken by unmovable work (RT0, pinned tasks, interrupts) since a
    /// balancer last read it.
    pub(crate) w_fixed: u64,
    pub(crate) rt: bool,
    pub(super) tick_armed: bool,
    pub(super) need_resched: bool,
    pub(crate) fair: VecDeque<u32>,
    /// FIFO tasks, highest priority first, FIFO among equals.
    pub(crate) fifo: Vec<u32>,
    /// Recent RT0 wake-up latencies (the simulated latency probe).
    pub(crate) w_lat: Vec<u64>,
    /// Host model: when the last host stall of this vCPU ends, the recent
    /// RT0 latencies whose wait it overlapped, and the steal (window, total).
    pub(crate) stall_until: u64,
    pub(crate) w_stalled_lat: Vec<u64>,
    pub(crate) w_steal: u64,
    pub(crate) steal_ns: u64,
}

impl Cpu {
    pub(crate) fn nr_running(&self) -> usize {
        self.nr_queued() + usize::from(self.running.is_some())
    }

    /// Runnable tasks waiting for the CPU.
    pub(crate) fn nr_queued(&self) -> usize {
        self.fifo.len() + self.fair.len()
    }
}

/// RT0 wake-up latencies: the histogram, and a run of equal values not yet
/// in it (mostly the switch cost again and again: recorded at once).
#[derive(Debug, Clone, Default)]
pub(super) struct Latencies {
    hist: Hist,
    run: (u64, u64),
}

impl Latencies {
    pub(super) fn record(&mut self, l: u64) {
        if l == self.run.0 {
            self.run.1 += 1;
        } else {
            self.flush();
            self.run = (l, 1);
        }
    }

    /// Put the pending run into the histogram.
    pub(super) fn flush(&mut self) {
        let (l, n) = std::mem::take(&mut self.run);
        self.hist.record_n(l as i64, n);
    }

    /// The histogram (complete after `flush`).
    pub(super) fn hist(&self) -> &Hist {
        &self.hist
    }
}

/// The model machine: CPUs, tasks, the pending events and the accounting.
/// What a balancer decides reaches it through the methods that take a
/// balancer (a dispatch on an idle CPU may pull a task).
pub(crate) struct Machine {
    pub(crate) cfg: SimConfig,
    pub(crate) now: u64,
    pub(super) queue: EventQueue,
    pub(super) rng: Rng,
    /// The host model's own generator: its draws leave the interrupts' alone.
    pub(super) host_rng: Rng,
    /// Host stalls so far (the host model).
    pub(crate) host_stalls: u64,
    pub(crate) cpus: Vec<Cpu>,
    pub(crate) tasks: Vec<Task>,
    /// Which CPUs each task may use: a bit per CPU, `mask_words` words per
    /// task (one word for up to 64 CPUs: the whole matrix stays in cache).
    allowed: Vec<u64>,
    mask_words: usize,
    /// Per CPU: the non-RT0 tasks that may run there, in no order. None
    /// means no balancer may ever move a task to it (`Balancer::may_move`
    /// implies both), so an idle pull there has nothing to look for.
    movable_to: Vec<Vec<u32>>,
    pub(crate) nrt: Vec<u32>,
    /// The CPUs device interrupts go to (all, until a partition steers them).
    pub(crate) irq_cpus: Vec<u32>,
    /// RT0 wake-up latencies.
    pub(super) lat: Latencies,
    pub(super) left: usize,
    pub(super) all_rt0: bool,
    /// Scratch for the periodic balancing pass: each CPU's load.
    pub(crate) pass_loads: Vec<f64>,
}

impl Machine {
    pub(super) fn new(cfg: SimConfig, defs: Vec<TaskDef>) -> Result<Machine, SimError> {
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
        let mask_words = n.div_ceil(64);
        let mut allowed = vec![0u64; mask_words * defs.len()];
        let mut tasks = Vec::new();
        for (ti, d) in defs.into_iter().enumerate() {
            if d.class == TaskClass::Rt0 && (d.mask.len() != 1 || !d.mask.is_subset(&cfg.rt)) {
                return Err(SimError::Rt0Placement(d.name.clone()));
            }
            let whole = d.mask.len() == n;
            let movable = d.class != TaskClass::Rt0 && whole;
            for c in d.mask.iter() {
                allowed[ti * mask_words + c as usize / 64] |= 1 << (c % 64);
            }
            tasks.push(Task {
                class: d.class,
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
                release: 0,
                movable,
                cpu: 0,
                state: State::Sleeping,
                per_cpu: vec![0; n],
                total_ns: 0,
                stint_from: 0,
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
        let others = tasks.iter().filter(|t| t.class != TaskClass::Rt0).count();
        let all_rt0 = others == 0;
        let left = if all_rt0 { tasks.len() } else { others };
        let mut m = Machine {
            rng: Rng::seeded(cfg.seed),
            host_rng: Rng::seeded(cfg.seed ^ 0x4057_0000_0000_0001),
            host_stalls: 0,
            irq_cpus: (0..cfg.cpus).collect(),
            cfg,
            now: 0,
            queue: EventQueue::new(n),
            cpus,
            tasks,
            allowed,
            mask_words,
            movable_to: vec![Vec::new(); n],
            nrt,
            lat: Latencies::default(),
            left,
            all_rt0,
            pass_loads: Vec::with_capacity(n),
        };
        for ti in 0..m.tasks.len() as u32 {
            m.note_mask(ti, true);
        }
        Ok(m)
    }

    /// Add (`add`) or remove task `ti` from `movable_to` on the CPUs of its mask.
    fn note_mask(&mut self, ti: u32, add: bool) {
        if self.tasks[ti as usize].class == TaskClass::Rt0 {
            return;
        }
        for c in 0..self.cfg.cpus {
            if self.allows(ti, c) {
                let list = &mut self.movable_to[c as usize];
                if add {
                    list.push(ti);
                } else {
                    list.retain(|&t| t != ti);
                }
            }
        }
    }

    /// May any task ever be moved to `cpu`?
    pub(crate) fn pullable(&self, cpu: u32) -> bool {
        !self.movable_to[cpu as usize].is_empty()
    }

    /// The non-RT0 tasks whose mask allows `cpu`, in no order.
    pub(crate) fn movable_to(&self, cpu: u32) -> &[u32] {
        &self.movable_to[cpu as usize]
    }

    /// Is task `ti` waiting in the queues of `cpu`? A queued task is ready
    /// and its `cpu` is the CPU whose queue holds it (enqueue sets both).
    pub(crate) fn queued_on(&self, ti: u32, cpu: u32) -> bool {
        let t = &self.tasks[ti as usize];
        t.cpu == cpu && t.state == State::Ready
    }

    /// Fork placement: all tasks start at once, each on the allowed CPU with
    /// the fewest tasks so far (RT tasks first, like lbµ's RT0s).
    pub(super) fn start(&mut self, sample_period: Option<u64>) {
        let mut order: Vec<u32> = (0..self.tasks.len() as u32).collect();
        order.sort_by_key(|&i| Reverse(self.tasks[i as usize].prio));
        let mut count = vec![0usize; self.cpus.len()];
        for i in order {
            let cpu = (0..self.cfg.cpus)
                .filter(|&c| self.allows(i, c))
                .min_by_key(|&c| (count[c as usize], c))
                .expect("non-empty mask");
            count[cpu as usize] += 1;
            self.tasks[i as usize].cpu = cpu;
            self.queue.push(0, Ev::Wake { task: i });
        }
        if self.cfg.irq_per_s > 0.0 {
            let dt = self.irq_gap();
            self.queue.push(dt, Ev::Irq);
        }
        self.queue.push(self.cfg.balance_ns, Ev::Balance);
        if let Some(p) = sample_period {
            self.queue.push(p, Ev::Sample);
        }
        if let Some(h) = self.cfg.host {
            let dt = self.host_gap(h);
            self.queue.push(dt, Ev::Host);
        }
    }

    /// May task `ti` run on `cpu`?
    pub(crate) fn allows(&self, ti: u32, cpu: u32) -> bool {
        let w = self.allowed[ti as usize * self.mask_words + cpu as usize / 64];
        w >> (cpu % 64) & 1 == 1
    }

    /// Let task `ti` run exactly on the CPUs `allow` accepts.
    pub(crate) fn set_allowed(&mut self, ti: u32, allow: impl Fn(u32) -> bool) {
        self.note_mask(ti, false);
        let words = &mut self.allowed[ti as usize * self.mask_words..][..self.mask_words];
        words.fill(0);
        for c in (0..self.cfg.cpus).filter(|&c| allow(c)) {
            words[c as usize / 64] |= 1 << (c % 64);
        }
        self.note_mask(ti, true);
    }

    /// The CPUs task `ti` may run on.
    pub(crate) fn allowed_cpus(&self, ti: u32) -> Vec<u32> {
        (0..self.cfg.cpus).filter(|&c| self.allows(ti, c)).collect()
    }

    pub(super) fn irq_gap(&mut self) -> u64 {
        let u = self.rng.unit().max(1e-12);
        ((-u.ln()) * 1e9 / self.cfg.irq_per_s).max(1.0) as u64
    }
}

/// What the loop keeps of the events it processed: their number and hash.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Log {
    pub(crate) events: u64,
    pub(crate) hash: u64,
}
