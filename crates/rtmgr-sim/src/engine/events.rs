//! The pending events of the model machine: per-CPU timers (segment end,
//! tick) in a tournament tree and machine-wide events (wake-ups, device
//! interrupts, balancing, sampling) in a heap, ordered by (time, arrival).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// splitmix64: small, fast, and the same on every platform.
#[derive(Debug, Clone)]
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn seeded(seed: u64) -> Self {
        Rng(seed ^ 0x0005_eed0_fa11)
    }
    pub(super) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub(super) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Machine-wide events; per-CPU segment ends and ticks live in `Timers`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Ev {
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
    pub(super) fn code(self) -> u64 {
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

/// Every pending event; the earliest comes first, a CPU event before a
/// machine-wide one at the same time, machine-wide ones in arrival order.
#[derive(Debug, Clone)]
pub(super) struct EventQueue {
    heap: BinaryHeap<Reverse<(u64, u64, Ev)>>,
    timers: Timers,
    seq: u64,
}

impl EventQueue {
    pub(super) fn new(cpus: usize) -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            timers: Timers::new(cpus),
            seq: 0,
        }
    }

    /// A machine-wide event at `t`.
    pub(super) fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.heap.push(Reverse((t, self.seq, ev)));
    }

    /// When the running segment of `cpu` ends (u64::MAX: none).
    pub(super) fn set_run(&mut self, cpu: u32, t: u64) {
        self.timers.set_run(cpu, t);
    }

    /// When the next tick of `cpu` comes (u64::MAX: none).
    pub(super) fn set_tick(&mut self, cpu: u32, t: u64) {
        self.timers.set_tick(cpu, t);
    }

    /// The next event, taken off the queue; None when nothing is pending.
    pub(super) fn next(&mut self) -> Option<(u64, Ev)> {
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
}
