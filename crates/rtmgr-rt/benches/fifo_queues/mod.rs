//! The single-producer/single-consumer queues the RT-FIFO benchmarks compare
//! (our ring and Valois list, rtrb, crossbeam's ArrayQueue) behind one trait,
//! and the two-thread throughput and hand-off-latency runners they share.
#![allow(dead_code)]

use rtmgr_rt::fifo::{self, ListConsumer, ListProducer};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[path = "../../tests/fifo_common/mod.rs"]
pub mod common;

/// Queue capacity used by every benchmark.
pub const CAPACITY: usize = 1024;

pub trait Queue {
    const NAME: &'static str;
    type P: Send + 'static;
    type C: Send + 'static;
    fn new(cap: usize) -> (Self::P, Self::C);
    fn push(p: &mut Self::P, v: u64) -> bool;
    fn pop(c: &mut Self::C) -> Option<u64>;
}

pub struct Ring;
impl Queue for Ring {
    const NAME: &'static str = "rtmgr ring";
    type P = fifo::Producer<u64>;
    type C = fifo::Consumer<u64>;
    fn new(cap: usize) -> (Self::P, Self::C) {
        fifo::channel(cap)
    }
    #[inline]
    fn push(p: &mut Self::P, v: u64) -> bool {
        p.push(v).is_ok()
    }
    #[inline]
    fn pop(c: &mut Self::C) -> Option<u64> {
        c.pop()
    }
}

pub struct List;
impl Queue for List {
    const NAME: &'static str = "rtmgr Valois list";
    type P = ListProducer<u64>;
    type C = ListConsumer<u64>;
    fn new(cap: usize) -> (Self::P, Self::C) {
        fifo::list_channel(cap)
    }
    #[inline]
    fn push(p: &mut Self::P, v: u64) -> bool {
        p.push(v).is_ok()
    }
    #[inline]
    fn pop(c: &mut Self::C) -> Option<u64> {
        c.pop()
    }
}

pub struct Rtrb;
impl Queue for Rtrb {
    const NAME: &'static str = "rtrb";
    type P = rtrb::Producer<u64>;
    type C = rtrb::Consumer<u64>;
    fn new(cap: usize) -> (Self::P, Self::C) {
        rtrb::RingBuffer::new(cap)
    }
    #[inline]
    fn push(p: &mut Self::P, v: u64) -> bool {
        p.push(v).is_ok()
    }
    #[inline]
    fn pop(c: &mut Self::C) -> Option<u64> {
        c.pop().ok()
    }
}

pub struct Crossbeam;
impl Queue for Crossbeam {
    const NAME: &'static str = "crossbeam ArrayQueue";
    type P = Arc<crossbeam_queue::ArrayQueue<u64>>;
    type C = Arc<crossbeam_queue::ArrayQueue<u64>>;
    fn new(cap: usize) -> (Self::P, Self::C) {
        let q = Arc::new(crossbeam_queue::ArrayQueue::new(cap));
        (q.clone(), q)
    }
    #[inline]
    fn push(p: &mut Self::P, v: u64) -> bool {
        p.push(v).is_ok()
    }
    #[inline]
    fn pop(c: &mut Self::C) -> Option<u64> {
        c.pop()
    }
}

/// CLOCK_MONOTONIC in nanoseconds (comparable across processes).
#[inline]
pub fn now_ns() -> u64 {
    rtmgr_sys::time::mono_ns()
}

/// Longest a benchmark thread may spin waiting for its peer. Beyond that
/// something moved our pinned threads (e.g. a cpuset change put both
/// SCHED_FIFO threads on one CPU): exit the whole process, which also ends
/// its real-time policies, instead of spinning on.
pub const STUCK_AFTER: Duration = Duration::from_secs(10);

/// A bounded busy-wait: `step()` spins once and exits the process when the
/// wait has lasted longer than [`STUCK_AFTER`].
pub struct Spin {
    start: Option<Instant>,
    n: u32,
}

impl Spin {
    pub fn new() -> Self {
        Spin { start: None, n: 0 }
    }
    #[inline]
    pub fn step(&mut self) {
        std::hint::spin_loop();
        self.n = self.n.wrapping_add(1);
        if self.n.is_multiple_of(4096) {
            let start = *self.start.get_or_insert_with(Instant::now);
            if start.elapsed() > STUCK_AFTER {
                eprintln!(
                    "fifo bench: a thread waited {STUCK_AFTER:?} for its peer (were the pinned threads moved?); giving up"
                );
                std::process::exit(3);
            }
        }
    }
}

impl Default for Spin {
    fn default() -> Self {
        Self::new()
    }
}

/// Spin until `now_ns() >= t`.
#[inline]
pub fn spin_until(t: u64) {
    while now_ns() < t {
        std::hint::spin_loop();
    }
}

/// Where and how the two threads run.
#[derive(Clone, Copy, Debug)]
pub struct Placement {
    pub producer_cpu: u32,
    pub consumer_cpu: u32,
    /// Run both at SCHED_FIFO (root only).
    pub rt: bool,
}

fn enter(cpu: u32, rt: bool) -> Option<common::FifoPolicy> {
    pin_checked(cpu);
    rt.then(|| common::FifoPolicy::enter(50).expect("SCHED_FIFO"))
}

/// Pin the calling thread to `cpu` and check that it took (a cpuset may
/// forbid it); two spinning SCHED_FIFO threads must never share a CPU.
pub fn pin_checked(cpu: u32) {
    let pinned = common::try_pin(cpu);
    let got: rtmgr_core::CpuSet = rtmgr_sys::sched::get_affinity(0)
        .expect("sched_getaffinity")
        .cpus()
        .collect();
    if !pinned || got.len() != 1 || !got.contains(cpu % common::online_cpus()) {
        // Exit rather than panic: the peer thread may already wait for us.
        eprintln!(
            "fifo bench: could not pin to CPU {cpu} (got {got}); is a cpuset partition applied?"
        );
        std::process::exit(3);
    }
}

/// Move `ops` values from a pinned producer thread to a pinned consumer
/// thread; returns the consumer's time from the start barrier to the last value.
pub fn throughput<Q: Queue>(ops: u64, at: Placement) -> Duration {
    let (mut p, mut c) = Q::new(CAPACITY);
    let barrier = Arc::new(Barrier::new(2));
    let b2 = barrier.clone();
    let prod = std::thread::spawn(move || {
        let _g = enter(at.producer_cpu, at.rt);
        b2.wait();
        for i in 0..ops {
            let mut spin = Spin::new();
            while !Q::push(&mut p, i) {
                spin.step();
            }
        }
    });
    let cons = std::thread::spawn(move || {
        let _g = enter(at.consumer_cpu, at.rt);
        barrier.wait();
        let t0 = Instant::now();
        for i in 0..ops {
            let mut spin = Spin::new();
            let v = loop {
                if let Some(v) = Q::pop(&mut c) {
                    break v;
                }
                spin.step();
            };
            assert_eq!(v, i);
        }
        t0.elapsed()
    });
    prod.join().unwrap();
    cons.join().unwrap()
}

/// Hand `samples` timestamps from the producer to a spinning consumer, one
/// every `gap_ns`; returns the consumer-side latencies (ns).
pub fn latency<Q: Queue>(samples: usize, gap_ns: u64, at: Placement) -> Vec<u64> {
    let (mut p, mut c) = Q::new(CAPACITY);
    let ready = Arc::new(AtomicBool::new(false));
    let r2 = ready.clone();
    let cons = std::thread::spawn(move || {
        let _g = enter(at.consumer_cpu, at.rt);
        let mut lat = Vec::with_capacity(samples);
        r2.store(true, Ordering::Release);
        let mut spin = Spin::new();
        while lat.len() < samples {
            if let Some(t) = Q::pop(&mut c) {
                lat.push(now_ns().saturating_sub(t));
                spin = Spin::new();
            } else {
                spin.step();
            }
        }
        lat
    });
    let prod = std::thread::spawn(move || {
        let _g = enter(at.producer_cpu, at.rt);
        let mut spin = Spin::new();
        while !ready.load(Ordering::Acquire) {
            spin.step();
        }
        let mut next = now_ns();
        for _ in 0..samples {
            next += gap_ns;
            spin_until(next);
            let mut spin = Spin::new();
            while !Q::push(&mut p, now_ns()) {
                spin.step();
            }
        }
    });
    prod.join().unwrap();
    cons.join().unwrap()
}
