//! Who may reserve for an existing process, against this machine's /proc and
//! real pidfds: another user's process is refused, a pidfd whose process
//! exited refuses a PID that now names another process, a thread id is not
//! a process, and root's target becomes the grant's client.

use super::*;
use crate::daemon::peer::peer_of;
use std::process::Command;

fn requester(uid: u32) -> Client {
    let host = Host::real();
    let me = std::process::id();
    Client {
        cred: PeerCred {
            pid: me,
            uid,
            gid: uid,
        },
        start_time: tasks::info(&host, me, me).unwrap().start_time,
        peer: peer_of(&host, me, uid, uid),
        pidfd: None,
    }
}

fn error_of(r: Result<Client, Response>) -> String {
    match r {
        Ok(c) => panic!("accepted: {c:?}"),
        Err(resp) => resp.to_line(),
    }
}

#[test]
fn another_user_s_process_is_refused() {
    let host = Host::real();
    // init (pid 1) is root's; this test process runs as whoever runs it.
    let target = 1;
    let uid = 65534;
    let pidfd = Pidfd::open(target).ok();
    let e = error_of(identify_target(&host, &requester(uid), target, pidfd));
    assert!(
        e.contains("\"reason\":\"permission\"") && e.contains("belongs to uid 0"),
        "{e}"
    );
}

#[test]
fn a_pid_reused_between_request_and_grant_is_refused_by_its_pidfd() {
    let host = Host::real();
    let mut child = Command::new("sleep").arg("30").spawn().unwrap();
    let pidfd = Pidfd::open(child.id()).unwrap();
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(pidfd.exited());
    // The request's pidfd names the exited process; its id now names another
    // (this one stands in for the process that reused it).
    let reused = std::process::id();
    let e = error_of(identify_target(&host, &requester(0), reused, Some(pidfd)));
    assert!(
        e.contains("\"code\":\"gone\"") && e.contains("exited after the request"),
        "{e}"
    );
    // With a live pidfd the same id is accepted (root).
    let live = Pidfd::open(reused).unwrap();
    let c = identify_target(&host, &requester(0), reused, Some(live)).unwrap();
    assert_eq!(c.cred.pid, reused);
    assert_eq!(c.start_time, requester(0).start_time);
}

#[test]
fn a_thread_id_is_not_a_process_and_a_gone_process_is_not_found() {
    let host = Host::real();
    let (tx, rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        tx.send(rtmgr_sys::sched::gettid()).unwrap();
        let _ = stop_rx.recv();
    });
    let tid = rx.recv().unwrap();
    let e = error_of(identify_target(&host, &requester(0), tid, None));
    assert!(
        e.contains("is a thread of process") && e.contains("invalid_request"),
        "{e}"
    );
    stop_tx.send(()).unwrap();
    h.join().unwrap();
    let mut child = Command::new("true").spawn().unwrap();
    let gone = child.id();
    child.wait().unwrap();
    let e = error_of(identify_target(&host, &requester(0), gone, None));
    assert!(e.contains("no process"), "{e}");
    let e = all_threads(&host, gone).unwrap_err().to_line();
    assert!(e.contains("\"code\":\"gone\""), "{e}");
    let mine = all_threads(&host, std::process::id()).unwrap();
    assert!(mine.contains(&std::process::id()));
}
