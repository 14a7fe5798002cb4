//! `rtmgr evaluate --ablate` (issue 14) on the real machine (root only, a few
//! seconds): stock and every isolation step measured, the report
//! `rtmgr.ablation/1`, the gates' exit code (3 when one fails: here p99.9,
//! which a short run cannot support), the machine restored. Gates without
//! --ablate are bad input. No timing is asserted.

mod measure_common;
use measure_common::*;

#[test]
fn gates_need_ablate() {
    let tmp = tempdir();
    let out = run(tmp.path(), &["evaluate", "--max-p99.9", "100us"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn short_ablation_reports_every_step_and_gates_exit_3() {
    let Some(_live) = live_ready("short_ablation_reports_every_step_and_gates_exit_3") else {
        return;
    };
    if std::fs::read_to_string("/sys/devices/system/cpu/online").map_or(true, |s| s.trim() == "0") {
        eprintln!("skip: --ablate needs 2 CPUs");
        return;
    }
    let tmp = tempdir();
    let out = run(
        tmp.path(),
        &[
            "evaluate",
            "--ablate",
            "--duration",
            "4s",
            "--rounds",
            "1",
            "--interval",
            "1ms",
            "--load-engine",
            "builtin",
            "--max-latency",
            "10s",
            "--max-p99.9",
            "10s",
            "--out",
            "ab",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = json(&tmp.path().join("ab/report.json"));
    assert_eq!(r["schema"], "rtmgr.ablation/1");
    assert_eq!(r["partial"], false);
    let names: Vec<&str> = r["configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names[0], "stock");
    assert_eq!(names[1], "cpusets");
    assert!(names.iter().any(|n| n.starts_with("full (")), "{names:?}");
    assert_eq!(*names.last().unwrap(), "+balancer");
    for (i, c) in r["configs"].as_array().unwrap().iter().enumerate() {
        assert!(c["result"]["summary"]["n"].as_u64().unwrap() > 0, "{c}");
        // The round's histogram, kept for the intervals; one round gives none, and says so.
        assert_eq!(c["rounds"].as_array().unwrap().len(), 1, "{}", c["name"]);
        if i > 0 {
            let why = c["change"]["none"].as_str().unwrap_or_default();
            assert!(why.starts_with("not enough rounds"), "{}", c["change"]);
        }
    }
    let gates = r["gates"].as_array().unwrap();
    assert_eq!(gates.len(), 2);
    assert_eq!(gates[0]["what"], "p99.9");
    assert_eq!(gates[0]["passed"], false);
    assert_eq!(gates[1]["what"], "max");
    assert_eq!(gates[1]["passed"], true);
    assert_machine_restored();
}
