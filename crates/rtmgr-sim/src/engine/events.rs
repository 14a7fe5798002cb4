//! The pending events of the model machine: per-CPU timers (segment end,
//! tick) in a tournament tree and machine-wide events (wake-ups, device
//! interrupts, balancing, sampling) in a heap, ordered by (time, arrival).

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
    /// A host preemption attempt (the host model, when on).
    Host,
}

/// Per-CPU deadlines: the end of the running segment and the next tick.
///
/// Ticks come from a queue in (time, cpu) order: a CPU's tick is taken off
/// when it fires, and the next one, a tick period later, nearly always goes
/// to the back. Segment ends are in a tournament tree over lower bounds: a
/// deadline that moves earlier is replayed up the tree at once, one that
/// moves later (every interrupt pushes the running segment's end back) only
/// when its stale bound reaches the top. A tick, by far the most frequent
/// event, thus costs no walk of the tree.
#[derive(Debug, Clone)]
struct Timers {
    /// Leaves: the number of CPUs rounded up to a power of two.
    size: usize,
    /// When each CPU's running segment ends (u64::MAX: none).
    run: Vec<u64>,
    /// Per node the earliest lower bound of its subtree and its CPU (ties:
    /// the lower CPU); node 1 is the root, node size + c is CPU c's leaf,
    /// whose key is at most `run[c]`.
    tree: Vec<Node>,
    /// Pending ticks, at most one per CPU, in (time, cpu) order.
    ticks: TickRing,
}

#[derive(Debug, Clone, Copy)]
struct Node {
    key: u64,
    cpu: u32,
}

/// The pending ticks in (time, cpu) order: a ring of at most one tick per
/// CPU (a power-of-two capacity, so that wrapping is a mask). Ticks leave
/// at the front; a new one nearly always goes to the back. Free slots hold
/// `NO_TICK`, so that the front of an empty ring is `NO_TICK`.
#[derive(Debug, Clone)]
struct TickRing {
    buf: Vec<(u64, u32)>,
    /// `buf.len() - 1`.
    mask: usize,
    head: usize,
    len: usize,
}

const NO_TICK: (u64, u32) = (u64::MAX, u32::MAX);

impl TickRing {
    fn new(cpus: usize) -> Self {
        let cap = cpus.next_power_of_two();
        TickRing {
            buf: vec![NO_TICK; cap],
            mask: cap - 1,
            head: 0,
            len: 0,
        }
    }

    #[inline]
    fn slot(&self, i: usize) -> usize {
        (self.head + i) & self.mask
    }

    /// The earliest tick, `NO_TICK` if none.
    #[inline]
    fn front(&self) -> (u64, u32) {
        self.buf[self.head]
    }

    #[inline]
    fn pop_front(&mut self) {
        debug_assert!(self.len > 0);
        self.buf[self.head] = NO_TICK;
        self.head = self.slot(1);
        self.len -= 1;
    }

    /// Insert in (time, cpu) order, searching from the back.
    #[inline]
    fn insert(&mut self, k: (u64, u32)) {
        debug_assert!(self.len < self.buf.len(), "more ticks than CPUs");
        let mut i = self.len;
        while i > 0 && self.buf[self.slot(i - 1)] > k {
            let (to, from) = (self.slot(i), self.slot(i - 1));
            self.buf[to] = self.buf[from];
            i -= 1;
        }
        let at = self.slot(i);
        self.buf[at] = k;
        self.len += 1;
    }

    #[cfg(debug_assertions)]
    fn has(&self, cpu: u32) -> bool {
        (0..self.len).any(|i| self.buf[self.slot(i)].1 == cpu)
    }
}

impl Timers {
    fn new(n: usize) -> Self {
        let size = n.next_power_of_two();
        let none = |cpu: usize| Node {
            key: u64::MAX,
            cpu: cpu as u32,
        };
        let mut tree: Vec<Node> = (0..2 * size)
            .map(|i| none(i.saturating_sub(size)))
            .collect();
        // Every key is u64::MAX: the leftmost leaf wins everywhere.
        for i in (1..size).rev() {
            tree[i] = tree[2 * i];
        }
        Timers {
            size,
            run: vec![u64::MAX; n],
            tree,
            ticks: TickRing::new(n),
        }
    }

    #[inline]
    fn set_run(&mut self, cpu: u32, t: u64) {
        self.run[cpu as usize] = t;
        if t < self.tree[self.size + cpu as usize].key {
            self.lower(cpu);
        }
    }

    /// CPU `c`'s deadline moved below its leaf's bound: every node on the
    /// way up is the earliest (time, cpu) of its two children, so the new
    /// one replaces each node it beats, and the walk stops at the first it
    /// does not beat (what is above it cannot change). The same tree as a
    /// full `replay`, in fewer steps.
    fn lower(&mut self, c: u32) {
        let n = Node {
            key: self.run[c as usize],
            cpu: c,
        };
        let mut i = self.size + c as usize;
        self.tree[i] = n;
        while i > 1 {
            i /= 2;
            let above = self.tree[i];
            if (above.key, above.cpu) < (n.key, n.cpu) {
                break;
            }
            self.tree[i] = n;
        }
    }

    /// Arm the next tick of a CPU that has none pending (u64::MAX: none).
    #[inline]
    fn arm_tick(&mut self, cpu: u32, t: u64) {
        #[cfg(debug_assertions)]
        assert!(!self.ticks.has(cpu), "cpu {cpu} already has a tick");
        if t != u64::MAX {
            self.ticks.insert((t, cpu));
        }
    }

    /// Set CPU `c`'s leaf to its segment end and replay it up the tree.
    fn replay(&mut self, c: u32) {
        use std::hint::select_unpredictable as select;
        let tree = &mut self.tree[..];
        let mut i = self.size + c as usize;
        let mut n = Node {
            key: self.run[c as usize],
            cpu: c,
        };
        tree[i] = n;
        while i > 1 {
            let sib = tree[i ^ 1];
            // A left sibling (lower CPUs) also wins a tie. Which side wins
            // is data: selects, not branches that would mispredict.
            let left = i & 1 == 1;
            let take = (sib.key < n.key) | (left & (sib.key == n.key));
            n.key = select(take, sib.key, n.key);
            n.cpu = select(take, sib.cpu, n.cpu);
            i /= 2;
            tree[i] = n;
        }
    }

    /// The earliest CPU event if it comes at `limit` or before (a segment
    /// end before a tick of the same CPU at the same time); a tick is taken
    /// off the queue.
    #[inline(always)]
    fn take_until(&mut self, limit: u64) -> Option<(u64, Ev)> {
        loop {
            let Node { key: rt, cpu: rc } = self.tree[1];
            let tick = self.ticks.front();
            if (rt, rc) > tick {
                // A bound later than the tick: the segment end is too.
                if tick.0 > limit || tick.0 == u64::MAX {
                    return None;
                }
                self.ticks.pop_front();
                return Some((tick.0, Ev::Tick { cpu: tick.1 }));
            }
            if rt > limit || rt == u64::MAX {
                return None;
            }
            if self.run[rc as usize] == rt {
                return Some((rt, Ev::Run { cpu: rc }));
            }
            // A stale bound at the top: replay the real deadline, look again.
            self.replay(rc);
        }
    }
}

impl Ev {
    #[inline]
    pub(super) fn code(self) -> u64 {
        match self {
            Ev::Run { cpu, .. } => u64::from(cpu) << 3,
            Ev::Wake { task } => (u64::from(task) << 3) | 1,
            Ev::Tick { cpu } => (u64::from(cpu) << 3) | 2,
            Ev::Irq => 3,
            Ev::Balance => 4,
            Ev::Sample => 5,
            Ev::Host => 6,
        }
    }
}

/// Every pending event; the earliest comes first, a CPU event before a
/// machine-wide one at the same time, machine-wide ones in arrival order.
/// The device interrupt, balancing pass, sample and host preemption attempt
/// each have at most one pending (each schedules its successor): a slot
/// each, not the heap. The
/// earliest machine-wide event is kept up to date as they come and go.
#[derive(Debug, Clone)]
pub(super) struct EventQueue {
    timers: Timers,
    /// Pending wake-ups by (time, arrival).
    wakes: BinaryHeap<Wake>,
    /// The pending Irq, Balance, Sample and Host as `time << 64 | arrival`
    /// (u128::MAX: none), ordered like the heap.
    slots: [u128; 4],
    /// The earliest machine-wide event (`time << 64 | arrival`, u128::MAX:
    /// none) and where it is: a slot, or the heap (None).
    wide: u128,
    wide_slot: Option<usize>,
    seq: u64,
}

/// A pending wake-up: its `time << 64 | arrival` key orders it (the heap's
/// greatest is the earliest) and is unique.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Wake {
    key: u128,
    task: u32,
}

impl Ord for Wake {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.key.cmp(&self.key)
    }
}

impl PartialOrd for Wake {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Slot of a machine-wide periodic event.
fn slot(ev: Ev) -> usize {
    match ev {
        Ev::Irq => 0,
        Ev::Balance => 1,
        Ev::Sample => 2,
        Ev::Host => 3,
        Ev::Run { .. } | Ev::Wake { .. } | Ev::Tick { .. } => unreachable!("not a slot event"),
    }
}

const SLOT_EVENTS: [Ev; 4] = [Ev::Irq, Ev::Balance, Ev::Sample, Ev::Host];

fn key(t: u64, seq: u64) -> u128 {
    (u128::from(t) << 64) | u128::from(seq)
}

impl EventQueue {
    pub(super) fn new(cpus: usize) -> Self {
        EventQueue {
            timers: Timers::new(cpus),
            wakes: BinaryHeap::new(),
            slots: [u128::MAX; 4],
            wide: u128::MAX,
            wide_slot: None,
            seq: 0,
        }
    }

    /// A machine-wide event at `t`.
    pub(super) fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        let k = key(t, self.seq);
        let at = if let Ev::Wake { task } = ev {
            self.wakes.push(Wake { key: k, task });
            None
        } else {
            let s = slot(ev);
            debug_assert_eq!(self.slots[s], u128::MAX, "{ev:?} already pending");
            self.slots[s] = k;
            Some(s)
        };
        if k < self.wide {
            self.wide = k;
            self.wide_slot = at;
        }
    }

    /// Find the earliest machine-wide event again (after one was taken).
    fn find_wide(&mut self) {
        self.wide = self.wakes.peek().map_or(u128::MAX, |w| w.key);
        self.wide_slot = None;
        for (k, &s) in self.slots.iter().enumerate() {
            if s < self.wide {
                self.wide = s;
                self.wide_slot = Some(k);
            }
        }
    }

    /// When the running segment of `cpu` ends (u64::MAX: none).
    #[inline]
    pub(super) fn set_run(&mut self, cpu: u32, t: u64) {
        self.timers.set_run(cpu, t);
    }

    /// When the next tick of `cpu` comes (u64::MAX: none). A tick leaves the
    /// queue when it fires: only a CPU without a pending tick gets one.
    #[inline]
    pub(super) fn arm_tick(&mut self, cpu: u32, t: u64) {
        self.timers.arm_tick(cpu, t);
    }

    /// The next event, taken off the queue; None when nothing is pending.
    #[inline(always)]
    pub(super) fn next(&mut self) -> Option<(u64, Ev)> {
        let wide_t = (self.wide >> 64) as u64;
        if let Some(c) = self.timers.take_until(wide_t) {
            return Some(c);
        }
        if self.wide == u128::MAX {
            return None;
        }
        let ev = match self.wide_slot {
            Some(k) => {
                self.slots[k] = u128::MAX;
                SLOT_EVENTS[k]
            }
            None => {
                let Wake { task, .. } = self.wakes.pop().expect("earliest wake-up");
                Ev::Wake { task }
            }
        };
        self.find_wide();
        Some((wide_t, ev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The earliest (time, cpu) by brute force, as the timers must find it.
    fn naive_first(run: &[u64], tick: &[u64]) -> Option<(u64, Ev)> {
        let (t, cpu) = (0..run.len())
            .map(|c| (run[c].min(tick[c]), c as u32))
            .min()?;
        if t == u64::MAX {
            None
        } else if run[cpu as usize] == t {
            Some((t, Ev::Run { cpu }))
        } else {
            Some((t, Ev::Tick { cpu }))
        }
    }

    proptest! {
        #[test]
        fn timers_find_the_earliest_deadline(
            n in 1usize..70,
            ops in proptest::collection::vec((0u8..3, 0usize..70, 0u64..40, 0u8..4), 1..300),
        ) {
            let mut t = Timers::new(n);
            let (mut run, mut tick) = (vec![u64::MAX; n], vec![u64::MAX; n]);
            for (op, c, at, k) in ops {
                let c = c % n;
                // Few distinct times (ties), and some deadlines cleared.
                let at = if k == 0 { u64::MAX } else { at };
                match op {
                    0 => {
                        t.set_run(c as u32, at);
                        run[c] = at;
                    }
                    1 if tick[c] == u64::MAX => {
                        t.arm_tick(c as u32, at);
                        tick[c] = at;
                    }
                    _ => {
                        // Take the first event if it comes by a limit.
                        let limit = if k == 3 { u64::MAX } else { at };
                        let want = naive_first(&run, &tick).filter(|e| e.0 <= limit);
                        prop_assert_eq!(t.take_until(limit), want);
                        if let Some((_, Ev::Tick { cpu })) = want {
                            tick[cpu as usize] = u64::MAX;
                        }
                    }
                }
            }
        }
    }
}
