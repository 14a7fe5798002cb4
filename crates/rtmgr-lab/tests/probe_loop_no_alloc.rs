//! The lab probe's promise (docs/architecture.md, the probe service): its
//! SCHED_FIFO thread's loop allocates nothing and takes no lock. A counting
//! global allocator (rtmgr-sys's) counts what recording and publishing
//! allocate on this thread; the loop's file names no lock type; and the
//! reader's side sees every sample the loop recorded.

use rtmgr_core::CpuSet;
use rtmgr_lab::measure::probe_loop::{Recorder, Slot};
use rtmgr_lab::report::{PolicySpec, ProbeMode, ProbeSpec};
use rtmgr_linux::balance::guard::SampleFeed;
use rtmgr_sys::count_alloc::{allocations_of, Counting};
use std::sync::atomic::Ordering;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn the_probe_loop_records_and_publishes_without_allocating() {
    let cfg = ProbeSpec {
        mode: ProbeMode::Absolute,
        cpus: CpuSet::single(1),
        interval_ns: 100_000,
        duration_ns: None,
        loops: None,
        policy: PolicySpec::Fifo { priority: 1 },
        parallel: 1,
    };
    let slot = Slot::new(cfg.interval_ns);
    let feed = SampleFeed::new(&CpuSet::single(1));
    let mut rec = Recorder::new(&cfg, &slot, (1, 0), None, Some(feed));
    rec.next = 1_000_000_000;
    let during = allocations_of(|| {
        for i in 0..2_000u64 {
            // On time, a little late, and 3 ms late: kept as a late wake-up
            // that missed the releases in between (served one by one).
            let lat = match i % 100 {
                0 => 3_000_000,
                1 => 150_000,
                _ => 2_000,
            };
            let now = rec.next + lat;
            rec.record(lat as i64, now, u64::MAX, None);
            if i % 500 == 0 {
                slot.set_running_p99(Some(10_000));
                rec.publish(now);
            }
        }
    });
    assert_eq!(during, 0, "the probe loop allocated {during} times");
    rec.store_counts();
    // 20 wake-ups 3 ms late, each missing the 30 releases of 100 µs since
    // its own (20 of them still 1 ms late or more when served), and 20
    // 150 µs late, each missing one.
    assert_eq!(rec.out.late.len(), 20);
    assert_eq!(rec.out.missed, 20 * 30 + 20);
    let samples = slot.samples.load(Ordering::Relaxed);
    assert_eq!(samples, 2_000 + 20 * 30 + 20);
    assert!(samples <= slot.ring.capacity() as u64);
    // The reader's side: every sample, in the ring, as recorded.
    let mut read = 0u64;
    let mut late = 0u64;
    slot.ring.read_since(0, |_, l| {
        read += 1;
        late += u64::from(l as i64 >= 1_000_000);
    });
    assert_eq!((read, late), (samples, 20 * (1 + 20)));
}

/// No lock on the probe thread's path: the loop's file names no lock type.
#[test]
fn the_probe_loop_takes_no_lock() {
    let f = concat!(env!("CARGO_MANIFEST_DIR"), "/src/measure/probe_loop.rs");
    let text = std::fs::read_to_string(f).unwrap();
    for word in [
        "Mutex", "RwLock", "Condvar", ".lock(", "try_lock", "Barrier",
    ] {
        assert!(!text.contains(word), "probe_loop.rs names {word}");
    }
}

#[test]
fn the_counter_sees_an_allocation() {
    assert!(allocations_of(|| drop(std::hint::black_box(vec![1u8; 64]))) >= 1);
}
