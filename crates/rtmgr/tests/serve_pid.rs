//! `rtmgr reserve --pid` against a live daemon (root; issue 22 item 3): a
//! reservation for a process already running — root's for any process, a
//! user's for its own only when its `[[client]]` rule has
//! `existing_processes` — revoked when that process exits; another user's
//! process refused; threads that exit while they are being granted leave no
//! grant behind. (A PID reused between the request and the grant is refused by
//! the daemon's pidfd: `daemon/manager/target/tests.rs`.)

mod serve_common;

use rtmgr_core::protocol::ErrorCode;
use rtmgr_rt::client::{ClientError, ReserveRequest};
use rtmgr_sys::sched::{SCHED_DEADLINE, SCHED_FIFO, SCHED_OTHER};
use serve_common::*;
use std::process::{Child, Stdio};

/// A process that wakes every 2 ms (a control loop's shape), as `uid` (None: root).
fn periodic_sleeper(uid: Option<u32>) -> Child {
    let mut c = command_as(uid, "perl");
    c.args(["-e", "select(undef, undef, undef, 0.002) while 1"])
        .stdin(Stdio::null());
    rtmgr_sys::child::ChildSetup::new()
        .kill_with_parent()
        .install(&mut c);
    c.spawn().unwrap()
}

#[test]
fn root_reserves_for_a_running_process_until_it_exits() {
    let Some(live) = Live::new() else { return };
    let d = live.start("");
    let mut kids = Children::default();
    let hard = kids.add(periodic_sleeper(None));
    let soft = kids.add(periodic_sleeper(None));
    let (code, err) = reserve_pid(&live, None, hard, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains(&format!("for process {hard} (threads {hard})")),
        "{err}"
    );
    // Listed pending: SCHED_FIFO 1 until it has run on its RT CPU (it
    // wakes every period), then SCHED_DEADLINE.
    let pending = if err.contains("; pending ") {
        vec![hard]
    } else {
        vec![]
    };
    assert_policy(hard, SCHED_DEADLINE, &pending, "hard, --pid");
    let (code, err) = reserve_pid(&live, None, soft, &["--all-threads", "--class", "rt1:10"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(policy_of(soft), Some(SCHED_FIFO));
    let mut c = live.client();
    let rs = listed(&mut c);
    assert_eq!(rs.len(), 2);
    assert!(rs.iter().any(|r| r.pid == hard && r.threads == vec![hard]));
    // The grant is the target's: it goes when the target exits.
    for k in &mut kids.0 {
        k.kill().unwrap();
        k.wait().unwrap();
    }
    eventually("both revoked with their processes", || {
        listed(&mut c).is_empty()
    });
    // No such process: an error, nothing reserved.
    let (code, err) = reserve_pid(&live, None, hard, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("no process {hard}")), "{err}");
    assert!(d.stop().success());
    live.assert_restored("after reservations for running processes");
}

#[test]
fn another_user_s_process_is_refused_and_a_user_s_own_needs_its_rule() {
    let Some(live) = Live::new() else { return };
    let nobody = 65534;
    let mut kids = Children::default();
    let roots = kids.add(periodic_sleeper(None));
    let own = kids.add(periodic_sleeper(Some(nobody)));
    let ask = |pid: u32| reserve_pid(&live, Some(nobody), pid, &["--class", "rt1:10"]);
    let rules = "[[client]]\nusers = [\"root\"]\n[[client]]\nusers = [\"nobody\"]\nmax_priority = 20\nhard = false\n";
    // Without existing_processes in its rule: refused, even for its own.
    let d = live.start(rules);
    let (code, err) = ask(own);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("no existing_processes = true"), "{err}");
    assert!(d.stop().success());
    let d = live.start(&format!("{rules}existing_processes = true\n"));
    // Root's process: refused by its credentials.
    let (code, err) = ask(roots);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("process {roots} (perl) belongs to uid 0")),
        "{err}"
    );
    assert_eq!(policy_of(roots), Some(SCHED_OTHER));
    // Its own: granted, as its uid, and revoked when it exits.
    let (code, err) = ask(own);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(policy_of(own), Some(SCHED_FIFO));
    let mut c = live.client();
    let rs = listed(&mut c);
    assert_eq!((rs.len(), rs[0].pid, rs[0].uid), (1, own, nobody));
    for k in &mut kids.0 {
        k.kill().unwrap();
        k.wait().unwrap();
    }
    eventually("revoked with its process", || listed(&mut c).is_empty());
    assert!(d.stop().success());
    live.assert_restored("after another user's process");
}

#[test]
fn threads_that_exit_while_they_are_granted_leave_no_grant() {
    let Some(live) = Live::new() else { return };
    let d = live.start("");
    let me = std::process::id();
    let mut c = live.client();
    // A thread already gone: not a thread of the process.
    let gone = std::thread::spawn(rtmgr_sys::sched::gettid).join().unwrap();
    let r = ReserveRequest::new(10_000_000, 1_000_000)
        .with_class("rt1:5")
        .for_process(me, vec![gone]);
    match c.reserve(r) {
        Err(ClientError::Refused { message, .. }) => {
            assert!(message.contains("not a thread of"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // Threads that exit at staggered moments of their grant: each answer is
    // a grant (revoked when the thread goes), or `gone`, or not a thread.
    let (mut granted, mut gone_errors) = (0, 0);
    for i in 0..20u64 {
        let (h, tid) = thread_exiting_after(std::time::Duration::from_micros(i * 100));
        let r = ReserveRequest::new(10_000_000, 1_000_000)
            .with_class("rt1:5")
            .for_process(me, vec![tid]);
        match c.reserve(r) {
            Ok(_) => granted += 1,
            Err(ClientError::Daemon {
                code: ErrorCode::Gone,
                ..
            }) => gone_errors += 1,
            Err(ClientError::Refused { .. }) => {}
            Err(e) => panic!("thread {tid}: {e}"),
        }
        h.join().unwrap();
    }
    eprintln!("20 threads exiting mid-grant: {granted} granted then revoked, {gone_errors} gone");
    eventually("grants of exited threads revoked", || {
        listed(&mut c).is_empty()
    });
    assert_eq!(c.status().unwrap().reservations, 0);
    assert_eq!(policy_of(me), Some(SCHED_OTHER));
    assert!(d.stop().success());
    live.assert_restored("after threads exiting mid-grant");
}
