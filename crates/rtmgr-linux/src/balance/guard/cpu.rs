//! One RT CPU's latency guard state (ARTiS §2.2: RT0's latency first), fed
//! from its SCHED_FIFO probe thread without a lock or an allocation: sample
//! rings, counters, the guests it would evict and the limit over which it
//! does, all atomics written by the balancer loop. `tests/guard_no_alloc.rs`
//! checks the sample path.

use crate::probe::SampleRing;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering::*};

/// Samples kept per CPU for the "recent" p99 and for the guest-free baseline.
pub const WINDOW_SAMPLES: usize = 200;
/// Guests per RT CPU the guard can evict at once; more are left to the
/// policy's next step.
pub const GUESTS_MAX: usize = 64;
/// "No limit" for `limit_ns` and `bound_ns`.
pub const NONE_NS: u64 = u64::MAX;

/// The guests of one RT CPU: written by the balancer loop only (a sequence
/// lock: odd `version` while it writes), read by the probe thread.
pub struct GuestList {
    version: AtomicU32,
    len: AtomicU32,
    tids: [AtomicU32; GUESTS_MAX],
    /// The version whose guests the probe thread already sent away.
    evicted: AtomicU32,
}

impl GuestList {
    fn new() -> GuestList {
        GuestList {
            version: AtomicU32::new(0),
            len: AtomicU32::new(0),
            tids: std::array::from_fn(|_| AtomicU32::new(0)),
            evicted: AtomicU32::new(u32::MAX),
        }
    }

    /// The loop's write (one writer at a time).
    pub fn set(&self, tids: &[u32]) {
        let v = self.version.load(Relaxed);
        self.version.store(v.wrapping_add(1), Relaxed);
        fence(Release);
        let n = tids.len().min(GUESTS_MAX);
        for (slot, &t) in self.tids.iter().zip(&tids[..n]) {
            slot.store(t, Relaxed);
        }
        self.len.store(n as u32, Relaxed);
        self.version.store(v.wrapping_add(2), Release);
    }

    /// (version, how many guests), None while the loop writes.
    fn count(&self) -> Option<(u32, usize)> {
        let v = self.version.load(Acquire);
        if v % 2 == 1 {
            return None;
        }
        let n = match self.evicted.load(Acquire) == v {
            true => 0,
            false => self.len.load(Relaxed) as usize,
        };
        fence(Acquire);
        (self.version.load(Relaxed) == v).then_some((v, n))
    }

    /// The guests of `version` into `buf`; None when the loop wrote since.
    pub fn copy(&self, version: u32, buf: &mut [u32; GUESTS_MAX]) -> Option<usize> {
        let n = (self.len.load(Relaxed) as usize).min(GUESTS_MAX);
        for (b, t) in buf.iter_mut().zip(&self.tids[..n]) {
            *b = t.load(Relaxed);
        }
        fence(Acquire);
        (self.version.load(Relaxed) == version).then_some(n)
    }

    /// The guests of `version` were sent away: none until the next write.
    pub fn mark_evicted(&self, version: u32) {
        self.evicted.store(version, Release);
    }
}

/// One RT CPU's guard.
pub struct CpuGuard {
    pub cpu: u32,
    /// The last `WINDOW_SAMPLES` samples (the "recent" p99).
    pub recent: SampleRing,
    /// Samples taken while the CPU had no guest: what its own RT tasks cost.
    pub clean: SampleRing,
    /// Since the loop last took them: samples, and those over `bound_ns`.
    pub samples: AtomicU64,
    pub late: AtomicU64,
    /// Samples over this count as late (NONE_NS: no bound).
    pub bound_ns: AtomicU64,
    /// A sample over this with guests evicts them (NONE_NS: not armed).
    pub limit_ns: AtomicU64,
    pub guests: GuestList,
    /// Trips since the loop last took them, their worst sample and the
    /// guests they sent away (the count written last).
    pub trips: AtomicU64,
    pub trip_late_ns: AtomicU64,
    pub evicted: AtomicU64,
    /// How far the loop has passed `recent` on to the event sink.
    pub forwarded: AtomicU64,
}

impl CpuGuard {
    pub fn new(cpu: u32) -> CpuGuard {
        CpuGuard {
            cpu,
            recent: SampleRing::new(WINDOW_SAMPLES),
            clean: SampleRing::new(WINDOW_SAMPLES),
            samples: AtomicU64::new(0),
            late: AtomicU64::new(0),
            bound_ns: AtomicU64::new(NONE_NS),
            limit_ns: AtomicU64::new(NONE_NS),
            guests: GuestList::new(),
            trips: AtomicU64::new(0),
            trip_late_ns: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
        }
    }

    /// One wake-up at `at_ns`, `late_ns` after its release. Returns the
    /// guests' version when the sample is over the limit with guests: the
    /// caller evicts them (`record_trip`).
    pub fn sample(&self, at_ns: u64, late_ns: u64) -> Option<u32> {
        self.recent.push(at_ns, late_ns);
        self.samples.fetch_add(1, Relaxed);
        if late_ns > self.bound_ns.load(Relaxed) {
            self.late.fetch_add(1, Relaxed);
        }
        let (version, guests) = self.guests.count()?;
        if guests == 0 {
            self.clean.push(at_ns, late_ns);
            return None;
        }
        (late_ns > self.limit_ns.load(Relaxed)).then_some(version)
    }

    /// A trip of `version`'s guests: `evicted` of them sent away.
    pub fn record_trip(&self, version: u32, late_ns: u64, evicted: u64) {
        self.guests.mark_evicted(version);
        self.trip_late_ns.fetch_max(late_ns, Relaxed);
        self.evicted.fetch_add(evicted, Relaxed);
        self.trips.fetch_add(1, Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_free_samples_make_the_baseline_and_a_late_one_with_guests_trips() {
        let g = CpuGuard::new(1);
        g.bound_ns.store(100, Relaxed);
        assert_eq!(g.sample(1, 150), None, "no guest: no trip");
        assert_eq!((g.clean.written(), g.late.load(Relaxed)), (1, 1));
        g.guests.set(&[7, 8]);
        g.limit_ns.store(200, Relaxed);
        assert_eq!(g.sample(2, 190), None, "under the limit");
        let v = g.sample(3, 250).expect("over the limit with guests");
        let mut buf = [0; GUESTS_MAX];
        assert_eq!(g.guests.copy(v, &mut buf), Some(2));
        assert_eq!(&buf[..2], &[7, 8]);
        g.record_trip(v, 250, 2);
        assert_eq!(g.sample(4, 300), None, "the guests are gone");
        assert_eq!(g.clean.written(), 2, "and the CPU is guest-free again");
        g.guests.set(&[9]);
        assert!(
            g.sample(5, 300).is_some(),
            "a new guest list is armed again"
        );
        assert_eq!(g.guests.copy(v, &mut buf), None, "an old version is stale");
        assert_eq!((g.samples.load(Relaxed), g.trips.load(Relaxed)), (5, 1));
    }
}
