//! How often a probe thread wakes (McKenney §2.1's sleep-and-measure loop;
//! ARTiS §2.2: the guard watches an RT CPU closely only while it has guests).
//! A pace is fast (an absolute-time sleep to each release) or slow (a futex
//! wait that a switch back to fast ends at once); the loop allocates nothing
//! and takes no lock.

use rtmgr_sys::futex;
use rtmgr_sys::time::{mono_ns, sleep_until};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

const SLOW: u32 = 0;
const FAST: u32 = 1;

/// One probe thread's rate, changed from any thread.
pub struct Pace {
    /// FAST or SLOW; the futex word a slow thread sleeps on.
    word: AtomicU32,
    interval_ns: u64,
    slow_interval_ns: u64,
}

impl Pace {
    /// Always `interval_ns` (a probe that measures for a report or a screen).
    pub fn fixed(interval_ns: u64) -> Pace {
        Pace::new(interval_ns, interval_ns, true)
    }

    /// `interval_ns` while fast, `slow_interval_ns` while slow.
    pub fn new(interval_ns: u64, slow_interval_ns: u64, fast: bool) -> Pace {
        Pace {
            word: AtomicU32::new(if fast { FAST } else { SLOW }),
            interval_ns: interval_ns.max(1),
            slow_interval_ns: slow_interval_ns.max(interval_ns).max(1),
        }
    }

    pub fn is_fast(&self) -> bool {
        self.word.load(Ordering::Acquire) == FAST
    }

    /// Switch the rate; a thread asleep at the slow rate wakes at once and
    /// goes on at the fast one.
    pub fn set_fast(&self, fast: bool) {
        let was = self
            .word
            .swap(if fast { FAST } else { SLOW }, Ordering::AcqRel);
        if fast && was == SLOW {
            self.wake();
        }
    }

    /// End a slow sleep now (to stop the thread).
    pub fn wake(&self) {
        let _ = futex::wake(&self.word, u32::MAX);
    }
}

/// The probe loop: sleep to each release and hand `on_sample(wake_ns,
/// late_ns)` how late the thread woke, until `stop`. At the fast rate a
/// missed release is recorded late, not skipped; at the slow rate each
/// sleep is one release, and a switch to fast starts a new schedule.
pub fn run_paced(pace: &Pace, stop: &AtomicBool, mut on_sample: impl FnMut(u64, u64)) {
    let mut next = mono_ns() + pace.interval_ns;
    while !stop.load(Ordering::Relaxed) {
        if pace.is_fast() {
            sleep_until(next);
            let now = mono_ns();
            on_sample(now, now.saturating_sub(next));
            next += pace.interval_ns;
            continue;
        }
        let release = mono_ns() + pace.slow_interval_ns;
        let slept = futex::wait(
            &pace.word,
            SLOW,
            Some(Duration::from_nanos(pace.slow_interval_ns)),
        );
        if slept.is_err_and(|e| e.raw_os_error() == Some(libc::ETIMEDOUT)) {
            let now = mono_ns();
            on_sample(now, now.saturating_sub(release));
        }
        next = mono_ns() + pace.interval_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn a_fixed_pace_samples_every_release_until_stopped() {
        let (pace, stop) = (Pace::fixed(100_000), AtomicBool::new(false));
        let mut n = 0;
        run_paced(&pace, &stop, |_, _| {
            n += 1;
            if n == 20 {
                stop.store(true, Ordering::Relaxed);
            }
        });
        assert_eq!(n, 20);
    }

    #[test]
    fn a_slow_thread_wakes_at_once_when_set_fast() {
        // Slow: one sample per 60 s; set fast after 50 ms, the samples come.
        let pace = Arc::new(Pace::new(1_000_000, 60_000_000_000, false));
        let stop = Arc::new(AtomicBool::new(false));
        let (p, s) = (pace.clone(), stop.clone());
        let h = std::thread::spawn(move || {
            let mut n = 0;
            run_paced(&p, &s, |_, _| {
                n += 1;
                if n == 5 {
                    s.store(true, Ordering::Relaxed);
                }
            });
            n
        });
        std::thread::sleep(Duration::from_millis(50));
        assert!(!h.is_finished(), "asleep at the slow rate");
        pace.set_fast(true);
        assert_eq!(h.join().unwrap(), 5);
    }

    #[test]
    fn a_slow_pace_is_never_faster_than_the_fast_one() {
        let p = Pace::new(10, 5, false);
        assert_eq!((p.interval_ns, p.slow_interval_ns), (10, 10));
        assert!(!p.is_fast());
        p.set_fast(true);
        assert!(p.is_fast());
    }
}
