//! `rtmgr balance` through the binary (root only, machine lock, private
//! journal): two busy processes on the one NRT CPU, the balancer lends them the
//! RT CPU, SIGTERM stops it, and every affinity, cpuset and policy is as
//! before; or `kill -9` stops it and `rtmgr partition reset` gives them back.

mod serve_common;

use rtmgr_linux::cgroup;
use rtmgr_linux::lock::{MachineLock, DEFAULT_LOCK_PATH};
use rtmgr_linux::{cpus, partition, Host};
use serve_common::{busy, end_busy, BIN};
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A private journal on the real machine under the machine lock (root only).
struct Machine {
    host: Host,
    layout: cgroup::Layout,
    rt: u32,
    journal: std::path::PathBuf,
    _dir: tempfile::TempDir,
    _lock: MachineLock,
}

impl Machine {
    /// None (with the reason printed) where the test cannot run.
    fn get() -> Option<Machine> {
        if !rtmgr_linux::sched::is_root() {
            eprintln!("skip: needs root");
            return None;
        }
        let host = Host::real();
        let Ok(layout) = partition::layout(&host) else {
            eprintln!("skip: no cpuset controller");
            return None;
        };
        let online = cpus::online(&host).unwrap();
        if online.len() < 2 {
            eprintln!("skip: needs 2 CPUs");
            return None;
        }
        let rt = online.iter().last().unwrap();
        let lock = MachineLock::acquire(Path::new(DEFAULT_LOCK_PATH)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        Some(Machine {
            host,
            layout,
            rt,
            journal: dir.path().join("journal"),
            _dir: dir,
            _lock: lock,
        })
    }

    fn rtmgr(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .arg("--journal")
            .arg(&self.journal)
            .env("RTMGR_LOCK_HELD", "1");
        c
    }

    fn apply(&self) {
        let rt = self.rt.to_string();
        assert!(succeeds(self.rtmgr(&[
            "partition",
            "apply",
            "--rt-cpus",
            &rt
        ])));
    }

    fn reset(&self) -> bool {
        succeeds(self.rtmgr(&["partition", "reset"]))
    }

    /// (tid, affinity, cpuset, policy) of each task.
    fn state(&self, tids: &[u32]) -> Vec<(u32, String, Option<String>, String)> {
        let h = &self.host;
        (tids.iter())
            .map(|&t| {
                let aff = h.get_affinity(t).map(|a| a.to_list()).unwrap_or_default();
                let policy = h.get_policy(t).map(|p| format!("{p:?}"));
                let cg = cgroup::task_cgroup(h, &self.layout, t);
                (t, aff, cg, policy.unwrap_or_default())
            })
            .collect()
    }

    /// Start `rtmgr balance` and wait (≤ 8 s) until one of `tids` is a guest
    /// on the RT CPU; whether one was.
    fn balance_until_lent(&self, tids: &[u32]) -> (Child, bool) {
        let args = ["balance", "--no-guard", "--ignore-host-test"];
        let bal = (self.rtmgr(&args).args(["--duration-s", "30"]).spawn()).unwrap();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(8) {
            let pinned = |&t: &u32| {
                let aff = self.host.get_affinity(t);
                aff.is_ok_and(|s| s.len() == 1 && s.contains(self.rt))
            };
            if tids.iter().any(pinned) {
                return (bal, true);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        (bal, false)
    }
}

/// Run a command: did it succeed?
fn succeeds(mut c: Command) -> bool {
    c.status().is_ok_and(|s| s.success())
}

#[test]
fn sigterm_restores_every_affinity() {
    let Some(m) = Machine::get() else {
        return;
    };
    m.apply();
    let (a, ta) = busy();
    let (b, tb) = busy();
    let before = m.state(&[ta, tb]);
    let (bal, lent) = m.balance_until_lent(&[ta, tb]);
    // Stop it the way a service manager would.
    let _ = Command::new("kill")
        .args(["-TERM", &bal.id().to_string()])
        .status();
    let st = wait(bal);
    let after = m.state(&[ta, tb]);
    end_busy(vec![a, b], &[ta, tb]);
    m.reset();
    assert!(lent, "the RT CPU was never lent to a busy task");
    assert!(st.success(), "rtmgr balance exited with {st}");
    assert_eq!(
        before, after,
        "affinity, cpuset or policy not restored after SIGTERM"
    );
}

/// Issue 29 item 3: after a `kill -9` of `rtmgr balance` with a guest lent,
/// `rtmgr partition reset` gives the guest back its affinity, cpuset and
/// policy (the lend was journalled before it was made).
#[test]
fn reset_after_kill_9_gives_the_guests_back() {
    let Some(m) = Machine::get() else {
        return;
    };
    // Started before the partition: reset gives them what they had then.
    let (a, ta) = busy();
    let (b, tb) = busy();
    let before = m.state(&[ta, tb]);
    m.apply();
    let (mut bal, lent) = m.balance_until_lent(&[ta, tb]);
    let _ = bal.kill(); // SIGKILL
    wait(bal);
    let left = m.state(&[ta, tb]);
    let reset = m.reset();
    let after = m.state(&[ta, tb]);
    end_busy(vec![a, b], &[ta, tb]);
    assert!(lent, "the RT CPU was never lent to a busy task");
    let idle = left
        .iter()
        .any(|(_, aff, _, pol)| *aff == m.rt.to_string() && pol == "Idle");
    assert!(
        idle,
        "no guest left lent at SCHED_IDLE by the kill: {left:?}"
    );
    assert!(reset, "rtmgr partition reset failed");
    assert_eq!(before, after, "not given back by partition reset");
}

fn wait(mut c: Child) -> std::process::ExitStatus {
    c.wait().unwrap()
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
