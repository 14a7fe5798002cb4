//! `rtmgr measure cost` (issue 14): bad input exits 2 before anything
//! changes; on the real machine (root only, a few seconds) a short run of
//! every part gives a complete `rtmgr.cost/1` report and plots, and leaves the
//! machine as it was. No timing is asserted.

mod measure_common;
use measure_common::*;

#[test]
fn bad_input_exits_2() {
    let tmp = tempdir();
    for args in [
        &["measure", "cost", "--only", "nothing"][..],
        &["measure", "cost", "--micro-time", "soon"][..],
    ] {
        let out = run(tmp.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
    if is_root() {
        let _live = live_ready("bad_input_exits_2 (root part)");
        let out = run(tmp.path(), &["measure", "cost", "--rounds", "0"]);
        assert_eq!(out.status.code(), Some(2));
        let out = run(
            tmp.path(),
            &[
                "measure",
                "cost",
                "--only",
                "build",
                "--build-crate",
                "no-such-crate-here",
            ],
        );
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("no-such-crate-here"));
    }
}

/// A crate small enough to build in a moment, if Cargo has it unpacked.
fn tiny_crate() -> Option<&'static str> {
    let home = std::env::var_os("CARGO_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::Path::new(&h).join(".cargo")))?;
    let found = std::fs::read_dir(home.join("registry/src"))
        .ok()?
        .flatten()
        .any(|i| {
            std::fs::read_dir(i.path())
                .into_iter()
                .flatten()
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("cfg-if-1"))
        });
    (found && have("cargo")).then_some("cfg-if")
}

#[test]
fn short_cost_run_reports_every_part_and_restores() {
    let Some(_live) = live_ready("short_cost_run_reports_every_part_and_restores") else {
        return;
    };
    let tmp = tempdir();
    let build = tiny_crate();
    let only = if build.is_some() {
        "micro,sweep,build"
    } else {
        "micro,sweep"
    };
    if build.is_none() {
        eprintln!("note: no cfg-if crate unpacked or no cargo: the build part is not run");
    }
    let out = run(
        tmp.path(),
        &[
            "measure",
            "cost",
            "--rounds",
            "1",
            "--micro-time",
            "5ms",
            "--sweep-time",
            "50ms",
            "--sweep-max",
            "2",
            "--only",
            only,
            "--build-crate",
            build.unwrap_or("cfg-if"),
            "--out",
            "c",
        ],
    );
    assert_succeeded(&out);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("null-syscall") && stdout.contains("jobs/min"),
        "{stdout}"
    );
    let r = json(&tmp.path().join("c/report.json"));
    assert_eq!(r["schema"], "rtmgr.cost/1");
    assert_eq!(r["partial"], false);
    assert_eq!(r["rounds_done"], 1);
    let configs: Vec<&str> = r["configs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for c in ["stock", "shield", "balanced"] {
        assert!(configs.contains(&c), "{configs:?}");
    }
    let micro = r["micro"].as_array().unwrap();
    assert_eq!(micro.len(), 7);
    for b in micro {
        for m in b["per_config"].as_array().unwrap() {
            assert_eq!(m["samples"].as_array().unwrap().len(), 1, "{b}");
        }
        assert_eq!(b["per_config"][0]["slowdown"], 1.0);
    }
    assert_eq!(r["sweep"]["levels"], serde_json::json!([1, 2]));
    if build.is_some() {
        for c in r["build"]["per_config"].as_array().unwrap() {
            assert_eq!(c["real_s"]["samples"].as_array().unwrap().len(), 1, "{c}");
        }
        assert_eq!(r["build"]["per_config"][0]["jobs"], configs_cpus());
    }
    assert!(tmp.path().join("c/cost.svg").exists());
    assert!(tmp.path().join("c/cost-sweep.svg").exists());
    assert_machine_restored();
}

/// Online CPUs: stock's -j.
fn configs_cpus() -> u64 {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| s.trim().parse::<rtmgr_core::CpuSet>().ok())
        .map(|c| c.len() as u64)
        .unwrap_or(1)
}
