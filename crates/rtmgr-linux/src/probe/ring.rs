//! A preallocated ring of latency samples (wake-up time, lateness) that a
//! SCHED_FIFO probe thread fills without a lock or an allocation (ARTiS
//! §2.2's lock-free RT-FIFO idea, McKenney §2.1's probe): readers on other
//! threads copy it out and do the percentile work there.

use std::sync::atomic::{AtomicU64, Ordering};

/// Fixed-size ring of (at_ns, late_ns). Writers claim a slot with one
/// atomic add, so more than one thread may write (a lab probe with
/// `--parallel`); a reader racing a writer may see a slot's older sample,
/// which a window summary tolerates.
pub struct SampleRing {
    at_ns: Box<[AtomicU64]>,
    late_ns: Box<[AtomicU64]>,
    /// Samples written since the start (the next slot is `written % len`).
    written: AtomicU64,
}

impl SampleRing {
    /// A ring that keeps the last `capacity` samples (at least one).
    pub fn new(capacity: usize) -> SampleRing {
        let slots = || (0..capacity.max(1)).map(|_| AtomicU64::new(0)).collect();
        SampleRing {
            at_ns: slots(),
            late_ns: slots(),
            written: AtomicU64::new(0),
        }
    }

    pub fn capacity(&self) -> usize {
        self.late_ns.len()
    }

    /// Keep one sample: two stores and one atomic add, never blocks.
    pub fn push(&self, at_ns: u64, late_ns: u64) {
        let n = self.written.fetch_add(1, Ordering::AcqRel);
        let i = (n % self.capacity() as u64) as usize;
        self.at_ns[i].store(at_ns, Ordering::Relaxed);
        self.late_ns[i].store(late_ns, Ordering::Release);
    }

    /// Samples written since the start (a reader's cursor).
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Acquire)
    }

    /// Samples written from cursor `from` on (at most the ring's capacity,
    /// oldest first), each given to `each(at_ns, late_ns)`; returns the new cursor.
    pub fn read_since(&self, from: u64, mut each: impl FnMut(u64, u64)) -> u64 {
        let end = self.written();
        let cap = self.capacity() as u64;
        for n in from.max(end.saturating_sub(cap))..end {
            let i = (n % cap) as usize;
            let late = self.late_ns[i].load(Ordering::Acquire);
            each(self.at_ns[i].load(Ordering::Relaxed), late);
        }
        end
    }

    /// The latenesses the ring holds now, appended to `out`.
    pub fn latest(&self, out: &mut Vec<u64>) {
        let end = self.written();
        self.read_since(end.saturating_sub(self.capacity() as u64), |_, l| {
            out.push(l)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_keeps_the_last_samples_and_a_cursor_reads_each_once() {
        let r = SampleRing::new(3);
        let mut seen = Vec::new();
        let cur = r.read_since(0, |a, l| seen.push((a, l)));
        assert_eq!((cur, seen.len()), (0, 0));
        for i in 1..=5 {
            r.push(i * 10, i);
        }
        let mut latest = Vec::new();
        r.latest(&mut latest);
        assert_eq!(latest, vec![3, 4, 5], "the oldest two were overwritten");
        let cur = r.read_since(0, |a, l| seen.push((a, l)));
        assert_eq!(seen, vec![(30, 3), (40, 4), (50, 5)]);
        r.push(60, 6);
        seen.clear();
        assert_eq!(r.read_since(cur, |a, l| seen.push((a, l))), 6);
        assert_eq!(seen, vec![(60, 6)], "only what came after the cursor");
    }

    #[test]
    fn two_writers_lose_no_count() {
        let r = std::sync::Arc::new(SampleRing::new(64));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let r = r.clone();
                std::thread::spawn(move || (0..1000).for_each(|i| r.push(i, i)))
            })
            .collect();
        hs.into_iter().for_each(|h| h.join().unwrap());
        assert_eq!(r.written(), 2000);
    }
}
