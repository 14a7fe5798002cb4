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
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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
    common::pin(cpu);
    rt.then(|| common::FifoPolicy::enter(50).expect("SCHED_FIFO"))
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
            while !Q::push(&mut p, i) {
                std::hint::spin_loop();
            }
        }
    });
    let cons = std::thread::spawn(move || {
        let _g = enter(at.consumer_cpu, at.rt);
        barrier.wait();
        let t0 = Instant::now();
        for i in 0..ops {
            let v = loop {
                if let Some(v) = Q::pop(&mut c) {
                    break v;
                }
                std::hint::spin_loop();
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
        while lat.len() < samples {
            if let Some(t) = Q::pop(&mut c) {
                lat.push(now_ns().saturating_sub(t));
            } else {
                std::hint::spin_loop();
            }
        }
        lat
    });
    let prod = std::thread::spawn(move || {
        let _g = enter(at.producer_cpu, at.rt);
        while !ready.load(Ordering::Acquire) {
            std::hint::spin_loop();
        }
        let mut next = now_ns();
        for _ in 0..samples {
            next += gap_ns;
            spin_until(next);
            while !Q::push(&mut p, now_ns()) {
                std::hint::spin_loop();
            }
        }
    });
    prod.join().unwrap();
    cons.join().unwrap()
}
