//! `rtmgr top --once --json` against a live daemon (root, 2 CPUs; skipped
//! with the reason otherwise): its latency guard's samples on the RT CPU, a
//! reservation with its budget used, the daemon's counters; and without a
//! daemon, the partition in place. The time to an answer is printed, not
//! asserted (docs/top.md: startup under 0.5 s).

mod serve_common;

use serve_common::{eventually, Live, BIN};
use std::process::Command;
use std::time::Instant;

fn top_once(socket: &std::path::Path) -> serde_json::Value {
    let out = Command::new(BIN)
        .args(["top", "--once", "--json", "--interval", "200ms", "--socket"])
        .arg(socket)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn top_once_shows_the_daemons_guard_reservation_and_counters() {
    let Some(live) = Live::new() else { return };
    let daemon = live.start("balancer = true\n");
    let cpu = live.rt_cpu;
    let mut granted = live.reserve_child(
        &["--period", "10ms", "--budget", "1ms", "--name", "spin"],
        &["sh", "-c", "while :; do :; done"],
    );
    let mut snap = serde_json::Value::Null;
    eventually(
        "the guard's window and the reservation's budget in top",
        || {
            snap = top_once(&live.socket());
            let rt = &snap["rt"][0];
            rt["latency"]["samples"].as_u64().is_some_and(|n| n > 0)
                && snap["reservations"][0]["budget_used"].as_f64().is_some()
        },
    );
    assert_eq!(snap["schema"], "rtmgr.top/1", "{snap:#}");
    assert_eq!(snap["source"], "daemon");
    assert_eq!(snap["daemon"]["pid"], daemon.pid(), "{snap:#}");
    assert_eq!(snap["daemon"]["granted"], 1);
    assert_eq!(snap["rt"][0]["cpu"], cpu);
    assert!(snap["rt"][0]["steal_ticks"].is_u64(), "{snap:#}");
    let r = &snap["reservations"][0];
    assert_eq!(
        (r["name"].as_str(), r["cpu"].as_u64()),
        (Some("spin"), Some(u64::from(cpu)))
    );
    assert!(r["budget_used"].as_f64().unwrap() >= 0.0, "{snap:#}");
    assert!(snap["nrt"].as_array().is_some_and(|n| !n.is_empty()));
    let t0 = Instant::now();
    top_once(&live.socket());
    eprintln!(
        "top --once --json (200 ms between its two readings) answered in {:?}",
        t0.elapsed()
    );
    let _ = granted.kill();
    let _ = granted.wait();
    assert!(daemon.stop().success());
    // No daemon now: the partition in place (none) and every CPU as NRT.
    let snap = top_once(&live.socket());
    assert_eq!(snap["source"], "partition in place", "{snap:#}");
    assert!(snap.get("daemon").is_none() && snap["rt"].as_array().unwrap().is_empty());
    live.assert_restored("after SIGTERM");
}

/// `rtmgr partition reset` on drop, so a failed assertion leaves no partition.
struct Applied<'a>(&'a Live);

impl Drop for Applied<'_> {
    fn drop(&mut self) {
        let out = self.0.partition_reset();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn top_probe_measures_the_partition_in_place_and_names_its_priority() {
    let Some(live) = Live::new() else { return };
    let cpu = live.rt_cpu.to_string();
    std::fs::create_dir_all(live.state()).unwrap();
    let out = Command::new(BIN)
        .args(["partition", "apply", "--rt-cpus", &cpu, "--journal"])
        .arg(live.journal())
        .env("RTMGR_LOCK_HELD", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let applied = Applied(&live);
    let out = Command::new(BIN)
        .args([
            "top",
            "--once",
            "--json",
            "--interval",
            "300ms",
            "--probe",
            "--probe-priority",
            "90",
            "--journal",
        ])
        .arg(live.journal())
        .env("RTMGR_NO_DAEMON", "1")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let snap: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(snap["source"], "partition in place", "{snap:#}");
    assert_eq!(snap["probe"], "SCHED_FIFO 90, every 10 ms");
    assert_eq!(snap["rt"][0]["cpu"].as_u64(), Some(u64::from(live.rt_cpu)));
    assert!(
        snap["rt"][0]["latency"]["samples"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{snap:#}"
    );
    drop(applied);
    let _ = std::fs::remove_dir_all(live.state());
    live.assert_restored("after the probe and partition reset");
}
