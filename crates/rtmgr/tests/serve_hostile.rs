//! The daemon under hostile input and unprivileged clients (root, live):
//! at least 500 malformed or hostile messages each get a refusal or an
//! error, the daemon stays up and nothing changes; a client running as
//! `nobody` never gets more than its [[client]] rule allows.

mod serve_common;

use rtmgr_core::protocol::{parse_response, Reply, MAX_MESSAGE};
use rtmgr_sys::sched::{SCHED_FIFO, SCHED_OTHER};
use serve_common::*;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;

/// Send one line on a connection, read one answer.
fn ask(conn: &mut (UnixStream, BufReader<UnixStream>), line: &[u8]) -> Reply {
    conn.0.write_all(line).unwrap();
    conn.0.write_all(b"\n").unwrap();
    let mut resp = String::new();
    conn.1.read_line(&mut resp).unwrap();
    parse_response(resp.as_bytes())
        .unwrap_or_else(|e| panic!("{e}: {resp:?}"))
        .reply
}

fn connect(live: &Live) -> (UnixStream, BufReader<UnixStream>) {
    let s = UnixStream::connect(live.socket()).unwrap();
    let r = BufReader::new(s.try_clone().unwrap());
    (s, r)
}

fn hostile_lines(me: u32, other_pid: u32) -> Vec<(String, Vec<u8>)> {
    let valid = format!(
        r#"{{"v":1,"op":"reserve","period_ns":10000000,"budget_ns":1000000,"threads":[{me}]}}"#
    );
    let mut v: Vec<(String, Vec<u8>)> = Vec::new();
    for cut in 1..valid.len() - 1 {
        v.push(("truncated".into(), valid.as_bytes()[..cut].to_vec()));
    }
    let wrong = [
        r#""4ms""#,
        "-1",
        "1.5",
        "[1]",
        "null",
        "{}",
        "true",
        "18446744073709551616",
    ];
    for w in wrong {
        for key in [
            "period_ns",
            "budget_ns",
            "deadline_ns",
            "cpu",
            "threads",
            "class",
            "irq",
        ] {
            if w == "null" && matches!(key, "deadline_ns" | "cpu" | "irq") {
                continue; // null = absent for an optional field: a valid request
            }
            v.push((
                "wrong type".into(),
                format!(r#"{{"v":1,"op":"reserve","period_ns":10000000,"budget_ns":1000000,"{key}":{w}}}"#).into_bytes(),
            ));
        }
    }
    for ver in [
        "0",
        "3",
        "999",
        r#""1""#,
        "null",
        "-1",
        "1.5",
        "[1]",
        "{}",
        "4294967297",
    ] {
        for op in ["list", "status", "reserve", "release"] {
            v.push((
                "version".into(),
                format!(r#"{{"v":{ver},"op":"{op}"}}"#).into_bytes(),
            ));
        }
    }
    for op in [
        "",
        "LIST",
        "format",
        "reserve ",
        "\u{202e}list",
        "shutdown",
        "grant",
        "exec",
    ] {
        for extra in ["", r#","id":1"#, r#","x":[1,2,3]"#] {
            v.push((
                "unknown op".into(),
                format!(r#"{{"v":1,"op":"{op}"{extra}}}"#).into_bytes(),
            ));
        }
    }
    let invalid = [
        r#""period_ns":10000000,"budget_ns":20000000"#,
        r#""period_ns":10000000,"budget_ns":1000000,"deadline_ns":20000000"#,
        r#""period_ns":0,"budget_ns":0"#,
        r#""period_ns":10000000,"budget_ns":1"#,
        r#""period_ns":100000000000,"budget_ns":1000000"#,
        r#""period_ns":10000000,"budget_ns":1000000,"class":"linux""#,
        r#""period_ns":10000000,"budget_ns":1000000,"class":"rt1:99""#,
        r#""period_ns":10000000,"budget_ns":1000000,"class":"rt7""#,
        r#""period_ns":10000000,"budget_ns":1000000,"threads":[1,1]"#,
        r#""period_ns":10000000,"budget_ns":1000000,"threads":[0]"#,
        r#""period_ns":10000000,"budget_ns":1000000,"name":"a\u0007b""#,
        r#""period_ns":10000000,"budget_ns":1000000,"cache_share":7"#,
    ];
    for (i, f) in invalid.iter().enumerate() {
        for _ in 0..4 {
            v.push((
                format!("invalid {i}"),
                format!(r#"{{"v":1,"op":"reserve",{f}}}"#).into_bytes(),
            ));
        }
    }
    let many: Vec<String> = (1..=65).map(|t| t.to_string()).collect();
    v.push((
        "65 threads".into(),
        format!(
            r#"{{"v":1,"op":"reserve","period_ns":10000000,"budget_ns":1000000,"threads":[{}]}}"#,
            many.join(",")
        )
        .into_bytes(),
    ));
    for f in [
        r#""memlock_bytes":1152921504606846976"#,
        r#""io_class":"fast""#,
        r#""cache_share":1.5"#,
    ] {
        for _ in 0..10 {
            v.push(("more than the machine has".into(), format!(r#"{{"v":1,"op":"reserve","period_ns":10000000,"budget_ns":1000000,"threads":[{me}],{f}}}"#).into_bytes()));
        }
    }
    // Version 1 does not carry a target process; version 2 does, and a
    // process that is not there is an error.
    for (ver, pid) in [(1, other_pid), (2, 4_000_000), (2, 0)] {
        for _ in 0..5 {
            v.push(("a pid".into(), format!(r#"{{"v":{ver},"op":"reserve","period_ns":10000000,"budget_ns":1000000,"class":"rt1:5","pid":{pid}}}"#).into_bytes()));
        }
    }
    for tid in [1, other_pid, 4_000_000, i32::MAX as u32] {
        for _ in 0..10 {
            v.push(("another's thread".into(), format!(r#"{{"v":1,"op":"reserve","period_ns":10000000,"budget_ns":1000000,"threads":[{tid}]}}"#).into_bytes()));
        }
    }
    for i in 0..20u8 {
        v.push(("garbage".into(), vec![0xff, i, 0xfe, b'{', 0x00, b'}']));
    }
    for i in 0..20 {
        v.push((
            "not an object".into(),
            format!("[{i}, \"x\", null]").into_bytes(),
        ));
    }
    v
}

#[test]
fn hostile_input_gets_refusals_or_errors_and_changes_nothing() {
    let Some(live) = Live::new() else { return };
    let d = live.start("");
    let mut kids = Children::default();
    let other = kids.add(Command::new("sleep").arg("30").spawn().unwrap());
    let me = rtmgr_sys::sched::gettid();
    let lines = hostile_lines(me, other);
    let mut conn = connect(&live);
    let (mut refused, mut errors) = (0, 0);
    for (what, line) in &lines {
        match ask(&mut conn, line) {
            Reply::Refused { .. } => refused += 1,
            Reply::Error { .. } => errors += 1,
            r => panic!("{what}: {:?} got {r:?}", String::from_utf8_lossy(line)),
        }
    }
    // A flood of releases of nothing: errors, then the rate limit.
    let mut rate = 0;
    for i in 0..150 {
        match ask(
            &mut conn,
            format!(r#"{{"v":1,"op":"release","id":{}}}"#, 1_000_000 + i).as_bytes(),
        ) {
            Reply::Error { .. } => errors += 1,
            Reply::Refused { .. } => {
                refused += 1;
                rate += 1
            }
            r => panic!("flood: {r:?}"),
        }
    }
    assert!(rate > 0, "the flood met the rate limit");
    // Oversized lines: an error, then the connection closes.
    for _ in 0..10 {
        let mut c = connect(&live);
        let big = vec![b'a'; MAX_MESSAGE + 10];
        let _ = c.0.write_all(&big);
        let mut resp = String::new();
        c.1.read_line(&mut resp).unwrap();
        assert!(matches!(
            parse_response(resp.as_bytes()).unwrap().reply,
            Reply::Error { .. }
        ));
        errors += 1;
    }
    // Truncated at end of stream: answered, then closed.
    for cut in [5, 20, 40] {
        let mut c = connect(&live);
        c.0.write_all(&br#"{"v":1,"op":"reserve","period_ns":10000000"#[..cut])
            .unwrap();
        c.0.shutdown(std::net::Shutdown::Write).unwrap();
        let mut resp = String::new();
        c.1.read_line(&mut resp).unwrap();
        assert!(matches!(
            parse_response(resp.as_bytes()).unwrap().reply,
            Reply::Error { .. }
        ));
        errors += 1;
    }
    // Threads that exit while they are being granted.
    let mut c = live.client();
    for i in 0..20u64 {
        let (h, tid) = thread_exiting_after(std::time::Duration::from_micros(i * 100));
        let mut r = rtmgr_rt::client::ReserveRequest::new(10_000_000, 1_000_000);
        r.threads = vec![tid];
        r.class = "rt1:5".into();
        let _ = c.reserve(r);
        h.join().unwrap();
    }
    eventually("grants of exited threads revoked", || {
        listed(&mut c).is_empty()
    });
    let total = lines.len() + 150 + 10 + 3;
    eprintln!("hostile messages: {total} ({refused} refused, {errors} errors, {rate} rate-limited) + 20 threads exiting mid-grant; daemon up, nothing granted");
    assert!(total >= 500, "{total}");
    let status = c.status().unwrap();
    assert_eq!(status.reservations, 0);
    assert_eq!(policy_of(me), Some(SCHED_OTHER));
    drop(kids);
    assert!(d.stop().success());
    live.assert_restored("after hostile input");
}

fn has_cap_sys_resource() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|h| u64::from_str_radix(h.trim(), 16).ok())
        .unwrap_or(0);
    eff & (1 << 24) != 0
}

fn as_nobody(live: &Live, args: &[&str]) -> std::process::Child {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", BIN])
        .args(args)
        .arg("--socket")
        .arg(live.socket())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn reserve_as_nobody(live: &Live, class: &str, budget: &str) -> std::process::Child {
    Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            BIN,
            "reserve",
            "--socket",
        ])
        .arg(live.socket())
        .args([
            "--period", "10ms", "--budget", budget, "--class", class, "--", "sleep", "30",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

fn stderr_of(c: std::process::Child) -> (Option<i32>, String) {
    let o = c.wait_with_output().unwrap();
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into())
}

#[test]
fn an_unprivileged_client_never_exceeds_its_policy() {
    let Some(live) = Live::new() else { return };
    let d = live.start(
        "[[client]]\nusers = [\"root\"]\n[[client]]\nusers = [\"nobody\"]\nmax_utilisation = 0.3\nmax_priority = 20\nhard = false\nrttime_us = 100000\nrequests_per_burst = 8\nburst_s = 60\n",
    );
    let (code, err) = stderr_of(reserve_as_nobody(&live, "rt0", "1ms"));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("hard (SCHED_DEADLINE) reservations are not allowed"),
        "{err}"
    );
    let (code, err) = stderr_of(reserve_as_nobody(&live, "rt1:30", "1ms"));
    assert!(code == Some(1) && err.contains("priority 30 > 20"), "{err}");
    let mut kids = Children::default();
    let ok = kids.add(reserve_as_nobody(&live, "rt1:10", "2ms"));
    let mut c = live.client();
    eventually("nobody's grant", || listed(&mut c).len() == 1);
    let r = listed(&mut c).remove(0);
    assert_eq!((r.uid, r.class.as_str()), (65534, "rt1:10"));
    assert_eq!(policy_of(ok), Some(SCHED_FIFO));
    let limits = std::fs::read_to_string(format!("/proc/{ok}/limits")).unwrap();
    let rttime = limits
        .lines()
        .find(|l| l.starts_with("Max realtime timeout"))
        .unwrap();
    if has_cap_sys_resource() {
        assert!(rttime.contains("100000"), "{rttime}");
        assert_eq!(r.rttime_us, 100_000);
    } else {
        // prlimit on another user's process needs CAP_SYS_RESOURCE: the
        // grant says it set no RLIMIT_RTTIME.
        eprintln!("note: no CAP_SYS_RESOURCE here: RLIMIT_RTTIME not set ({rttime})");
        assert_eq!(r.rttime_us, 0);
    }
    // Over the user's utilisation: refused with the numbers.
    let (code, err) = stderr_of(reserve_as_nobody(&live, "rt1:10", "2ms"));
    assert!(
        code == Some(1) && err.contains("0.40 > 0.30 allowed per user"),
        "{err}"
    );
    // Root's reservation cannot be released by nobody.
    kids.add(live.reserve_child(
        &["--period", "20ms", "--budget", "1ms", "--class", "rt1:5"],
        &["sleep", "30"],
    ));
    eventually("root's grant", || listed(&mut c).len() == 2);
    let root_id = listed(&mut c).iter().find(|r| r.uid == 0).unwrap().id;
    let (code, err) = stderr_of(as_nobody(&live, &["release", &root_id.to_string()]));
    assert!(code == Some(1) && err.contains("belongs to uid 0"), "{err}");
    // nobody sees only its own reservations.
    let o = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            BIN,
            "reservations",
            "--json",
            "--socket",
        ])
        .arg(live.socket())
        .output()
        .unwrap();
    let seen: Vec<serde_json::Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(seen.len(), 1);
    // It cannot raise its own priority past the grant (RLIMIT_RTPRIO).
    let o = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "chrt",
            "-f",
            "-p",
            "50",
        ])
        .arg(ok.to_string())
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert_eq!(policy_of(ok), Some(SCHED_FIFO));
    assert_eq!(rtmgr_sys::sched::get_attr(ok).unwrap().priority, 10);
    // The burst limit: 8 requests per minute, counted from the first.
    let mut rate_refused = 0;
    for _ in 0..6 {
        let (code, err) = stderr_of(as_nobody(&live, &["release", "999999"]));
        if code == Some(1) && err.contains("requests in 60 s") {
            rate_refused += 1;
        }
    }
    assert!(rate_refused > 0, "the rate limit applies to nobody");
    eprintln!("unprivileged (nobody): hard refused, priority 30 refused, U 0.4 > 0.3 refused, release of root's refused, chrt to 50 refused, rate-limited {rate_refused}/6; granted SCHED_FIFO 10 with RLIMIT_RTTIME {} µs (0: not set)", r.rttime_us);
    drop(kids);
    assert!(d.stop().success());
    live.assert_restored("after the unprivileged client");
}
