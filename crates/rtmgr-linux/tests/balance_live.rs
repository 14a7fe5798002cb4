//! The live balancer on this machine (root only): applies a partition with a
//! private journal, runs three bounded busy threads on the one NRT CPU, lets
//! `run_balancer` lend them the idle RT CPU, stops it from another thread (as
//! SIGTERM does), and checks every affinity and cpuset is back as it was.

mod common;

use common::{Busy, Lab};
use rtmgr_core::balance::Place;
use rtmgr_core::CpuSet;
use rtmgr_linux::balance::observe::Scope;
use rtmgr_linux::balance::{run_balancer, LiveConfig};
use rtmgr_linux::cgroup;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn balancer_lends_the_rt_cpu_and_restores_everything() {
    let Some(lab) = Lab::start() else {
        return;
    };
    let (host, applied) = (lab.host.clone(), lab.applied.clone());
    let (plan, rt_cpu) = (applied.plan.clone(), lab.rt_cpu);
    let busy = Busy::spawn(3, Duration::from_secs(10));
    let tids = busy.tids.clone();
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

    // Lending here whatever a cached host test says (the machine's own cache).

    cfg.read_host_cache = false;
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
    let Some((gtid, gaff)) = guest else {
        panic!("the idle RT CPU was never lent to a busy task: {report:?}");
    };
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
    busy.stop();
    lab.finish();
}

/// Issue 20: told by a host test that the host preempts busy vCPUs, the
/// balancer does not lend, says why, and only looks once a second.
#[test]
fn a_host_that_preempts_busy_vcpus_gets_no_lends() {
    let Some(lab) = Lab::start() else {
        return;
    };
    let (host, applied) = (lab.host.clone(), lab.applied.clone());
    let busy = Busy::spawn(3, Duration::from_secs(10));
    let mut cfg = LiveConfig::new(&applied);
    cfg.scope = Scope::Tids(busy.tids.clone());
    cfg.duration_ns = Some(3_000_000_000);
    cfg.policy.latency_bound_ns = Some(u64::MAX / 4);
    let now_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    cfg.host_prior = Some(rtmgr_core::balance::LendingPrior {
        host_preempts_busy_vcpus: true,
        stall_ns: 9_000_000,
        measured_at_unix_s: now_s,
        ..Default::default()
    });
    let stop = AtomicBool::new(false);
    let report = run_balancer(&host, &applied, &cfg, &stop, |_, _| {}).unwrap();
    assert_eq!(report.lends, 0, "{report:?}");
    let why = report.lending[0].reason.clone().unwrap_or_default();
    assert!(why.contains("host preempts busy vCPUs"), "{why}");
    assert!(report.idle_steps > 0, "{report:?}");
    busy.stop();
    lab.finish();
}
