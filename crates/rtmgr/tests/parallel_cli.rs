//! `rtmgr measure latency --parallel-sweep N` (McKenney Fig. 8, issue 14):
//! bad input exits 2 before anything runs; as root a tiny sweep gives one
//! level per task count in an `rtmgr.parallel/1` report with its plot. No
//! timing is asserted.

mod measure_common;
use measure_common::*;

#[test]
fn sweep_needs_loops_and_a_sane_count() {
    let tmp = tempdir();
    for args in [
        &["measure", "latency", "--parallel-sweep", "3"][..],
        &[
            "measure",
            "latency",
            "--parallel-sweep",
            "0",
            "--loops",
            "10",
        ][..],
        &[
            "measure",
            "latency",
            "--parallel-sweep",
            "2",
            "--parallel",
            "2",
            "--loops",
            "10",
        ][..],
    ] {
        assert_eq!(run(tmp.path(), args).status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn tiny_sweep_reports_each_level() {
    let Some(_live) = live_ready("tiny_sweep_reports_each_level") else {
        return;
    };
    let tmp = tempdir();
    let out = run(
        tmp.path(),
        &[
            "measure",
            "latency",
            "--parallel-sweep",
            "2",
            "--loops",
            "50",
            "--interval",
            "1ms",
            "--out",
            "p",
        ],
    );
    assert_succeeded(&out);
    let r = json(&tmp.path().join("p/report.json"));
    assert_eq!(r["schema"], "rtmgr.parallel/1");
    let levels = r["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 2);
    assert_eq!(levels[1]["tasks"], 2);
    assert_eq!(levels[1]["summary"]["n"], 100);
    assert!(tmp.path().join("p/parallel.svg").exists());
}
