//! Issue 27 item 3: a client in a container. `unshare --pid --fork
//! --mount-proc` runs deploy/containers/rt_worker.py, whose worker thread
//! names itself by the thread id it sees there (2): the daemon translates
//! it through NSpid and grants that thread (DROPS "Taming Linux" §4.1:
//! resources on request); also with the socket bind-mounted elsewhere in a
//! mount namespace of its own, as a container has it. With `--user` too, run as uid 65534 and mapped to
//! root inside: the daemon's `[[client]]` rule for uid 65534 applies (the
//! kernel's peer credentials are the daemon's namespace's). Real Kubernetes
//! and podman are not on the test machine: docs/containers.md says what that
//! leaves untested.

mod serve_common;

use serde_json::Value;
use serve_common::*;
use std::process::Command;

const CLIENTS: &str =
    "[[client]]\nusers = [\"root\"]\n[[client]]\nusers = [\"65534\"]\nmax_priority = 40\n";

fn worker() -> String {
    concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../deploy/containers/rt_worker.py"
    )
    .into()
}

/// Run the worker through `prefix` (unshare …); its JSON line, or None
/// (with the reason printed) when this kernel does not let it start.
fn run_worker(live: &Live, prefix: &[&str]) -> Option<Value> {
    let sock = live.socket().display().to_string();
    let worker = worker();
    let mut args: Vec<&str> = prefix.to_vec();
    args.extend(["/usr/bin/python3", &worker, "--socket", &sock]);
    run(&args)
}

/// As a container sees the socket: bind-mounted elsewhere, in a mount
/// namespace of its own (and a PID namespace).
fn run_worker_bind_mounted(live: &Live) -> Option<Value> {
    let inside = live.dir.path().join("container-rtmgr.sock");
    std::fs::write(&inside, "").unwrap();
    let script = format!(
        "mount --bind {} {} && exec /usr/bin/python3 {} --socket {} \"$@\"",
        live.socket().display(),
        inside.display(),
        worker(),
        inside.display()
    );
    let args = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--pid",
        "--fork",
        "--mount-proc",
        "sh",
        "-c",
        &script,
        "worker",
    ];
    run(&args)
}

fn run(args: &[&str]) -> Option<Value> {
    let o = Command::new(args[0])
        .args(&args[1..])
        .args(["--seconds", "0.3", "--class", "rt1:20"])
        .output()
        .unwrap();
    let prefix = args;
    let err = String::from_utf8_lossy(&o.stderr);
    if err.contains("unshare failed")
        || err.contains("Operation not permitted") && o.stdout.is_empty()
    {
        eprintln!("skip: this kernel refuses {prefix:?}: {err}");
        return None;
    }
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "worker failed: {out}{err}");
    Some(serde_json::from_str(out.trim()).unwrap())
}

fn check_granted(v: &Value, uid: u64) {
    let seen = v["tid_seen"].as_u64().unwrap();
    assert_eq!(
        v["pid_seen"], 1,
        "the worker is in its own PID namespace: {v}"
    );
    let r = &v["answer"]["reservation"];
    assert_eq!(v["answer"]["result"], "granted", "{v}");
    assert_eq!(r["uid"], uid, "{v}");
    let granted = r["threads"][0].as_u64().unwrap();
    assert_ne!(
        granted, seen,
        "the daemon's id of the worker, not the namespace's: {v}"
    );
    assert!(granted > 1, "{v}");
    assert_eq!(v["policy"], 1, "SCHED_FIFO while granted: {v}");
    assert_eq!(v["release"]["result"], "released", "{v}");
}

#[test]
fn a_client_in_a_pid_namespace_is_granted_its_named_worker_thread() {
    let Some(live) = Live::new() else { return };
    if !std::path::Path::new("/usr/bin/python3").exists() {
        eprintln!("skip: no /usr/bin/python3");
        return;
    }
    let d = live.start(CLIENTS);
    let Some(v) = run_worker(&live, &["unshare", "--pid", "--fork", "--mount-proc"]) else {
        return;
    };
    check_granted(&v, 0);
    let v = run_worker_bind_mounted(&live).expect("unshare --mount");
    check_granted(&v, 0);
    let user = [
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "unshare",
        "--user",
        "--map-root-user",
        "--pid",
        "--fork",
        "--mount-proc",
    ];
    if let Some(v) = run_worker(&live, &user) {
        check_granted(&v, 65534);
    }
    let mut c = live.client();
    assert!(listed(&mut c).is_empty());
    let st = d.stop();
    assert!(st.success(), "daemon exit {st}");
    live.assert_restored("after the container clients");
}
