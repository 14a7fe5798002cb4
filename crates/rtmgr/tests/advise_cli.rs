//! `rtmgr advise` (issue 14, McKenney Fig. 9) end to end: no root needed, no
//! machine change; the text and JSON answers, a workload file, `--from` a
//! cost report, and bad input exiting 2. No timing is asserted.

mod measure_common;
use measure_common::*;

fn advise(tmp: &std::path::Path, args: &[&str]) -> std::process::Output {
    let mut all = vec!["advise", "--steal-window", "50ms"];
    all.extend_from_slice(args);
    run(tmp, &all)
}

#[test]
fn mckenneys_example_is_real_time_and_throughput_only_is_real_fast() {
    let tmp = tempdir();
    let out = advise(
        tmp.path(),
        &["--work", "100us", "--deadline", "250us", "--memory", "1M"],
    );
    assert_succeeded(&out);
    let text = String::from_utf8_lossy(&out.stdout);
    // A VM with steal time measured may send it to real fast: both are honest answers.
    assert!(
        text.starts_with("REAL TIME") || text.starts_with("REAL FAST"),
        "{text}"
    );
    assert!(
        text.contains("[principle 3]") && text.contains("check: "),
        "{text}"
    );
    let out = advise(tmp.path(), &["--throughput-only", "--json"]);
    assert_succeeded(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "rtmgr.advice/1");
    assert_eq!(v["answer"], "real_fast");
    assert_eq!(v["decided_by"], 0);
    assert!(v["facts"]["mem_available_bytes"].as_u64().is_some());
}

#[test]
fn workload_file_and_bad_input() {
    let tmp = tempdir();
    let file = tmp.path().join("w.toml");
    std::fs::write(&file, "work_us = 200000\ndeadline_us = 1000000\n").unwrap();
    let out = advise(
        tmp.path(),
        &["--workload", file.to_str().unwrap(), "--json"],
    );
    assert_succeeded(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["answer"], "real_fast");
    assert_eq!(v["workload"]["work_us"], 200000.0);
    std::fs::write(&file, "work = 1\n").unwrap();
    for args in [
        &["--workload", file.to_str().unwrap()][..],
        &["--utilization", "1.5"][..],
        &["--memory", "2X"][..],
        &["--from", file.to_str().unwrap()][..],
        // Figs. 5-7 need an evaluate and a cost report.
        &["--curves", tmp.path().to_str().unwrap()][..],
    ] {
        assert_eq!(advise(tmp.path(), args).status.code(), Some(2), "{args:?}");
    }
}

#[test]
fn answers_from_a_cost_report() {
    let tmp = tempdir();
    let cost = serde_json::json!({
        "schema": "rtmgr.cost/1", "rtmgr_version": "0", "command": [], "started_unix_s": 0,
        "host": {"hostname": "h", "kernel": "k", "cpus_online": "0-1", "hypervisor": null},
        "partial": false, "partial_reason": null, "rt_cpus": "1", "nrt_cpus": "0",
        "rounds_planned": 3, "rounds_done": 3,
        "configs": [{"name": "stock", "description": "", "work_cpus": "0-1"},
                    {"name": "shield", "description": "", "work_cpus": "0"}],
        "skipped": [],
        "micro": [{"name": "null-syscall", "what": "", "unit": "ns", "better": "lower",
                   "per_config": [
                     {"config": "stock", "samples": [100.0], "stats": {"n": 1, "mean": 100.0, "sd": 0.0}, "slowdown": 1.0},
                     {"config": "shield", "samples": [300.0], "stats": {"n": 1, "mean": 300.0, "sd": 0.0}, "slowdown": 3.0}]}],
        "build": null, "sweep": null
    });
    let path = tmp.path().join("cost.json");
    std::fs::write(&path, cost.to_string()).unwrap();
    let out = advise(
        tmp.path(),
        &[
            "--from",
            path.to_str().unwrap(),
            "--kernel-share",
            "0.5",
            "--json",
        ],
    );
    assert_succeeded(&out);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let k = v["facts"]["cost"]["configs"][1]["kernel_slowdown"]
        .as_f64()
        .unwrap();
    assert!((k - 3.0).abs() < 1e-9, "{k}");
    let kernel = &v["reasons"][4];
    assert!(
        kernel["finding"].as_str().unwrap().contains("3.00x"),
        "{kernel}"
    );
    assert_eq!(kernel["source"]["kind"], "report");
}
