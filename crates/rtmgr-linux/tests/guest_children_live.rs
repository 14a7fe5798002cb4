//! Issue 20 item 3 (root only): a thread created by a lent guest inherits its
//! RT-CPU pinning and SCHED_IDLE. The balancer must track it — a guest of the
//! same CPU while its creator is lent, or sent back — and give it back what
//! its creator had before the lend when the run ends.

mod common;

use common::Lab;
use rtmgr_core::CpuSet;
use rtmgr_linux::balance::observe::Scope;
use rtmgr_linux::balance::{run_balancer, LiveConfig};
use rtmgr_linux::sched::Policy;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A thread that spins and, once it finds itself pinned to `rt_cpu` (lent),
/// starts a spinning child thread and publishes the child's tid.
fn spawner(
    rt_cpu: u32,
    done: Arc<AtomicBool>,
    child: Arc<AtomicU32>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let host = rtmgr_linux::Host::real();
        let me = rtmgr_sys::sched::gettid();
        let t0 = Instant::now();
        let mut handle = None;
        let mut x = 0u64;
        while !done.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(15) {
            for _ in 0..200_000 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
            if handle.is_none() && host.get_affinity(me).ok() == Some(CpuSet::single(rt_cpu)) {
                let (done, child) = (done.clone(), child.clone());
                handle = Some(std::thread::spawn(move || {
                    child.store(rtmgr_sys::sched::gettid(), Ordering::SeqCst);
                    let t0 = Instant::now();
                    let mut y = 0u64;
                    while !done.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(15) {
                        y = std::hint::black_box(y.wrapping_mul(31).wrapping_add(7));
                    }
                }));
            }
        }
        if let Some(h) = handle {
            h.join().unwrap();
        }
    })
}

#[test]
fn a_thread_created_by_a_guest_is_tracked_and_given_back() {
    let Some(lab) = Lab::start() else {
        return;
    };
    let (host, applied, rt_cpu) = (lab.host.clone(), lab.applied.clone(), lab.rt_cpu);
    // Two spinners on the one NRT CPU: one of them is lent the RT CPU.
    let done = Arc::new(AtomicBool::new(false));
    let child = Arc::new(AtomicU32::new(0));
    let parents = [
        spawner(rt_cpu, done.clone(), child.clone()),
        spawner(rt_cpu, done.clone(), child.clone()),
    ];

    let mut cfg = LiveConfig::new(&applied);

    // Lending here whatever a cached host test says (the machine's own cache).

    cfg.read_host_cache = false;
    // Every thread of this process (the harness threads sleep).
    cfg.scope = Scope::Tids(BTreeSet::from([std::process::id()]));
    cfg.duration_ns = Some(10_000_000_000);
    cfg.policy.latency_bound_ns = Some(u64::MAX / 4); // this VM's tails must not end the test
    cfg.watch_entries = false; // the spawner's checks are system calls
    let stop = AtomicBool::new(false);
    let report = run_balancer(&host, &applied, &cfg, &stop, |r, _| {
        if r.children_lent + r.children_sent_back >= 1 && r.samples >= 4 {
            stop.store(true, Ordering::Relaxed);
        }
    })
    .unwrap();
    let child_tid = child.load(Ordering::SeqCst);
    assert!(child_tid != 0, "the spawner was never lent: {report:?}");
    assert!(
        report.children_lent + report.children_sent_back >= 1,
        "the guest's child was not tracked: {report:?}"
    );
    assert!(report.restore_failures.is_empty(), "{report:?}");
    // The child is still running: it has what its creator had before the lend.
    assert_eq!(
        host.get_affinity(child_tid).unwrap(),
        applied.plan.nrt,
        "the child was left on the RT CPU"
    );
    assert_eq!(
        host.get_policy(child_tid).unwrap(),
        Policy::Other { nice: 0 },
        "the child kept SCHED_IDLE"
    );
    done.store(true, Ordering::Relaxed);
    for p in parents {
        p.join().unwrap();
    }
    lab.finish();
}
