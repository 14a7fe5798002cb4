//! The probe service's promise (docs/balance.md "Latency guard"): the
//! SCHED_FIFO probe thread's loop allocates nothing and takes no lock. A
//! counting global allocator (rtmgr-sys's, installed in this test binary) counts what the
//! guard's sample path and the paced loop allocate on this thread.

use rtmgr_core::CpuSet;
use rtmgr_linux::balance::guard::{GuardOptions, LatencyGuard, SampleFeed};
use rtmgr_linux::probe::{run_paced, Pace, SampleRing};
use rtmgr_sys::count_alloc::{allocations_of, Counting};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

#[test]
fn the_counter_sees_an_allocation() {
    assert!(allocations_of(|| drop(std::hint::black_box(vec![1u8; 64]))) >= 1);
}

#[test]
fn the_guards_probe_loop_allocates_nothing() {
    let cpus = CpuSet::parse_list("1-2").unwrap();
    let feed = SampleFeed::new(&cpus);
    let mut guard = LatencyGuard::fed(
        &feed,
        GuardOptions {
            interval_ns: 100_000,
            immediate: None,
            events: None,
            bound_ns: Some(50_000),
        },
    );
    // CPU 1 has guests, CPU 2 none: both of the sample path's branches.
    guard.set_guests(&BTreeMap::from([(77, 1), (78, 1)]));
    let (pace, stop) = (Pace::fixed(100_000), AtomicBool::new(false));
    let mut n = 0u64;
    let during = allocations_of(|| {
        run_paced(&pace, &stop, |_, late| {
            feed.sample(1, late);
            feed.sample(2, late + 60_000);
            feed.sample(9, late); // a CPU the guard does not watch
            n += 1;
            if n == 500 {
                stop.store(true, Ordering::Relaxed);
            }
        })
    });
    assert_eq!(during, 0, "the probe loop allocated {during} times");
    // The loop's side sees what the probe thread wrote.
    let counts = guard.take_counts();
    assert_eq!((counts[&1].samples, counts[&2].samples), (500, 500));
    assert_eq!(counts[&2].late, 500, "every CPU 2 sample is over the bound");
    assert_eq!(guard.p99().len(), 2);
}

#[test]
fn a_ring_push_allocates_nothing() {
    let ring = SampleRing::new(16);
    assert_eq!(
        allocations_of(|| (0..1000).for_each(|i| ring.push(i, i))),
        0
    );
}

/// No lock on the probe thread's path: the files it runs (the paced loop,
/// the ring, one CPU's guard state) name no lock type at all.
#[test]
fn the_probe_threads_code_takes_no_lock() {
    let dir = env!("CARGO_MANIFEST_DIR");
    for f in ["probe/pace.rs", "probe/ring.rs", "balance/guard/cpu.rs"] {
        let text = std::fs::read_to_string(format!("{dir}/src/{f}")).unwrap();
        for word in ["Mutex", "RwLock", "Condvar", ".lock(", "Barrier"] {
            assert!(!text.contains(word), "{f} names {word}");
        }
    }
}
