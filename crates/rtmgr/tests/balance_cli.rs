//! `rtmgr balance` through the binary (root only, machine lock, private
//! journal): two busy processes on the one NRT CPU, the balancer lends them the
//! RT CPU, SIGTERM stops it, and every affinity and cpuset is as before.

use rtmgr_linux::cgroup;
use rtmgr_linux::lock::{MachineLock, DEFAULT_LOCK_PATH};
use rtmgr_linux::{cpus, partition, Host};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rtmgr");

/// The busy `sh` under a `timeout 20` (bounded whatever happens). The caller
/// kills and waits for the returned child.
#[allow(clippy::zombie_processes)]
fn busy() -> (Child, u32) {
    let mut child = Command::new("timeout")
        .args(["20", "sh", "-c", "while :; do :; done"])
        .spawn()
        .unwrap();
    let pid = child.id();
    let t0 = Instant::now();
    loop {
        let kids =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        if let Some(k) = kids.split_whitespace().next() {
            return (child, k.parse().unwrap());
        }
        if t0.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("busy child did not start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_restores_every_affinity() {
    if !rtmgr_linux::sched::is_root() {
        eprintln!("skip: needs root");
        return;
    }
    let host = Host::real();
    let Ok(layout) = partition::layout(&host) else {
        eprintln!("skip: no cpuset controller");
        return;
    };
    let online = cpus::online(&host).unwrap();
    if online.len() < 2 {
        eprintln!("skip: needs 2 CPUs");
        return;
    }
    let rt = online.iter().last().unwrap();
    let _lock = MachineLock::acquire(Path::new(DEFAULT_LOCK_PATH)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let rtmgr = |args: &[&str]| {
        let mut c = Command::new(BIN);
        c.args(args)
            .arg("--journal")
            .arg(&journal)
            .env("RTMGR_LOCK_HELD", "1");
        c
    };
    let ok = rtmgr(&["partition", "apply", "--rt-cpus", &rt.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
    let reset = || {
        let _ = rtmgr(&["partition", "reset"]).status();
    };
    let (mut a, ta) = busy();
    let (mut b, tb) = busy();
    let before: Vec<_> = [ta, tb]
        .iter()
        .map(|&t| {
            (
                t,
                host.get_affinity(t).unwrap(),
                cgroup::task_cgroup(&host, &layout, t),
            )
        })
        .collect();
    let mut bal = rtmgr(&[
        "balance",
        "--no-guard",
        "--ignore-host-test",
        "--duration-s",
        "30",
    ])
    .spawn()
    .unwrap();
    // Wait until one of them is a guest on the RT CPU.
    let t0 = Instant::now();
    let mut lent = false;
    while t0.elapsed() < Duration::from_secs(8) && !lent {
        lent = [ta, tb].iter().any(|&t| {
            host.get_affinity(t)
                .map(|s| s.len() == 1 && s.contains(rt))
                .unwrap_or(false)
        });
        std::thread::sleep(Duration::from_millis(50));
    }
    // Stop it the way a service manager would.
    let _ = Command::new("kill")
        .args(["-TERM", &bal.id().to_string()])
        .status();
    let st = bal.wait().unwrap();
    let after: Vec<_> = [ta, tb]
        .iter()
        .map(|&t| {
            (
                t,
                host.get_affinity(t).unwrap(),
                cgroup::task_cgroup(&host, &layout, t),
            )
        })
        .collect();
    for c in [&mut a, &mut b] {
        let _ = c.kill();
        let _ = c.wait();
    }
    for t in [ta, tb] {
        let _ = Command::new("kill")
            .args(["-KILL", &t.to_string()])
            .status();
    }
    reset();
    assert!(lent, "the RT CPU was never lent to a busy task");
    assert!(st.success(), "rtmgr balance exited with {st}");
    assert_eq!(
        before, after,
        "affinity or cpuset not restored after SIGTERM"
    );
}

/// Issue 20: a malformed balancer config gets one clear error, before any
/// change (no lock taken, no partition needed, so it runs unprivileged too).
#[test]
fn a_malformed_config_is_refused_with_one_error() {
    let dir = tempfile::tempdir().unwrap();
    for (text, says) in [
        ("[lending]\njudge_windows = 0\n", "judge_windows"),
        ("[lending]\nbogus = 1\n", "bogus"),
        ("kernel_share_max = 3.0\n", "kernel_share_max"),
        ("period = [", "balancer config"),
    ] {
        let path = dir.path().join("policy.toml");
        std::fs::write(&path, text).unwrap();
        let out = Command::new(BIN)
            .args(["balance", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{text:?}: {err}");
        assert!(err.contains(says), "{text:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one error line: {err}");
    }
    let out = Command::new(BIN)
        .args(["balance", "--config", "/nonexistent/policy.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
