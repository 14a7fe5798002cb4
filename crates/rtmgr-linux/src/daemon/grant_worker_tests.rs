//! The grant worker on a fake machine whose `sched_setaffinity` a test can
//! hold (`host::HOLD_AFFINITY`): while a grant's kernel steps are in flight
//! the Manager answers other requests, its thread counts as held, and the
//! answer comes with its token once the steps are done; a failed step
//! leaves nothing admitted and the journal released.

use crate::daemon::manager::{Answer, Manager};
use crate::daemon::peer::Client;
use crate::daemon::release::regrant_tests::{client, manager, PID};
use crate::fake::FakeMachine;
use crate::host::HOLD_AFFINITY;
use rtmgr_core::protocol::{Op, Reply, Request, Response};
use rtmgr_core::CpuSet;
use std::time::{Duration, Instant};

fn reserve() -> Request {
    Request {
        v: 1,
        op: Op::Reserve(rtmgr_core::protocol::ReserveRequest::new(
            10_000_000, 1_000_000,
        )),
    }
}

fn status() -> Request {
    Request {
        v: 1,
        op: Op::Status,
    }
}

/// The grants journal of `manager`'s daemon config, as read back.
fn grants_journal_of(host: &crate::Host) -> crate::daemon::grants_journal::JournalState {
    let path = crate::daemon::ServeConfig::from_toml("rt_cpus = \"1\"")
        .unwrap()
        .grants_journal();
    crate::daemon::grants_journal::read(host, &path)
        .unwrap()
        .unwrap()
}

fn unhold(host: &crate::Host) {
    std::fs::remove_file(host.path(HOLD_AFFINITY)).unwrap();
}

/// The worker's answers, waiting up to 10 s for the first.
fn answers(d: &mut Manager) -> Vec<(u64, Response)> {
    let t0 = Instant::now();
    loop {
        let got = d.take_answers();
        if !got.is_empty() || t0.elapsed() > Duration::from_secs(10) {
            return got;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A Manager with a worker whose grant (under `token`) is held in flight.
fn held_in_flight(m: &FakeMachine, token: u64) -> (Manager, Client) {
    let mut d = manager(m);
    d.start_grant_worker(0, &CpuSet::single(0));
    let c = client(m);
    m.host().write(HOLD_AFFINITY, "held").unwrap();
    let started = d.handle_or_start(&c, reserve(), Some(token));
    assert!(matches!(started, Answer::Later), "{started:?}");
    (d, c)
}

#[test]
fn other_requests_are_answered_while_a_grant_is_in_flight() {
    let m = FakeMachine::new(2).task(PID, "client").build();
    let host = m.host();
    let (mut d, c) = held_in_flight(&m, 7);
    assert!(d.worker_busy());
    // Held on the worker: the loop answers a status at once.
    let resp = d.handle(&c, status());
    assert!(matches!(resp.reply, Reply::Status { .. }), "{resp:?}");
    assert!(
        d.take_answers().is_empty(),
        "answered while its steps are held"
    );
    // The thread being granted holds it already.
    let again = d.handle(&c, reserve()).to_line();
    assert!(again.contains("already holds reservation"), "{again}");
    unhold(&host);
    let got = answers(&mut d);
    assert_eq!(got.len(), 1, "{got:?}");
    let (token, resp) = &got[0];
    assert_eq!(*token, 7);
    let Reply::Granted { reservation } = &resp.reply else {
        panic!("not granted: {resp:?}");
    };
    assert!(!d.worker_busy());
    assert!(d.grants.contains_key(&reservation.id));
    assert_eq!(host.get_affinity(PID).unwrap(), CpuSet::single(1));
    assert_eq!(d.stats.granted, 1);
    d.stop_grant_worker();
}

#[test]
fn a_grant_whose_step_fails_on_the_worker_leaves_nothing_held() {
    let m = FakeMachine::new(2).task(PID, "client").build();
    let host = m.host();
    let status_path = format!("/proc/{PID}/status");
    let text = host.read(&status_path).unwrap();
    host.write(&status_path, &format!("{text}rtmgr_fake_no_setaffinity\n"))
        .unwrap();
    let mut d = manager(&m);
    d.start_grant_worker(0, &CpuSet::single(0));
    let c = client(&m);
    let started = d.handle_or_start(&c, reserve(), Some(3));
    assert!(matches!(started, Answer::Later), "{started:?}");
    let got = answers(&mut d);
    let line = got[0].1.to_line();
    assert!(
        line.contains("\"error\"") && line.contains("sched_setaffinity"),
        "{line}"
    );
    assert_eq!(d.stats.errors, 1);
    assert!(d.grants.is_empty() && !d.worker_busy());
    let journal = grants_journal_of(&host);
    assert!(
        journal.live.is_empty(),
        "released in the journal: {journal:?}"
    );
    assert_eq!(journal.released, 1);
    // Nothing admitted: the same request fits again once the thread can move.
    host.write(&status_path, &text).unwrap();
    let resp = d.handle(&c, reserve());
    assert!(matches!(resp.reply, Reply::Granted { .. }), "{resp:?}");
    d.stop_grant_worker();
}

#[test]
fn stopping_waits_for_the_grant_in_flight_and_answers_it() {
    let m = FakeMachine::new(2).task(PID, "client").build();
    let host = m.host();
    let (mut d, _) = held_in_flight(&m, 1);
    let release = {
        let host = host.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            unhold(&host);
        })
    };
    d.stop_grant_worker();
    release.join().unwrap();
    let got = d.take_answers();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(matches!(got[0].1.reply, Reply::Granted { .. }), "{got:?}");
}

#[test]
fn a_release_s_placement_goes_back_on_the_worker_and_then_it_is_answered() {
    let m = FakeMachine::new(2).task(PID, "client").build();
    let host = m.host();
    let mut d = manager(&m);
    d.start_grant_worker(0, &CpuSet::single(0));
    let c = client(&m);
    let layout = d.applied.layout.clone();
    let cgroup_before = crate::cgroup::task_cgroup(&host, &layout, PID);
    let mut soft = rtmgr_core::protocol::ReserveRequest::new(10_000_000, 1_000_000);
    soft.class = "rt1:10".into();
    let granted = d.handle(
        &c,
        Request {
            v: 1,
            op: Op::Reserve(soft),
        },
    );
    let Reply::Granted { reservation } = granted.reply else {
        panic!("not granted: {granted:?}");
    };
    host.write(HOLD_AFFINITY, "held").unwrap();
    let id = reservation.id;
    let release = Request {
        v: 1,
        op: Op::Release { id },
    };
    let later = d.handle_or_start(&c, release, Some(9));
    assert!(matches!(later, Answer::Later), "{later:?}");
    // Its policy is back, its placement held on the worker; it is no
    // longer listed, and the answer waits for the placement.
    assert!(d.worker_busy());
    assert!(d.grants.is_empty());
    assert_eq!(host.get_affinity(PID).unwrap(), CpuSet::single(1));
    let listed = d.handle(&c, Request { v: 1, op: Op::List }).to_line();
    assert!(!listed.contains(&format!("\"id\":{id}")), "{listed}");
    assert!(d.take_answers().is_empty());
    unhold(&host);
    let got = answers(&mut d);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, 9);
    assert!(
        matches!(got[0].1.reply, Reply::Released { id: i } if i == id),
        "{got:?}"
    );
    assert!(!d.worker_busy());
    assert_ne!(host.get_affinity(PID).unwrap(), CpuSet::single(1));
    assert_eq!(
        crate::cgroup::task_cgroup(&host, &layout, PID),
        cgroup_before
    );
    let journal = grants_journal_of(&host);
    assert!(journal.all().is_empty(), "{journal:?}");
    d.stop_grant_worker();
}

#[test]
fn a_root_domain_rebuild_runs_on_the_worker_behind_its_jobs() {
    let m = FakeMachine::new(2).task(PID, "client").build();
    let (mut d, _) = held_in_flight(&m, 2);
    d.dl_leak.mark(1);
    d.rebuild_due();
    // Queued behind the held grant; the CPU counts as returning meanwhile.
    assert!(d.dl_leak.is_rebuilding(1));
    assert!(d.dl_leak.returning(1, 0));
    assert_eq!(d.dl_leak.rebuilds, 0);
    unhold(&m.host());
    d.await_in_flight();
    assert_eq!(d.dl_leak.rebuilds, 1);
    assert!(!d.dl_leak.returning(1, 0) && !d.dl_leak.any_marked());
    assert_eq!(d.take_answers().len(), 1, "the grant's answer");
    d.stop_grant_worker();
}

/// The worker wakes the loop after it hands an outcome over; a loop that
/// took the outcome before the wake-up came (here: waiting for it at the
/// stop path; on another CPU: at once) must still empty the wake-up
/// socket, or every poll of the loop returns at once from then on (it spun
/// at SCHED_FIFO 1, found under strace).
#[test]
fn a_wake_up_that_comes_after_its_outcome_was_taken_is_emptied() {
    let m = FakeMachine::new(2).task(PID, "client").build();
    let mut d = manager(&m);
    d.start_grant_worker_waking_after(0, &CpuSet::single(0), Duration::from_millis(100));
    let c = client(&m);
    let started = d.handle_or_start(&c, reserve(), Some(3));
    assert!(matches!(started, Answer::Later), "{started:?}");
    d.await_in_flight();
    assert!(!d.worker_busy());
    // The wake-up comes now, with nothing in flight any more.
    let fd = d.worker_fd().unwrap();
    assert_eq!(
        rtmgr_sys::pidfd::poll_readable(&[fd], 2_000).unwrap(),
        vec![true],
        "the worker's wake-up"
    );
    // What the loop does when its poll finds the socket readable.
    d.worker_woke();
    let got = d.take_answers();
    assert_eq!(got.len(), 1, "{got:?}");
    let fd = d.worker_fd().unwrap();
    assert_eq!(
        rtmgr_sys::pidfd::poll_readable(&[fd], 0).unwrap(),
        vec![false],
        "the wake-up is left in the socket: the loop's poll would return at once for ever"
    );
    d.stop_grant_worker();
}

#[test]
fn the_config_has_the_worker_on_unless_it_says_false() {
    let on = crate::daemon::ServeConfig::from_toml("rt_cpus = \"1\"").unwrap();
    assert!(on.serve.grant_worker);
    let off =
        crate::daemon::ServeConfig::from_toml("rt_cpus = \"1\"\n[serve]\ngrant_worker = false\n")
            .unwrap();
    assert!(!off.serve.grant_worker);
    let bad = crate::daemon::ServeConfig::from_toml("rt_cpus = \"1\"\n[serve]\ngrant_worker = 2\n");
    assert!(bad.is_err());
}
