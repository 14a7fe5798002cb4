//! `--trace` end to end (root only): a traced latency run reports its tail's
//! causes; a traced run killed with SIGKILL leaves its tracefs instance behind
//! and `rtmgr partition reset` removes it.

mod measure_common;
use measure_common::*;
use std::time::{Duration, Instant};

fn last_cpu() -> String {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| s.trim().parse::<rtmgr_core::CpuSet>().ok())
        .and_then(|c| c.iter().last())
        .unwrap_or(0)
        .to_string()
}

fn lock() -> Option<rtmgr_linux::lock::MachineLock> {
    if !is_root() {
        eprintln!("skip: tracefs needs root");
        return None;
    }
    Some(
        rtmgr_linux::lock::MachineLock::acquire(std::path::Path::new(
            rtmgr_linux::lock::DEFAULT_LOCK_PATH,
        ))
        .unwrap(),
    )
}

#[test]
fn a_traced_run_reports_its_tail_causes() {
    let Some(_lock) = lock() else { return };
    let tmp = tempdir();
    let cpu = last_cpu();
    let out = run(
        tmp.path(),
        &[
            "measure",
            "latency",
            "--cpus",
            &cpu,
            "--interval",
            "1ms",
            "--duration",
            "1s",
            "--trace=1us",
            "--json",
            "r.json",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("tail causes:"), "{stdout}");
    let r = json(&tmp.path().join("r.json"));
    let t = &r["tail_causes"];
    assert_eq!(t["threshold_ns"], 1000);
    assert!(t["attributed"].as_u64().unwrap() > 0, "{t}");
    assert!(t["causes"].as_array().is_some_and(|c| !c.is_empty()), "{t}");
    assert_eq!(
        rtmgr_linux::trace::list_instances().unwrap(),
        Vec::<String>::new()
    );
}

#[test]
fn kill_9_leaves_an_instance_and_reset_removes_it() {
    let Some(_lock) = lock() else { return };
    let tmp = tempdir();
    let cpu = last_cpu();
    let mut child = spawn(
        tmp.path(),
        &[
            "measure",
            "latency",
            "--cpus",
            &cpu,
            "--duration",
            "30s",
            "--trace",
            "--json",
            "r.json",
        ],
    );
    let t0 = Instant::now();
    while rtmgr_linux::trace::list_instances().unwrap().is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no instance appeared"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = rtmgr_sys::process::kill(child.id() as i32, libc::SIGKILL);
    let _ = child.wait();
    let left = rtmgr_linux::trace::list_instances().unwrap();
    assert_eq!(left.len(), 1, "the killed run's instance: {left:?}");
    let journal = tmp.path().join("journal.jsonl");
    let out = run(
        tmp.path(),
        &["partition", "reset", "--journal", journal.to_str().unwrap()],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(&left[0]),
        "reset names what it removed"
    );
    assert_eq!(
        rtmgr_linux::trace::list_instances().unwrap(),
        Vec::<String>::new()
    );
}
