//! `rtmgr evaluate` on the real machine (root only, a few seconds): the report's
//! structure and counts under each load engine, the machine restored after a
//! normal run and after SIGINT, and the refusal when the user already applied
//! a partition.

mod measure_common;
use measure_common::*;
use std::time::Duration;

#[test]
fn short_evaluate_report_and_restore() {
    let Some(_live) = live_ready("short_evaluate_report_and_restore") else {
        return;
    };
    if !two_cpus("evaluate") {
        return;
    }
    // Both engines where stress-ng is installed; the built-in one everywhere.
    let mut engines = vec!["builtin"];
    if have("stress-ng") {
        engines.push("stress-ng");
    }
    for engine in engines {
        short_evaluate(engine);
    }
}

fn short_evaluate(engine: &str) {
    let tmp = tempdir();
    let out = run(
        tmp.path(),
        &[
            "evaluate",
            "--duration",
            "1600ms",
            "--rounds",
            "1",
            "--interval",
            "1ms",
            "--load-engine",
            engine,
            "--out",
            "ev",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("p99/stock") && stdout.contains("shield"),
        "{stdout}"
    );
    let r = json(&tmp.path().join("ev/report.json"));
    assert_eq!(r["kind"], "evaluate");
    assert_eq!(r["schema"], "rtmgr.report/3");
    assert_eq!(r["load_engine"], engine);
    assert_eq!(r["partial"], false);
    assert_eq!(r["rounds_done"], 1);
    let names: Vec<&str> = r["configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    // "Linux with preemption" runs only where the kernel can switch to it.
    let skipped = r["skipped"].as_array().cloned().unwrap_or_default();
    if skipped.is_empty() {
        assert_eq!(
            names,
            [
                "idle",
                "stock",
                "preempt",
                "shield",
                "idle-guests",
                "balanced",
                "shield-twin"
            ]
        );
    } else {
        assert!(
            skipped[0].as_str().unwrap().starts_with("preempt"),
            "{skipped:?}"
        );
        assert_eq!(
            names,
            [
                "idle",
                "stock",
                "shield",
                "idle-guests",
                "balanced",
                "shield-twin"
            ]
        );
    }
    assert!(r["rt_choice"]
        .as_str()
        .is_some_and(|w| w.contains("least unmovable work")));
    let per_segment = r["segment_ns"].as_u64().unwrap() / 1_000_000;
    for c in r["configs"].as_array().unwrap() {
        let n = check_result(&c["result"]);
        assert!(
            (per_segment - 20..=per_segment + 81).contains(&n),
            "{}: n = {n}",
            c["name"]
        );
        assert_eq!(c["segments"], 1);
        // The round's own figures, kept for the intervals.
        assert_eq!(c["rounds"].as_array().unwrap().len(), 1, "{}", c["name"]);
        assert_eq!(c["rounds"][0]["n"].as_u64(), Some(n), "{}", c["name"]);
        let loaded = c["name"] != "idle";
        assert_eq!(
            !c["throughput"].as_array().unwrap().is_empty(),
            loaded,
            "{}",
            c["name"]
        );
    }
    assert!(!r["verdicts"].as_array().unwrap().is_empty());
    // One round gives no interval, and the verdicts say why instead of claiming.
    assert_eq!(r["intervals"]["rounds"], 1);
    let verdicts = r["verdicts"].to_string();
    assert!(verdicts.contains("A/A control"), "{verdicts}");
    assert!(verdicts.contains("not enough rounds"), "{verdicts}");
    assert!(std::fs::read_to_string(tmp.path().join("ev/report.html"))
        .unwrap()
        .contains("<svg"));
    assert_machine_restored();
    assert!(
        processes_mentioning(tmp.path()).is_empty(),
        "load left behind"
    );
}

#[test]
fn sigint_resets_partition_and_writes_partial_report() {
    let Some(_live) = live_ready("sigint_resets_partition_and_writes_partial_report") else {
        return;
    };
    if !two_cpus("evaluate") {
        return;
    }
    let tmp = tempdir();
    // Round 1 reversed order is not used with one round: idle, stock, then the
    // partitioned ones; SIGINT lands while the partition is applied.
    let mut child = spawn(
        tmp.path(),
        &[
            "evaluate",
            "--duration",
            "8s",
            "--rounds",
            "1",
            "--out",
            "ev",
        ],
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !std::path::Path::new("/run/rtmgr/journal.jsonl").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "partition never applied"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(800));
    sigint(&child);
    assert_eq!(wait(&mut child, Duration::from_secs(60)), 130);
    let r = json(&tmp.path().join("ev/report.json"));
    assert_eq!(r["partial"], true);
    assert_eq!(r["rounds_done"], 0);
    assert!(check_result(&r["configs"][0]["result"]) > 0);
    assert_machine_restored();
    assert!(
        processes_mentioning(tmp.path()).is_empty(),
        "load left behind"
    );
}

#[test]
fn refuses_when_a_partition_is_applied() {
    let Some(_live) = live_ready("refuses_when_a_partition_is_applied") else {
        return;
    };
    if !two_cpus("evaluate") {
        return;
    }
    let tmp = tempdir();
    let ap = run(tmp.path(), &["partition", "apply", "--rt-cpus", "1"]);
    assert!(
        ap.status.success(),
        "{}",
        String::from_utf8_lossy(&ap.stderr)
    );
    let out = run(tmp.path(), &["evaluate", "--quick", "--out", "ev"]);
    let reset = run(tmp.path(), &["partition", "reset"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("already applied"));
    assert!(
        reset.status.success(),
        "{}",
        String::from_utf8_lossy(&reset.stderr)
    );
    assert!(!tmp.path().join("ev").exists());
    assert_machine_restored();
}
