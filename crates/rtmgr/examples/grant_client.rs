//! A lean raw protocol client for `bench/grant-latency.sh` (issue 27, item 6;
//! DROPS §4.1: the manager answers requests): N processes, each one
//! connection, `reserve` then `release` in a closed loop, blocking in
//! recv() (or spinning with `--spin`). It spends a few µs of CPU per round
//! trip where the Python conformance client spends ~0.5 ms, so that with
//! 16 clients on one RT CPU the round trip times the daemon and the
//! kernel, not the clients queueing for that CPU. Standard library and
//! serde_json only; the protocol as docs/protocol.md gives it.
//!
//!   grant_client --socket S --clients N --requests R [--class rt0|rt1:20]
//!                [--period-ns P] [--budget-ns B] [--spin] [--op list] [--runq]
//!                [--pace-us U]
//!
//! Prints one JSON object: reserve_ns and release_ns (every sample, ns),
//! failures; with `--runq` also reserve_runq_ns and release_runq_ns, how
//! much of each round trip the client's own thread waited runnable for a
//! CPU (its schedstat run delay: the client's share, not the daemon's). With `--op list` each round trip is a `list` instead (two per
//! loop, timed as reserve and release): the same clients, socket and
//! daemon loop without a grant's kernel steps, the floor beside a cell.
//! With `--pace-us U` each client starts its k-th round trip U µs × k after
//! the common start (at once when it is late): concurrent programs that
//! each re-reserve every U µs, all in step (their requests arrive
//! together), instead of a closed loop that asks again as soon as it is
//! answered.
//!
//!   grant_client --socket S --bystander [--start-at NS]
//!
//! The bench's bystander instead: one connection asking `list` every 2 ms,
//! asleep in recv, until its stdin is closed (the bench runs it at
//! SCHED_FIFO 2). Prints list_ns, failures and fifo (its policy was
//! SCHED_FIFO): the Python bystander's figures for a few µs of CPU per
//! `list` instead of ~0.25 ms taken from the cell's clients on the NRT CPU.

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

struct Args {
    socket: String,
    clients: usize,
    requests: usize,
    class: String,
    period_ns: u64,
    budget_ns: u64,
    spin: bool,
    /// `list` round trips instead of grants.
    list: bool,
    /// Also report, per round trip, how long the client's own thread
    /// waited runnable for a CPU (its schedstat run delay).
    runq: bool,
    /// A child: start at this wall-clock time (ns since the epoch).
    start_at: Option<u128>,
    /// Start a round trip every this many µs (0: a closed loop).
    pace_us: u64,
    /// The bench's bystander: `list` every 2 ms until stdin closes.
    bystander: bool,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        socket: String::new(),
        clients: 1,
        requests: 50,
        class: "rt0".into(),
        period_ns: 10_000_000,
        budget_ns: 500_000,
        spin: false,
        list: false,
        runq: false,
        start_at: None,
        pace_us: 0,
        bystander: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        let num = |s: String| s.parse::<u64>().map_err(|e| format!("{k}: {e}"));
        match k.as_str() {
            "--socket" => a.socket = v()?,
            "--clients" => a.clients = num(v()?)? as usize,
            "--requests" => a.requests = num(v()?)? as usize,
            "--class" => a.class = v()?,
            "--period-ns" => a.period_ns = num(v()?)?,
            "--budget-ns" => a.budget_ns = num(v()?)?,
            "--spin" => a.spin = true,
            "--runq" => a.runq = true,
            "--bystander" => a.bystander = true,
            "--pace-us" => a.pace_us = num(v()?)?,
            "--op" => match v()?.as_str() {
                "list" => a.list = true,
                "reserve" => a.list = false,
                other => return Err(format!("--op is reserve or list, not {other}")),
            },
            "--start-at" => a.start_at = Some(u128::from(num(v()?)?)),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if a.socket.is_empty() || a.clients == 0 {
        return Err("--socket and --clients (≥ 1) are needed".into());
    }
    Ok(a)
}

/// One connection; answers read line by line.
struct Conn {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    spin: bool,
}

impl Conn {
    fn open(path: &str, spin: bool) -> std::io::Result<Conn> {
        let s = UnixStream::connect(path)?;
        s.set_nonblocking(spin)?;
        Ok(Conn {
            reader: BufReader::new(s.try_clone()?),
            writer: s,
            spin,
        })
    }

    /// Send a request; the answer and when it was read (before parsing).
    fn ask(&mut self, req: &Value) -> std::io::Result<(Value, Instant)> {
        let mut line = req.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes())?;
        let mut buf = String::new();
        loop {
            match self.reader.read_line(&mut buf) {
                Ok(0) => return Err(std::io::Error::other("the daemon closed the connection")),
                Ok(_) if buf.ends_with('\n') => break,
                Ok(_) => {}
                Err(e) if self.spin && e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        let read = Instant::now();
        Ok((
            serde_json::from_str(&buf).map_err(std::io::Error::other)?,
            read,
        ))
    }
}

fn now_epoch_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// This thread's time spent runnable but waiting for a CPU so far (ns),
/// from /proc/thread-self/schedstat (its second field); 0 when unreadable.
fn run_delay_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

/// One client process: `requests` round trips.
fn client(a: &Args) -> Value {
    let (mut reserve_ns, mut release_ns, mut failures) = (Vec::new(), Vec::new(), Vec::new());
    let (mut reserve_runq_ns, mut release_runq_ns) = (Vec::new(), Vec::new());
    let runq = |since: u64| if a.runq { run_delay_ns() - since } else { 0 };
    let runq_now = || if a.runq { run_delay_ns() } else { 0 };
    sleep_until_epoch(a.start_at);
    let started = Instant::now();
    let mut run = || -> std::io::Result<()> {
        let mut c = Conn::open(&a.socket, a.spin)?;
        for k in 0..a.requests {
            if a.pace_us > 0 {
                let due = started + Duration::from_micros(a.pace_us * k as u64);
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
            }
            if a.list {
                for times in [&mut reserve_ns, &mut release_ns] {
                    let t0 = Instant::now();
                    let (r, read) = c.ask(&json!({"v": 1, "op": "list"}))?;
                    match r["result"].as_str() {
                        Some("list") => times.push((read - t0).as_nanos() as u64),
                        _ => failures.push(r.to_string()),
                    }
                }
                continue;
            }
            let req = json!({"v": 1, "op": "reserve", "period_ns": a.period_ns,
                             "budget_ns": a.budget_ns, "class": a.class});
            let q0 = runq_now();
            let t0 = Instant::now();
            let (r, read) = c.ask(&req)?;
            let q1 = runq(q0);
            let Some(id) = r["reservation"]["id"].as_u64() else {
                failures.push(r.to_string());
                continue;
            };
            reserve_ns.push((read - t0).as_nanos() as u64);
            reserve_runq_ns.push(q1);
            let q2 = runq_now();
            let t2 = Instant::now();
            let (rr, read) = c.ask(&json!({"v": 1, "op": "release", "id": id}))?;
            let q3 = runq(q2);
            if rr["result"] == "released" {
                release_ns.push((read - t2).as_nanos() as u64);
                release_runq_ns.push(q3);
            } else {
                failures.push(format!("release: {rr}"));
            }
        }
        Ok(())
    };
    if let Err(e) = run() {
        failures.push(e.to_string());
    }
    // Its first round trip apart too: it includes what only a first grant
    // does (a new connection, the thread's first move), and clients started
    // together send theirs at once.
    let first: Vec<u64> = reserve_ns.first().copied().into_iter().collect();
    let mut out = json!({"reserve_ns": reserve_ns, "release_ns": release_ns, "failures": failures,
                         "reserve_first_ns": first});
    if a.runq {
        out["reserve_runq_ns"] = json!(reserve_runq_ns);
        out["release_runq_ns"] = json!(release_runq_ns);
    }
    out
}

/// Sleep until `start_at` (ns since the epoch), if given.
fn sleep_until_epoch(start_at: Option<u128>) {
    let wait = start_at.unwrap_or(0).saturating_sub(now_epoch_ns());
    std::thread::sleep(Duration::from_nanos(wait as u64));
}

/// Is this thread SCHED_FIFO (/proc/thread-self/stat, field 41)?
fn is_fifo() -> bool {
    std::fs::read_to_string("/proc/thread-self/stat")
        .ok()
        .and_then(|s| {
            let after_comm = &s[s.rfind(')')? + 2..];
            after_comm.split_whitespace().nth(38)?.parse::<u32>().ok()
        })
        == Some(1)
}

/// The bench's bystander: a timed `list` every 2 ms, until stdin closes.
fn bystander(a: &Args) -> Value {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = stop.clone();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read_to_end(&mut Vec::new());
        seen.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    let (mut list_ns, mut failures) = (Vec::new(), Vec::new());
    sleep_until_epoch(a.start_at);
    match Conn::open(&a.socket, false) {
        Ok(mut c) => {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(2));
                let t0 = Instant::now();
                match c.ask(&json!({"v": 1, "op": "list"})) {
                    Ok((r, read)) if r["result"] == "list" => {
                        list_ns.push((read - t0).as_nanos() as u64)
                    }
                    Ok((r, _)) => failures.push(format!("list: {r}")),
                    Err(e) => {
                        failures.push(format!("bystander: {e}"));
                        break;
                    }
                }
            }
        }
        Err(e) => failures.push(format!("bystander: {e}")),
    }
    json!({"list_ns": list_ns, "failures": failures, "fifo": is_fifo()})
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("grant_client: {e}");
            std::process::exit(2);
        }
    };
    if a.bystander {
        println!("{}", bystander(&a));
        return;
    }
    if a.start_at.is_some() {
        println!("{}", client(&a));
        return;
    }
    // The parent: N children started together, their lines merged.
    let per = a.requests.div_ceil(a.clients);
    let start_at = now_epoch_ns() + 200_000_000;
    let me = std::env::current_exe().expect("own path");
    let mut kids = Vec::new();
    for _ in 0..a.clients {
        let mut cmd = Command::new(&me);
        cmd.args(["--socket", &a.socket, "--clients", "1", "--class", &a.class])
            .args(["--requests", &per.to_string()])
            .args(["--period-ns", &a.period_ns.to_string()])
            .args(["--budget-ns", &a.budget_ns.to_string()])
            .args(["--start-at", &start_at.to_string()])
            .args(["--pace-us", &a.pace_us.to_string()])
            .stdout(Stdio::piped());
        if a.spin {
            cmd.arg("--spin");
        }
        if a.list {
            cmd.args(["--op", "list"]);
        }
        if a.runq {
            cmd.arg("--runq");
        }
        kids.push(cmd.spawn().expect("spawn a client"));
    }
    let keys = [
        "reserve_first_ns",
        "reserve_ns",
        "release_ns",
        "failures",
        "reserve_runq_ns",
        "release_runq_ns",
    ];
    let mut all =
        json!({"reserve_ns": [], "release_ns": [], "failures": [], "reserve_first_ns": []});
    if a.runq {
        all["reserve_runq_ns"] = json!([]);
        all["release_runq_ns"] = json!([]);
    }
    for mut k in kids {
        let mut out = String::new();
        let _ = k.stdout.take().map(|mut s| s.read_to_string(&mut out));
        let _ = k.wait();
        let one: Value = serde_json::from_str(out.trim()).unwrap_or_else(
            |_| json!({"failures": [format!("a client printed no result: {out:?}")]}),
        );
        // Indexing a missing key of a JSON object would insert a null.
        let present: Vec<&str> = keys.into_iter().filter(|k| all.get(*k).is_some()).collect();
        for key in present {
            if let (Some(dst), Some(src)) = (all[key].as_array_mut(), one[key].as_array()) {
                dst.extend(src.iter().cloned());
            }
        }
    }
    println!("{all}");
}
