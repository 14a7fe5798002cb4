//! The request loop over a real socket, on a fake machine whose
//! `sched_setaffinity` the test holds (`host::HOLD_AFFINITY`): while one
//! client's grant is in flight on the worker, another client's `status` is
//! answered; then the grant's own answer comes. A stop while a `reserve`
//! waits its turn answers it `shutting_down`. A wake-up from the worker
//! that comes after its outcome was taken is emptied. Reserves are served
//! in the order they came. And the wait for the tick in whole ms, rounded
//! up.

use super::{run, wait_ms};
use crate::daemon::release::regrant_tests::manager_with;
use crate::fake::FakeMachine;
use crate::host::HOLD_AFFINITY;
use rtmgr_core::CpuSet;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn ask(path: &std::path::Path, line: &str) -> String {
    let mut s = UnixStream::connect(path).unwrap();
    s.write_all(line.as_bytes()).unwrap();
    let mut answer = String::new();
    BufReader::new(s).read_line(&mut answer).unwrap();
    answer
}

const RESERVE: &str =
    "{\"v\":1,\"op\":\"reserve\",\"class\":\"rt1:10\",\"period_ns\":10000000,\"budget_ns\":1000000}\n";

/// A daemon on a fake machine whose client is this test process, its grant
/// worker started and its affinity steps held (`HOLD_AFFINITY`) until the
/// test removes the mark.
fn held_daemon() -> (
    FakeMachine,
    crate::daemon::manager::Manager,
    tempfile::TempDir,
    UnixListener,
) {
    // The test process is the fake machine's client (the socket's peer).
    let me = std::process::id();
    let m = FakeMachine::new(2).task(me, "client").build();
    let mut d = manager_with(&m, "rt_cpus = \"1\"\n[[client]]\nusers = [\"*\"]\n");
    d.start_grant_worker(0, &CpuSet::single(0));
    let dir = tempfile::tempdir().unwrap();
    let listener = UnixListener::bind(dir.path().join("rtmgr.sock")).unwrap();
    m.host().write(HOLD_AFFINITY, "held").unwrap();
    (m, d, dir, listener)
}

/// Wait `ms` (the loop reads what was sent meanwhile).
fn pause(ms: u64) {
    std::thread::sleep(Duration::from_millis(ms));
}

#[test]
fn a_status_is_answered_while_another_client_s_grant_is_in_flight() {
    let (m, mut d, dir, listener) = held_daemon();
    let (host, sock) = (m.host(), dir.path().join("rtmgr.sock"));
    let stop = Arc::new(AtomicBool::new(false));
    let granted = Arc::new(AtomicBool::new(false));
    let grant = {
        let (sock, granted) = (sock.clone(), granted.clone());
        std::thread::spawn(move || {
            let line = ask(&sock, RESERVE);
            granted.store(true, Ordering::SeqCst);
            line
        })
    };
    let other = {
        let (sock, granted, host, stop) =
            (sock.clone(), granted.clone(), host.clone(), stop.clone());
        std::thread::spawn(move || {
            // Once the grant is held on the worker (its thread pinned last).
            let t0 = Instant::now();
            pause(300);
            let status = ask(&sock, "{\"v\":1,\"op\":\"status\"}\n");
            let before_grant = !granted.load(Ordering::SeqCst);
            std::fs::remove_file(host.path(HOLD_AFFINITY)).unwrap();
            while !granted.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(20) {
                pause(5);
            }
            stop.store(true, Ordering::SeqCst);
            (status, before_grant)
        })
    };
    run(&mut d, &listener, 8, 1000, &stop, |_| {}).unwrap();
    let (status, before_grant) = other.join().unwrap();
    let granted_line = grant.join().unwrap();
    assert!(status.contains("\"status\""), "{status}");
    assert!(
        before_grant,
        "the status waited for the other client's grant"
    );
    assert!(granted_line.contains("\"granted\""), "{granted_line}");
    d.stop_grant_worker();
}

/// A stop while one client's grant is in flight and another's `reserve`
/// waits its turn: the first is granted, the second answered
/// `shutting_down` (not end-of-stream), and a `list` sent after it on the
/// same connection is answered too, in order.
#[test]
fn a_reserve_waiting_its_turn_at_the_stop_is_answered_shutting_down() {
    let (m, mut d, dir, listener) = held_daemon();
    let (host, sock) = (m.host(), dir.path().join("rtmgr.sock"));
    let stop = Arc::new(AtomicBool::new(false));
    let first = {
        let sock = sock.clone();
        std::thread::spawn(move || ask(&sock, RESERVE))
    };
    let second = {
        let (sock, host, stop) = (sock.clone(), host.clone(), stop.clone());
        std::thread::spawn(move || {
            pause(300);
            let mut s = UnixStream::connect(&sock).unwrap();
            let list = "{\"v\":1,\"op\":\"list\"}\n";
            s.write_all(format!("{RESERVE}{list}").as_bytes()).unwrap();
            pause(300);
            stop.store(true, Ordering::SeqCst);
            pause(200);
            std::fs::remove_file(host.path(HOLD_AFFINITY)).unwrap();
            let mut lines = BufReader::new(s).lines();
            let mut next = || lines.next().and_then(|l| l.ok()).unwrap_or_default();
            (next(), next())
        })
    };
    run(&mut d, &listener, 8, 50, &stop, |_| {}).unwrap();
    let (reserve, list) = second.join().unwrap();
    let granted = first.join().unwrap();
    assert!(granted.contains("\"granted\""), "{granted}");
    assert!(reserve.contains("\"shutting_down\""), "{reserve}");
    assert!(list.contains("\"reservations\""), "{list}");
    assert_eq!(d.grants().count(), 1, "only the first client's grant");
    d.stop_grant_worker();
}

/// The worker wakes the loop 100 ms after handing an outcome over; a
/// `list` from another client makes the loop take that outcome (and answer
/// the grant) before the wake-up comes. The loop empties the socket when
/// its poll finds the byte: left there, every poll would return at once
/// (the loop spun at SCHED_FIFO 1). It is empty when the loop stops.
#[test]
fn a_wake_up_after_its_outcome_was_taken_is_emptied_by_the_loop() {
    let me = std::process::id();
    let m = FakeMachine::new(2).task(me, "client").build();
    let mut d = manager_with(&m, "rt_cpus = \"1\"\n[[client]]\nusers = [\"*\"]\n");
    d.start_grant_worker_waking_after(0, &CpuSet::single(0), Duration::from_millis(100));
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("rtmgr.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let clients = {
        let (sock, stop) = (sock.clone(), stop.clone());
        std::thread::spawn(move || {
            let grant = {
                let sock = sock.clone();
                std::thread::spawn(move || ask(&sock, RESERVE))
            };
            pause(30);
            let list = ask(&sock, "{\"v\":1,\"op\":\"list\"}\n");
            let granted = grant.join().unwrap();
            // The wake-up has come meanwhile, and the loop polled since.
            pause(300);
            stop.store(true, Ordering::SeqCst);
            (granted, list)
        })
    };
    run(&mut d, &listener, 8, 50, &stop, |_| {}).unwrap();
    let (granted, list) = clients.join().unwrap();
    assert!(granted.contains("\"granted\""), "{granted}");
    assert!(list.contains("\"reservations\""), "{list}");
    let fd = d.worker_fd().unwrap();
    assert_eq!(
        rtmgr_sys::pidfd::poll_readable(&[fd], 0).unwrap(),
        vec![false],
        "the wake-up was left in the socket"
    );
    d.stop_grant_worker();
}

/// A client process that reserves, releases, reserves again and exits: its
/// second grant goes with it at once, through the pidfd of its second watch
/// (the loop registers each watch's pidfd once, under the watch's serial),
/// not at a reconciliation (the tick here is a minute away).
#[test]
fn a_client_that_exits_after_a_second_grant_loses_it_without_a_tick() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("rtmgr.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let client = r#"
import json, socket, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile("rwb")
def ask(req):
    f.write((json.dumps(req) + "\n").encode()); f.flush()
    return json.loads(f.readline())
r = {"v": 1, "op": "reserve", "class": "rt1:10", "period_ns": 10000000, "budget_ns": 1000000}
a = ask(r); assert a["result"] == "granted", a
a = ask({"v": 1, "op": "release", "id": a["reservation"]["id"]}); assert a["result"] == "released", a
a = ask(r); assert a["result"] == "granted", a
print(a["reservation"]["id"], flush=True)
sys.stdin.read()
"#;
    let mut child = std::process::Command::new("python3")
        .args(["-c", client])
        .arg(&sock)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    let m = FakeMachine::new(2).task(child.id(), "client").build();
    let mut d = manager_with(&m, "rt_cpus = \"1\"\n[[client]]\nusers = [\"*\"]\n");
    d.start_grant_worker(0, &CpuSet::single(0));
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = {
        let (stop, sock) = (stop.clone(), sock.clone());
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let stdin = child.stdin.take().unwrap();
        std::thread::spawn(move || {
            let mut id = String::new();
            out.read_line(&mut id).unwrap();
            drop(stdin); // the client exits
            child.wait().unwrap();
            pause(300);
            stop.store(true, Ordering::SeqCst);
            let _ = UnixStream::connect(&sock); // wakes the loop, if it waits
            id
        })
    };
    run(&mut d, &listener, 8, 60_000, &stop, |_| {}).unwrap();
    let id = watcher.join().unwrap();
    assert!(
        id.trim().parse::<u64>().is_ok(),
        "the client was not granted twice: {id:?}"
    );
    assert_eq!(
        d.grants().count(),
        0,
        "the exited client's second grant stayed"
    );
    d.stop_grant_worker();
}

/// Up to the tick the poll waits at least 1 ms (no 0 ms poll before the
/// tick is due); at or past it, 0 (the tick runs now).
#[test]
fn the_wait_for_the_tick_is_rounded_up() {
    let t = 5_000_000_000;
    assert_eq!(wait_ms(t, t - 400_000), 1);
    assert_eq!(wait_ms(t, t - 1_000_000), 1);
    assert_eq!(wait_ms(t, t - 1_000_001), 2);
    assert_eq!(wait_ms(t, t - 999_999_999), 1000);
    assert_eq!((wait_ms(t, t), wait_ms(t, t + 5)), (0, 0));
}

/// Thread `tid` of process `pid` in the fake tree: a task directory under
/// the process, and its own stat, status and cgroup.
fn fake_thread(m: &FakeMachine, pid: u32, tid: u32) {
    let host = m.host();
    std::fs::create_dir_all(host.path(format!("/proc/{pid}/task/{tid}"))).unwrap();
    std::fs::create_dir_all(host.path(format!("/proc/{tid}"))).unwrap();
    let stat = format!(
        "{tid} (client) S 1 {pid} {pid} 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {} 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n",
        1000 + tid
    );
    let status = host
        .read(format!("/proc/{pid}/status"))
        .unwrap()
        .replace(&format!("Pid:\t{pid}\n"), &format!("Pid:\t{tid}\n"));
    let cgroup = host.read(format!("/proc/{pid}/cgroup")).unwrap();
    for (f, text) in [("stat", stat), ("status", status), ("cgroup", cgroup)] {
        std::fs::write(host.path(format!("/proc/{tid}/{f}")), text).unwrap();
    }
}

/// The reservation id in a `granted` answer.
fn reservation_id(line: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(line).unwrap();
    v["reservation"]["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("not granted: {line}"))
}

/// Reserves wait their turn in the order they came: B's waits behind A's
/// grant in flight; C's arrives as the worker comes free, read in the
/// same pass of the loop that takes A's outcome (the worker's wake-up is
/// 400 ms late), and still goes after B's. Before, C's went first, and
/// with 16 clients in a closed loop a `reserve` waited up to 33 ms while
/// later ones passed it.
#[test]
fn reserves_are_served_in_the_order_they_came() {
    let me = std::process::id();
    let (t2, t3) = (3_900_001, 3_900_002);
    let m = FakeMachine::new(2).task(me, "client").build();
    fake_thread(&m, me, t2);
    fake_thread(&m, me, t3);
    let mut d = manager_with(&m, "rt_cpus = \"1\"\n[[client]]\nusers = [\"*\"]\n");
    d.start_grant_worker_waking_after(0, &CpuSet::single(0), Duration::from_millis(400));
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("rtmgr.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    let host = m.host();
    host.write(HOLD_AFFINITY, "held").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let reserve_for = |tid: u32| {
        RESERVE.replace(
            "\"budget_ns\":1000000}",
            &format!("\"budget_ns\":1000000,\"threads\":[{tid}]}}"),
        )
    };
    let (b_line, c_line) = (reserve_for(t2), reserve_for(t3));
    let clients = {
        let (sock, stop, host) = (sock.clone(), stop.clone(), host.clone());
        std::thread::spawn(move || {
            let a = {
                let sock = sock.clone();
                std::thread::spawn(move || ask(&sock, RESERVE))
            };
            pause(300);
            let b = {
                let sock = sock.clone();
                std::thread::spawn(move || ask(&sock, &b_line))
            };
            // Connected (accepted) before it asks.
            let mut c = UnixStream::connect(&sock).unwrap();
            pause(300);
            std::fs::remove_file(host.path(HOLD_AFFINITY)).unwrap();
            pause(100);
            c.write_all(c_line.as_bytes()).unwrap();
            let mut c_answer = String::new();
            BufReader::new(c).read_line(&mut c_answer).unwrap();
            let c = c_answer;
            let (a, b) = (a.join().unwrap(), b.join().unwrap());
            stop.store(true, Ordering::SeqCst);
            (a, b, c)
        })
    };
    run(&mut d, &listener, 8, 60_000, &stop, |_| {}).unwrap();
    let (a, b, c) = clients.join().unwrap();
    let (a, b, c) = (reservation_id(&a), reservation_id(&b), reservation_id(&c));
    assert!(a < b && b < c, "granted in the order A {a}, B {b}, C {c}");
    d.stop_grant_worker();
}
