//! `rtmgr measure resources`: bad input exits 2 before anything runs; a
//! short real run (root only) writes a report of the right structure and
//! counts (never its timings) and leaves no file behind in `--dir`.

mod measure_common;
use measure_common::*;

#[test]
fn bad_input_exits_2_and_a_short_run_reports_every_condition() {
    let tmp = tempdir();
    for args in [
        &["measure", "resources", "--rounds", "0"][..],
        &["measure", "resources", "--matrix", "3"],
        &["measure", "resources", "--cache-only", "--io-only"],
    ] {
        let out = run(tmp.path(), args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if !is_root() {
        eprintln!("skip: the real run needs root (SCHED_FIFO, the machine lock)");
        return;
    }
    let dir = tmp.path().join("io");
    std::fs::create_dir(&dir).unwrap();
    let json = tmp.path().join("r.json");
    let out = run(
        tmp.path(),
        &[
            "measure",
            "resources",
            "--rounds",
            "2",
            "--runs",
            "3",
            "--matrix",
            "16",
            "--dir",
            dir.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(r["schema"], "rtmgr.measure.resources/1");
    assert_eq!(r["cache"]["matrix_n"], 16);
    for part in ["cache", "io"] {
        for c in r[part]["conditions"].as_array().unwrap() {
            assert_eq!(c["n"], 6, "{part}: {c}");
        }
    }
    assert_eq!(r["io"]["conditions"].as_array().unwrap().len(), 3);
    assert_eq!(r["io"]["ratios"].as_array().unwrap().len(), 2);
    assert!(r["cache"]["partition"].as_str().unwrap().len() > 10);
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "files left in --dir"
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("beside thrasher / alone"));
}
