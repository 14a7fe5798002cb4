//! The live balancer on this machine (root only): applies a partition with a
//! private journal, runs three bounded busy threads on the one NRT CPU, lets
//! `run_balancer` lend them the idle RT CPU, stops it from another thread (as
//! SIGTERM does), and checks every affinity and cpuset is back as it was.

use rtmgr_core::balance::Place;
use rtmgr_core::partition::{validate, PartitionConfig};
use rtmgr_core::CpuSet;
use rtmgr_linux::balance::observe::Scope;
use rtmgr_linux::balance::{run_balancer, LiveConfig};
use rtmgr_linux::lock::{MachineLock, DEFAULT_LOCK_PATH};
use rtmgr_linux::partition::{self, ApplyOptions, PartitionGuard};
use rtmgr_linux::{cgroup, cpus, measure, Host};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

#[test]
fn balancer_lends_the_rt_cpu_and_restores_everything() {
    if !rtmgr_linux::sched::is_root() {
        eprintln!("skip: needs root to change cpusets and affinities");
        return;
    }
    let host = Host::real();
    if partition::layout(&host).is_err() {
        eprintln!("skip: no cpuset controller");
        return;
    }
    let online = cpus::online(&host).unwrap();
    if online.len() < 2 {
        eprintln!("skip: needs 2 CPUs");
        return;
    }
    let _lock = MachineLock::acquire(Path::new(DEFAULT_LOCK_PATH)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rt_cpu = online.iter().last().unwrap();
    let plan = validate(
        &PartitionConfig {
            rt_cpus: Some(CpuSet::single(rt_cpu)),
            ..Default::default()
        },
        None,
        &online,
    )
    .unwrap();
    let guard = PartitionGuard::apply(
        &host,
        &plan,
        &ApplyOptions {
            journal: dir.path().join("journal"),
            replace: false,
        },
    )
    .unwrap();
    let applied = guard.applied().clone();

    // Three busy threads, bounded to 10 s whatever happens.
    let done = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let workers: Vec<_> = (0..3)
        .map(|_| {
            let (done, tx) = (done.clone(), tx.clone());
            std::thread::spawn(move || {
                tx.send(measure::gettid()).unwrap();
                let t0 = Instant::now();
                let mut x = 0u64;
                while !done.load(Ordering::Relaxed) && t0.elapsed() < Duration::from_secs(10) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            })
        })
        .collect();
    let tids: BTreeSet<u32> = (0..3).map(|_| rx.recv().unwrap()).collect();
    // Threads start in the process's cpuset: after the partition, the NRT set.
    std::thread::sleep(Duration::from_millis(100));
    let before: Vec<(u32, CpuSet, Option<String>)> = tids
        .iter()
        .map(|&t| {
            (
                t,
                host.get_affinity(t).unwrap(),
                cgroup::task_cgroup(&host, &applied.layout, t),
            )
        })
        .collect();
    for (_, aff, _) in &before {
        assert_eq!(aff, &plan.nrt, "workers should start on the NRT CPUs");
    }

    let mut cfg = LiveConfig::new(&applied);
    cfg.scope = Scope::Tids(tids.clone());
    cfg.duration_ns = Some(5_000_000_000);
    cfg.policy.latency_bound_ns = Some(u64::MAX / 4); // this VM's tails must not end the test
    let stop = Arc::new(AtomicBool::new(false));
    let seen_guest = Arc::new(Mutex::new(None::<(u32, CpuSet)>));
    let report = {
        let (stop2, seen, h) = (stop.clone(), seen_guest.clone(), host.clone());
        run_balancer(&host, &applied, &cfg, &stop, move |r, moves| {
            for m in moves {
                if let Place::Rt(_) = m.to {
                    let tid = m.task as u32;
                    if let Ok(a) = h.get_affinity(tid) {
                        seen.lock().unwrap().get_or_insert((tid, a));
                    }
                }
            }
            // Stop like SIGTERM would, a few samples after the first guest.
            if seen.lock().unwrap().is_some() && r.samples >= 10 {
                stop2.store(true, Ordering::Relaxed);
            }
        })
        .unwrap()
    };
    let guest = seen_guest.lock().unwrap().clone();
    let (gtid, gaff) = guest.expect("the idle RT CPU was never lent to a busy task");
    assert!(tids.contains(&gtid));
    assert_eq!(
        gaff,
        CpuSet::single(rt_cpu),
        "guest not pinned to the RT CPU"
    );
    assert!(
        report.moves.get("fill").copied().unwrap_or(0) >= 1,
        "{report:?}"
    );
    assert!(
        report.restored >= 1 && report.restore_failures.is_empty(),
        "{report:?}"
    );

    // Everything is back, while the threads still run.
    for (t, aff, cg) in &before {
        assert_eq!(
            &host.get_affinity(*t).unwrap(),
            aff,
            "affinity of {t} not restored"
        );
        assert_eq!(
            &cgroup::task_cgroup(&host, &applied.layout, *t),
            cg,
            "cpuset of {t} not restored"
        );
    }
    done.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    guard.reset().unwrap();
}
