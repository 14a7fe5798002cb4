//! `rtmgr measure …`: bad input is refused with exit 2 before anything runs;
//! short real runs (root only) produce reports whose structure and counts are
//! right (never their latency values), and leave no load behind after a
//! normal run, an error, SIGINT, or (built-in loads) SIGKILL of rtmgr.

mod measure_common;
use measure_common::*;
use std::time::Duration;

#[test]
fn bad_input_exits_2() {
    let tmp = tempdir();
    for args in [
        &["measure", "latency", "--interval", "fast"][..],
        &["measure", "latency", "--load", "everything"],
        &["measure", "latency", "--cpus", "0-"],
        &["measure", "latency", "--policy", "edf", "--duration", "1s"],
        &["measure", "latency", "--parallel", "0"],
        &["measure", "exec", "--runs", "0"],
        &[
            "measure",
            "latency",
            "--load",
            "all",
            "--load-engine",
            "nope",
        ],
        &["evaluate", "--load-engine", "stressng"],
    ] {
        let out = run(tmp.path(), args);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if is_root() {
        let out = run(
            tmp.path(),
            &["measure", "latency", "--cpus", "4095", "--duration", "1s"],
        );
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("not online"));
        // stress-ng asked for where PATH has none: bad input, nothing started.
        let empty = tmp.path().join("empty-path");
        std::fs::create_dir(&empty).unwrap();
        let out = rtmgr(tmp.path())
            .env("PATH", &empty)
            .args(["measure", "latency", "--duration", "1s", "--load", "io"])
            .args(["--load-engine", "stress-ng"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("stress-ng not found in PATH"), "{err}");
    }
}

#[test]
fn latency_under_load_report_structure_and_counts() {
    let Some(_live) = live_ready("latency_under_load_report_structure_and_counts") else {
        return;
    };
    let tmp = tempdir();
    let out = run(
        tmp.path(),
        &[
            "measure",
            "latency",
            "--cpus",
            "0",
            "--interval",
            "1ms",
            "--duration",
            "1s",
            "--parallel",
            "2",
            "--load",
            "compute",
            "--json",
            "r.json",
            "--svg",
            "r.svg",
        ],
    );
    assert_succeeded(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("missed"));
    let r = json(&tmp.path().join("r.json"));
    assert_eq!(r["schema"], "rtmgr.report/3");
    assert_eq!(
        r["overall"]["summary"]["p50_ns"],
        r["overall"]["summary"]["percentiles"][0]["value_ns"]
    );
    assert_eq!(r["kind"], "latency");
    assert_eq!(r["partial"], false);
    let threads = r["threads"].as_array().unwrap();
    assert_eq!(threads.len(), 2);
    let mut total = 0;
    for t in threads {
        let n = t["summary"]["n"].as_u64().unwrap();
        // 1 s at 1 ms: every release up to the end is recorded, missed ones included.
        assert!((900..=1001).contains(&n), "n = {n}");
        total += n;
    }
    assert_eq!(check_result(&r["per_cpu"][0]), total);
    assert_eq!(check_result(&r["overall"]), total);
    assert!(!r["load"]["metrics"].as_array().unwrap().is_empty());
    assert_eq!(r["load"]["engine"], default_engine());
    assert_eq!(r["disturbance"]["interrupts"][0]["cpu"], 0);
    for f in ["r.svg", "r-percentiles.svg"] {
        assert!(std::fs::read_to_string(tmp.path().join(f))
            .unwrap()
            .starts_with("<svg"));
    }
    assert!(
        processes_mentioning(tmp.path()).is_empty(),
        "load left behind"
    );
}

#[test]
fn sigint_writes_partial_report_and_kills_the_load() {
    let Some(_live) = live_ready("sigint_writes_partial_report_and_kills_the_load") else {
        return;
    };
    let tmp = tempdir();
    let mut child = spawn_under_load(tmp.path(), &["--load", "network"]);
    std::thread::sleep(Duration::from_millis(1000));
    sigint(&child);
    let code = wait(&mut child, Duration::from_secs(30));
    assert_eq!(code, 130);
    let r = json(&tmp.path().join("r.json"));
    assert_eq!(r["partial"], true);
    assert!(check_result(&r["overall"]) > 0);
    assert!(
        processes_mentioning(tmp.path()).is_empty(),
        "load left behind"
    );
}

#[test]
fn error_after_load_start_leaves_no_load() {
    let Some(_live) = live_ready("error_after_load_start_leaves_no_load") else {
        return;
    };
    let tmp = tempdir();
    // SCHED_DEADLINE refuses a thread pinned to one CPU of a larger root
    // domain: the probe fails after the load has started.
    let out = run(
        tmp.path(),
        &[
            "measure",
            "latency",
            "--cpus",
            "0",
            "--policy",
            "deadline",
            "--duration",
            "1s",
            "--load",
            "compute",
        ],
    );
    if out.status.success() {
        eprintln!("skip: this kernel accepted a pinned SCHED_DEADLINE thread");
    } else {
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert!(
        processes_mentioning(tmp.path()).is_empty(),
        "load left behind"
    );
}

#[test]
fn exec_and_periodicity_counts() {
    let Some(_live) = live_ready("exec_and_periodicity_counts") else {
        return;
    };
    let tmp = tempdir();
    let out = run(
        tmp.path(),
        &[
            "measure",
            "exec",
            "--cpu",
            "0",
            "--runs",
            "20",
            "--divisions",
            "100000",
            "--load",
            "cache",
            "--json",
            "e.json",
        ],
    );
    assert_succeeded(&out);
    let e = json(&tmp.path().join("e.json"));
    assert_eq!(e["kind"], "exec");
    assert_eq!(check_result(&e["unloaded"]), 20);
    assert_eq!(check_result(&e["loaded"]), 20);
    assert_eq!(e["t_min_ns"], e["unloaded"]["summary"]["min_ns"]);
    assert!(e["max_over_t_min_pct"].is_number());

    let out = run(
        tmp.path(),
        &[
            "measure",
            "periodicity",
            "--cpu",
            "0",
            "--period",
            "500us",
            "--duration",
            "200ms",
            "--json",
            "p.json",
        ],
    );
    assert_succeeded(&out);
    let p = json(&tmp.path().join("p.json"));
    assert_eq!(p["expected"], 400);
    let act = p["activations"].as_u64().unwrap();
    assert_eq!(act + p["lost"].as_u64().unwrap(), 400);
    assert_eq!(check_result(&p["inter_activation"]), act - 1);
    assert!(processes_mentioning(tmp.path()).is_empty());
}

#[test]
fn compare_cyclictest_side_by_side() {
    let Some(_live) = live_ready("compare_cyclictest_side_by_side") else {
        return;
    };
    if !have("cyclictest") {
        return;
    }
    let tmp = tempdir();
    let out = run(
        tmp.path(),
        &[
            "measure",
            "latency",
            "--compare-cyclictest",
            "--cpus",
            "0",
            "--duration",
            "1s",
            "--rounds",
            "1",
            "--json",
            "c.json",
        ],
    );
    assert_succeeded(&out);
    let c = json(&tmp.path().join("c.json"));
    assert_eq!(c["kind"], "compare");
    let ours = check_result(&c["rtmgr"]["result"]);
    let theirs = check_result(&c["cyclictest"]["result"]);
    assert_eq!(ours, 500);
    assert_eq!(theirs, 500);
    assert!(c["rtmgr"]["cpu_ns_per_sample"].is_number());
    assert!(c["cyclictest"]["cpu_ns_per_sample"].is_number());
}

#[test]
fn budget_report_goes_to_the_state_directory_not_the_current_one() {
    let Some(_live) = live_ready("budget_report_goes_to_the_state_directory_not_the_current_one")
    else {
        return;
    };
    let tmp = tempdir();
    let state = tmp.path().join("state");
    let out = rtmgr(tmp.path())
        .env("XDG_STATE_HOME", &state)
        .args([
            "measure",
            "budget",
            "--experiment",
            "overhead",
            "--mode",
            "soft",
            "--variants",
            "rearm",
            "--overhead-ms",
            "100",
            "--rounds",
            "1",
        ])
        .output()
        .unwrap();
    assert_succeeded(&out);
    let reports = state.join("rtmgr/reports");
    let dirs = file_names(&reports);
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    assert!(dirs[0].starts_with("budget-"), "{dirs:?}");
    let report = json(&reports.join(&dirs[0]).join("report.json"));
    assert_eq!(report["schema"], "rtmgr.budget/1");
    assert_eq!(
        file_names(tmp.path()),
        ["state"],
        "written into the current directory"
    );
}

#[test]
fn builtin_engine_on_request_and_no_load_outlives_a_killed_rtmgr() {
    let Some(_live) = live_ready("builtin_engine_on_request_and_no_load_outlives_a_killed_rtmgr")
    else {
        return;
    };
    let tmp = tempdir();
    let mut child = spawn_under_load(tmp.path(), &["--load", "all", "--load-engine", "builtin"]);
    std::thread::sleep(Duration::from_millis(500));
    let cmdline = std::fs::read(format!(
        "/proc/{}/cmdline",
        processes_mentioning(tmp.path())[0]
    ))
    .unwrap_or_default();
    assert!(String::from_utf8_lossy(&cmdline).contains("__load"));
    let _ = rtmgr_sys::process::kill(child.id() as i32, libc::SIGKILL);
    child.wait().unwrap();
    // The load's own bound is 60 s and more; an orphaned built-in load ends at once.
    let t1 = std::time::Instant::now();
    while !processes_mentioning(tmp.path()).is_empty() {
        assert!(
            t1.elapsed() < Duration::from_secs(10),
            "load outlived rtmgr"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let left = file_names(tmp.path());
    assert!(left.is_empty(), "left in TMPDIR: {left:?}");
}
