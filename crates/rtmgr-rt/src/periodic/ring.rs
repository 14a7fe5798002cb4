//! Per-period statistics ring (budget-based RTAI §4.2: received budget and
//! budget rate per period): a fixed array of slots written by the task's own
//! thread (also from its signal handler) and read by any other thread without
//! locks. Each slot is a small seqlock; a reader that is lapped by the writer
//! notices it and reports the records it lost. No allocation after creation.

use rtmgr_core::budget::PeriodRecord;
use std::sync::atomic::{fence, AtomicU64, Ordering};

const NONE: u64 = u64::MAX;
const FIELDS: usize = 8;

struct Slot {
    seq: AtomicU64,
    f: [AtomicU64; FIELDS],
}

/// The ring. Only one thread may call [`push`](Self::push) (the task's thread).
pub struct StatsRing {
    head: AtomicU64,
    mask: u64,
    slots: Box<[Slot]>,
}

fn encode(r: &PeriodRecord) -> [u64; FIELDS] {
    [
        r.index,
        r.release_ns,
        r.budget_ns,
        r.received_ns,
        r.latency_ns.unwrap_or(NONE),
        r.exhausted as u64,
        r.ignored_waits as u64,
        r.missed as u64,
    ]
}

fn decode(f: &[u64; FIELDS]) -> PeriodRecord {
    PeriodRecord {
        index: f[0],
        release_ns: f[1],
        budget_ns: f[2],
        received_ns: f[3],
        latency_ns: (f[4] != NONE).then_some(f[4]),
        exhausted: f[5] != 0,
        ignored_waits: f[6] as u32,
        missed: f[7] as u32,
    }
}

impl StatsRing {
    /// A ring keeping the last `capacity` records (rounded up to a power of 2).
    pub fn new(capacity: usize) -> Self {
        let cap = capacity.max(2).next_power_of_two();
        let slots = (0..cap)
            .map(|_| Slot {
                seq: AtomicU64::new(0),
                f: Default::default(),
            })
            .collect();
        Self {
            head: AtomicU64::new(0),
            mask: cap as u64 - 1,
            slots,
        }
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    /// Records written so far (including those overwritten).
    pub fn written(&self) -> u64 {
        self.head.load(Ordering::Acquire)
    }

    /// Append (single writer; wait-free, async-signal-safe).
    pub fn push(&self, r: &PeriodRecord) {
        let n = self.head.load(Ordering::Relaxed);
        let slot = &self.slots[(n & self.mask) as usize];
        slot.seq.store(2 * n + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        for (a, v) in slot.f.iter().zip(encode(r)) {
            a.store(v, Ordering::Relaxed);
        }
        slot.seq.store(2 * n + 2, Ordering::Release);
        self.head.store(n + 1, Ordering::Release);
    }

    /// Record number `n`, if it is still in the ring.
    pub fn get(&self, n: u64) -> Option<PeriodRecord> {
        let slot = &self.slots[(n & self.mask) as usize];
        let s1 = slot.seq.load(Ordering::Acquire);
        if s1 != 2 * n + 2 {
            return None;
        }
        let mut f = [0u64; FIELDS];
        for (v, a) in f.iter_mut().zip(&slot.f) {
            *v = a.load(Ordering::Relaxed);
        }
        fence(Ordering::Acquire);
        (slot.seq.load(Ordering::Relaxed) == s1).then(|| decode(&f))
    }

    /// Read every record from number `from` on: (records, next `from`, lost).
    /// `lost` counts records overwritten before they could be read.
    pub fn read_from(&self, from: u64, out: &mut Vec<PeriodRecord>) -> (u64, u64) {
        let head = self.written();
        let oldest = head.saturating_sub(self.slots.len() as u64);
        let mut lost = oldest.saturating_sub(from);
        for n in from.max(oldest)..head {
            match self.get(n) {
                Some(r) => out.push(r),
                None => lost += 1,
            }
        }
        (head, lost)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn rec(i: u64) -> PeriodRecord {
        PeriodRecord {
            index: i,
            release_ns: i * 10,
            budget_ns: 100,
            received_ns: i,
            latency_ns: i.is_multiple_of(2).then_some(i),
            exhausted: i.is_multiple_of(3),
            ignored_waits: (i % 5) as u32,
            missed: 0,
        }
    }

    #[test]
    fn round_trip_and_lapping() {
        let r = StatsRing::new(5);
        assert_eq!(r.capacity(), 8);
        for i in 0..20 {
            r.push(&rec(i));
        }
        let mut out = vec![];
        let (next, lost) = r.read_from(0, &mut out);
        assert_eq!(next, 20);
        assert_eq!(lost, 12);
        assert_eq!(out, (12..20).map(rec).collect::<Vec<_>>());
        out.clear();
        assert_eq!(r.read_from(20, &mut out), (20, 0));
        assert!(out.is_empty());
    }

    #[test]
    fn concurrent_reader_sees_consistent_records() {
        let r = Arc::new(StatsRing::new(16));
        let w = r.clone();
        let t = std::thread::spawn(move || {
            for i in 0..200_000 {
                w.push(&rec(i));
            }
        });
        let mut from = 0;
        let mut seen = 0u64;
        let mut out = vec![];
        while from < 200_000 {
            out.clear();
            let (next, lost) = r.read_from(from, &mut out);
            for x in &out {
                assert_eq!(*x, rec(x.index), "torn record");
            }
            seen += out.len() as u64 + lost;
            from = next;
        }
        t.join().unwrap();
        assert_eq!(seen, 200_000);
    }
}
