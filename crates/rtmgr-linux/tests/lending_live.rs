//! Lending without hurting, on this machine (root only): a busy user-mode
//! thread is lent the idle RT CPU; when it starts making system calls the
//! kernel-entry watch sends it back to the NRT CPUs at once — long before
//! the next sample — and the report says why. (The bound here is generous:
//! the real figure is the benchmark's.)

mod common;

use common::{Busy, Lab};
use rtmgr_core::balance::Place;
use rtmgr_linux::balance::observe::Scope;
use rtmgr_linux::balance::{run_balancer, LiveConfig};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[test]
fn a_guest_that_enters_the_kernel_leaves_the_rt_cpu_at_once() {
    let Some(lab) = Lab::start() else {
        return;
    };
    let (host, applied) = (lab.host.clone(), lab.applied.clone());
    // Three busy threads (the NRT CPU is saturated); each switches to system
    // calls once told to.
    let busy = Busy::spawn(3, Duration::from_secs(20));
    let tids = busy.tids.clone();

    let mut cfg = LiveConfig::new(&applied);
    cfg.scope = Scope::Tids(tids.clone());
    cfg.duration_ns = Some(15_000_000_000);
    cfg.guard = false; // this test is about kernel entries, not the VM's tails
    let stop = Arc::new(AtomicBool::new(false));
    let lent_at = Arc::new(AtomicU64::new(0));
    let report = {
        let (stop2, syscalls2, lent2) = (stop.clone(), busy.syscalls.clone(), lent_at.clone());
        let guest = Arc::new(AtomicU64::new(0));
        run_balancer(&host, &applied, &cfg, &stop, move |r, moves| {
            for m in moves {
                if let Place::Rt(_) = m.to {
                    guest.store(m.task, Ordering::Relaxed);
                    if lent2.load(Ordering::Relaxed) == 0 {
                        lent2.store(rtmgr_sys::time::mono_ns(), Ordering::Relaxed);
                    }
                }
            }
            // A few samples after the first lend, the guest turns to system calls.
            let lent = lent2.load(Ordering::Relaxed);
            if lent > 0 && rtmgr_sys::time::mono_ns() > lent + 300_000_000 {
                syscalls2.store(true, Ordering::Relaxed);
            }
            if r.kernel_entry_evictions > 0 && r.samples > 2 {
                stop2.store(true, Ordering::Relaxed);
            }
        })
        .unwrap()
    };
    busy.stop();
    lab.finish();
    if !report.entry_watch {
        eprintln!("skip: no kernel-entry watch here ({:?})", report.notes);
        return;
    }
    assert!(
        lent_at.load(Ordering::Relaxed) > 0,
        "never lent: {report:?}"
    );
    assert!(report.kernel_entry_evictions >= 1, "{report:?}");
    assert!(
        report.entry_syscalls.contains_key("getppid"),
        "{:?}",
        report.entry_syscalls
    );
    assert!(report.restore_failures.is_empty(), "{report:?}");
    eprintln!(
        "kernel entry -> eviction: mean {:?} ns, max {:?} ns",
        report.entry_evict_delay_mean_ns, report.entry_evict_delay_max_ns
    );
    // Generous: well under the 50 ms sampling period it replaces.
    assert!(
        report.entry_evict_delay_max_ns.unwrap() < 50_000_000,
        "{report:?}"
    );
}
