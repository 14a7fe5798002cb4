//! The grant matrix against a live daemon (root; issue 27 item 1): hard
//! (rt0) and soft (rt1) grants for a thread that is running, asleep in
//! recv, nanosleep, a futex, poll or a pipe read, or stopped (SIGSTOP) —
//! asked through the Rust client, `rtmgr reserve --pid --tid`, `rtmgr
//! reserve --pid --all-threads` and a raw socket client written from
//! docs/protocol.md. Every cell is asked several times (grant, check the
//! policy, placement and bandwidth, release); every answer must be a
//! grant. The machine is as before at the end.

mod serve_common;

use rtmgr_rt::client::{Client, ReserveRequest};
use rtmgr_sys::sched::{SCHED_DEADLINE, SCHED_FIFO, SCHED_OTHER};
use serve_common::*;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::{Child, Command, Stdio};

/// Grants per cell (the lead's benchmark asks ≥ 50).
const ROUNDS: usize = 3;

/// Root's rule without the burst limit (the matrix asks hundreds of times).
const UNLIMITED: &str = "[[client]]\nusers = [\"root\"]\nmax_priority = 98\nrequests_per_burst = 100000000\nburst_s = 1\nmax_reservations = 1000\n";

/// A Python process (standard library only) with one thread per way of
/// waiting; it prints "NAME TID" for each, then "ready".
const WAITERS: &str = r#"
import os, select, signal, socket, threading, time
# Each waiting thread wakes every TICK (a thread granted SCHED_FIFO 1
# pending SCHED_DEADLINE gets it once it has run on its RT CPU); the waker
# thread sends the bytes the recv and read threads wait for.
TICK = 0.05
wake = []
def spin():
    while True:
        pass
def recv():
    a, b = socket.socketpair()
    wake.append(lambda: b.send(b"x"))
    while True:
        a.recv(1)
def nanosleep():
    while True:
        time.sleep(TICK)
def futex():
    e = threading.Event()
    while True:
        e.wait(TICK)
def poll():
    r, w = os.pipe()
    p = select.poll()
    p.register(r, select.POLLIN)
    while True:
        p.poll(TICK * 1000)
def read():
    r, w = os.pipe()
    wake.append(lambda: os.write(w, b"x"))
    while True:
        os.read(r, 1)
def waker():
    while True:
        time.sleep(TICK)
        for f in list(wake):
            f()
import queue
q = queue.Queue()
def run(f):
    q.put((f.__name__, threading.get_native_id()))
    f()
ways = (spin, recv, nanosleep, futex, poll, read)
for f in ways:
    threading.Thread(target=run, args=(f,), daemon=True).start()
for _ in ways:
    print(*q.get(), flush=True)
threading.Thread(target=waker, daemon=True).start()
time.sleep(0.3)
print("ready", flush=True)
signal.pause()
"#;

struct Waiters {
    child: Child,
    threads: Vec<(String, u32)>,
}

fn waiters() -> Option<Waiters> {
    let mut c = Command::new("python3");
    c.args(["-c", WAITERS])
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    rtmgr_sys::child::ChildSetup::new()
        .kill_with_parent()
        .install(&mut c);
    let Ok(mut child) = c.spawn() else {
        eprintln!("skip: no python3");
        return None;
    };
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut threads = Vec::new();
    loop {
        let mut line = String::new();
        assert!(out.read_line(&mut line).unwrap() > 0, "python3 ended");
        let mut w = line.split_whitespace();
        match (w.next(), w.next()) {
            (Some("ready"), _) => break,
            (Some(name), Some(tid)) => threads.push((name.to_string(), tid.parse().unwrap())),
            _ => panic!("unexpected line {line:?}"),
        }
    }
    Some(Waiters { child, threads })
}

fn state_of(tid: u32) -> char {
    let stat = std::fs::read_to_string(format!("/proc/{tid}/stat")).unwrap();
    stat[stat.rfind(')').unwrap() + 1..]
        .trim_start()
        .chars()
        .next()
        .unwrap()
}

fn affinity_of(tid: u32) -> String {
    let status = std::fs::read_to_string(format!("/proc/{tid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .unwrap()
        .trim()
        .to_string()
}

/// A grant: its id and the threads the reply listed as pending (SCHED_FIFO 1
/// until they run on the RT CPU; docs/protocol.md).
type Granted = (u64, Vec<u32>);

/// One way of asking: the grant, or the whole answer when it was not one.
type Route = fn(&Live, u32, u32, &str) -> Result<Granted, String>;

fn rust_client(live: &Live, pid: u32, tid: u32, class: &str) -> Result<Granted, String> {
    let mut r = ReserveRequest::new(10_000_000, 500_000);
    r.class = class.into();
    r.pid = Some(pid);
    r.threads = vec![tid];
    live.client()
        .reserve(r)
        .map(|g| (g.id, g.pending))
        .map_err(|e| e.to_string())
}

fn cli(live: &Live, pid: u32, threads: &[&str], class: &str) -> Result<Granted, String> {
    let o = Command::new(BIN)
        .args(["reserve", "--socket"])
        .arg(live.socket())
        .args(["--pid", &pid.to_string(), "--period", "10ms", "--budget"])
        .args(["500us", "--class", class])
        .args(threads)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    if !o.status.success() {
        return Err(err);
    }
    // "…; pending 12,13: SCHED_FIFO 1 until…"
    let pending = err
        .split("; pending ")
        .nth(1)
        .and_then(|s| s.split(':').next())
        .map(|l| l.split(',').map(|t| t.trim().parse().unwrap()).collect())
        .unwrap_or_default();
    err.split("reservation ")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .map(|id| (id, pending))
        .ok_or(err)
}

fn cli_tid(live: &Live, pid: u32, tid: u32, class: &str) -> Result<Granted, String> {
    cli(live, pid, &["--tid", &tid.to_string()], class)
}

/// A client that knows only docs/protocol.md: one JSON line out, one in.
fn raw(live: &Live, pid: u32, tid: u32, class: &str) -> Result<Granted, String> {
    let mut s = UnixStream::connect(live.socket()).unwrap();
    let line = format!(
        "{{\"v\":2,\"op\":\"reserve\",\"period_ns\":10000000,\"budget_ns\":500000,\"class\":\"{class}\",\"pid\":{pid},\"threads\":[{tid}]}}\n"
    );
    s.write_all(line.as_bytes()).unwrap();
    let mut answer = String::new();
    BufReader::new(&s).read_line(&mut answer).unwrap();
    let v: serde_json::Value =
        serde_json::from_str(&answer).map_err(|e| format!("{e}: {answer}"))?;
    if v["result"] != "granted" {
        return Err(answer);
    }
    let pending = v["reservation"]["pending"]
        .as_array()
        .map(|a| a.iter().map(|t| t.as_u64().unwrap() as u32).collect())
        .unwrap_or_default();
    v["reservation"]["id"]
        .as_u64()
        .map(|id| (id, pending))
        .ok_or(answer)
}

fn release(live: &Live, id: u64) {
    live.client().release(id).unwrap();
}

/// Grant `tid` through `route` ROUNDS times: granted, at the policy, pinned
/// to the RT CPU; released, back to SCHED_OTHER.
fn cell(live: &Live, route: (&str, Route), pid: u32, (what, tid): (&str, u32), class: &str) {
    let (policy, name) = match class {
        "rt0" => (SCHED_DEADLINE, "hard"),
        _ => (SCHED_FIFO, "soft"),
    };
    let rt = live.rt_cpu.to_string();
    for round in 0..ROUNDS {
        let at = format!(
            "{} grant, thread {what} ({tid}, state {}), via {}, round {round}",
            name,
            state_of(tid),
            route.0
        );
        let (id, pending) = (route.1)(live, pid, tid, class).unwrap_or_else(|e| {
            let log = std::fs::read_to_string(live.dir.path().join("serve.log"));
            panic!("{at}: {e}\ndaemon log:\n{}", log.unwrap_or_default())
        });
        if pending.contains(&tid) && state_of(tid) == 'T' {
            // Pending and stopped: SCHED_FIFO 1 until it is continued
            // (the end of the matrix continues one and waits for it), or
            // its own policy while held for an earlier overrun.
            let now = policy_of(tid);
            assert!(
                now == Some(SCHED_FIFO) || now == Some(rtmgr_sys::sched::SCHED_OTHER),
                "{at}: pending at {now:?}"
            );
        } else {
            assert_policy(tid, policy, &pending, &at);
        }
        assert_eq!(affinity_of(tid), rt, "{at}");
        release(live, id);
        assert_eq!(policy_of(tid), Some(SCHED_OTHER), "{at}: released");
    }
}

/// The daemon's deadline bandwidth on the RT CPU is what it admitted: none
/// once every grant is gone (grants of sleeping threads included).
fn no_reservations_left(live: &Live) {
    eventually("every grant released", || {
        listed(&mut live.client()).is_empty()
    });
}

#[test]
fn every_thread_gets_hard_and_soft_grants_whatever_it_is_doing() {
    let Some(live) = Live::new() else { return };
    let Some(mut w) = waiters() else { return };
    let d = live.start(UNLIMITED);
    let pid = w.child.id();
    let routes: [(&str, Route); 3] = [
        ("the Rust client", rust_client),
        ("rtmgr reserve --pid --tid", cli_tid),
        ("a raw socket client", raw),
    ];
    for (what, tid) in w.threads.clone() {
        for route in routes {
            for class in ["rt0", "rt1:20"] {
                cell(&live, route, pid, (&what, tid), class);
            }
        }
    }
    // --all-threads: every thread at once, the main one (in pause) too.
    let all = |class| cli(&live, pid, &["--all-threads"], class);
    for class in ["rt0", "rt1:20"] {
        for round in 0..ROUNDS {
            let (id, _) =
                all(class).unwrap_or_else(|e| panic!("--all-threads {class} round {round}: {e}"));
            release(&live, id);
        }
    }
    // Stopped: every thread in state T.
    rtmgr_sys::process::kill(pid as i32, libc::SIGSTOP).unwrap();
    eventually("stopped", || {
        w.threads.iter().all(|(_, t)| state_of(*t) == 'T')
    });
    for (what, tid) in w.threads.clone() {
        for route in routes {
            for class in ["rt0", "rt1:20"] {
                cell(&live, route, pid, (&format!("{what}, stopped"), tid), class);
            }
        }
    }
    for class in ["rt0", "rt1:20"] {
        let (id, _) = all(class).unwrap_or_else(|e| panic!("--all-threads {class}, stopped: {e}"));
        release(&live, id);
    }
    // A stopped thread granted, then continued: it runs under its policy.
    let (_, spin) = w.threads[0].clone();
    let (id, pending) = rust_client(&live, pid, spin, "rt0").unwrap();
    rtmgr_sys::process::kill(pid as i32, libc::SIGCONT).unwrap();
    let ran = || {
        std::fs::read_to_string(format!("/proc/{spin}/schedstat"))
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let t0 = ran();
    eventually("the continued deadline thread runs", || ran() > t0);
    assert_policy(spin, SCHED_DEADLINE, &pending, "continued");
    release(&live, id);
    no_reservations_left(&live);
    let status = live.client().status().unwrap();
    assert_eq!(status.errors, 0, "{status:?}");
    w.child.kill().unwrap();
    w.child.wait().unwrap();
    assert!(d.stop().success());
    live.assert_restored("after the matrix");
}

/// A zombie (its process exited, not yet reaped) is refused with a clear
/// error, not an errno, and nothing changes. (A zombie thread of a live
/// process: the daemon's `regrant_tests.rs`.)
#[test]
fn a_zombie_is_refused_clearly() {
    let Some(live) = Live::new() else { return };
    let d = live.start("");
    let mut z = Command::new("true").spawn().unwrap();
    let pid = z.id();
    eventually("a zombie", || state_of(pid) == 'Z');
    let e = rust_client(&live, pid, pid, "rt0").unwrap_err();
    assert!(e.contains("(Gone)") && e.contains("exited"), "{e}");
    assert!(!e.contains("os error"), "{e}");
    z.wait().unwrap();
    assert!(listed(&mut live.client()).is_empty());
    assert!(d.stop().success());
    live.assert_restored("after the zombie");
}

/// The client library's own threads, asleep in the kernel, reserved by the
/// process itself (no `pid`): granted.
#[test]
fn the_rust_client_grants_its_own_sleeping_thread() {
    let Some(live) = Live::new() else { return };
    let d = live.start("");
    let (h, tid) = thread_exiting_after(std::time::Duration::from_secs(5));
    eventually("asleep", || state_of(tid) == 'S');
    let mut c = Client::connect_to(&live.socket()).unwrap();
    for _ in 0..ROUNDS {
        let mut r = ReserveRequest::new(10_000_000, 500_000);
        r.threads = vec![tid];
        let g = c.reserve(r).unwrap();
        assert_eq!(g.asleep, vec![tid], "{g:?}");
        // Pending (SCHED_FIFO 1): it sleeps 5 s, so it cannot have run yet.
        let want = if g.pending.contains(&tid) {
            SCHED_FIFO
        } else {
            SCHED_DEADLINE
        };
        assert_eq!(policy_of(tid), Some(want));
        c.release(g.id).unwrap();
    }
    drop(c);
    drop(d);
    h.join().unwrap();
    live.assert_restored("after the client's own thread");
}

/// CPU `cpu`'s root-domain deadline bandwidth (`dl_bw->total_bw` of
/// /sys/kernel/debug/sched/debug, read in a private mount namespace), or
/// None without debugfs.
fn total_bw(cpu: u32) -> Option<u64> {
    let text = rtmgr_linux::Host::real().read_debugfs("sched/debug")?;
    let head = format!("dl_rq[{cpu}]:");
    let from = text.find(&head)?;
    text[from..]
        .lines()
        .find(|l| l.contains("dl_bw->total_bw"))?
        .split(':')
        .nth(1)?
        .trim()
        .parse()
        .ok()
}

/// A hard grant of a thread asleep on its NRT CPU, then of one stopped
/// there: the kernel holds the grant's bandwidth in the RT CPU's root
/// domain, as admission booked it, and none more in the NRT CPU's; after
/// the release it is back where it was.
#[test]
fn a_sleeping_or_stopped_thread_s_bandwidth_is_booked_on_its_rt_cpu() {
    let Some(live) = Live::new() else { return };
    if total_bw(live.rt_cpu).is_none() {
        eprintln!("skip: no debugfs sched/debug");
        return;
    }
    let Some(mut w) = waiters() else { return };
    let d = live.start(UNLIMITED);
    let pid = w.child.id();
    let (_, sleeper) = w
        .threads
        .iter()
        .find(|(n, _)| n == "nanosleep")
        .cloned()
        .unwrap();
    // 500 µs every 10 ms, as the kernel rounds it (BW_SHIFT 20).
    let bw = (500_000u64 << 20) / 10_000_000;
    let nrt = 0;
    for stopped in [false, true] {
        if stopped {
            rtmgr_sys::process::kill(pid as i32, libc::SIGSTOP).unwrap();
            eventually("stopped", || state_of(sleeper) == 'T');
        }
        let (rt0, nrt0) = (total_bw(live.rt_cpu).unwrap(), total_bw(nrt).unwrap());
        let (id, pending) = rust_client(&live, pid, sleeper, "rt0").unwrap();
        let (rt1, nrt1) = (total_bw(live.rt_cpu).unwrap(), total_bw(nrt).unwrap());
        assert_eq!(nrt1, nrt0, "stopped {stopped}: the NRT CPUs' root domain");
        if pending.contains(&sleeper) {
            // SCHED_FIFO 1 for now: no deadline bandwidth anywhere yet;
            // the RT CPU's root domain holds it once the thread ran there.
            assert_eq!(rt1, rt0, "stopped {stopped}, pending");
            if !stopped {
                assert_policy(sleeper, SCHED_DEADLINE, &pending, "pending sleeper");
                assert_eq!(total_bw(live.rt_cpu).unwrap(), rt0 + bw, "once it ran");
            }
        } else {
            assert_eq!(rt1, rt0 + bw, "stopped {stopped}: the RT CPU's root domain");
            assert!(matches!(state_of(sleeper), 'S' | 'T'), "it has not run");
        }
        release(&live, id);
        eventually("the bandwidth given back", || {
            total_bw(live.rt_cpu) == Some(rt0)
        });
    }
    rtmgr_sys::process::kill(pid as i32, libc::SIGCONT).unwrap();
    w.child.kill().unwrap();
    w.child.wait().unwrap();
    assert!(d.stop().success());
    live.assert_restored("after the bandwidth checks");
}
