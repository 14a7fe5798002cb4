//! `rtmgr lb` through the binary: a malformed scenario is one error line with
//! its line number and exit code 2 (nothing started); a small simulated A/B run
//! prints JSON with one run per balancer, deterministically.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rtmgr");

fn scenario(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), text).unwrap();
    f
}

#[test]
fn malformed_scenario_is_refused_with_its_line() {
    let f = scenario("cpus = 2\n{\n  loop = 10\n  cpu_mask = 0x1\n  sched = FIFO\n}\n");
    let out = Command::new(BIN)
        .args(["lb", "--sim", "--balancer", "rtmgr"])
        .arg(f.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("line 2:") && err.contains("priority"), "{err}");
    assert!(
        out.stdout.is_empty(),
        "something ran: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Live mode validates the same way before starting anything.
    let out = Command::new(BIN)
        .args(["lb"])
        .arg(f.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(BIN)
        .args(["lb", "--sim", "--balancer", "fair"])
        .arg(f.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn host_model_flag_is_checked_and_reported() {
    let f = scenario(
        "cpus = 2\nrt_cpus = 1\n{\n instances = 3\n loop = 3000000\n}\n{\n cpu_mask = 0x2\n sched = FIFO\n priority = 99\n loop = 10000000\n sloop = 5\n sleep = 245\n periodic = 1\n}\n",
    );
    let out = Command::new(BIN)
        .args(["lb", "--sim", "--host-preempt", "4"])
        .arg(f.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--host-preempt") && err.contains("RATE,SLICE_MS"),
        "{err}"
    );
    assert!(out.stdout.is_empty());
    let run = |json: bool| {
        let mut cmd = Command::new(BIN);
        cmd.args([
            "lb",
            "--sim",
            "--balancer",
            "shield,rtmgr",
            "--host-preempt",
            "4,9",
        ]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.arg(f.path()).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let text = run(false);
    assert!(text.contains("host model (rtmgr):"), "{text}");
    let v: serde_json::Value = serde_json::from_str(&run(true)).unwrap();
    let cpu1 = &v["runs"][1]["report"]["host"]["lending"][0];
    assert_eq!(cpu1["cpu"], 1);
    let off = cpu1["off_periods"].as_array().unwrap();
    assert!(!off.is_empty(), "{cpu1}");
    assert!(off[0]["reason"]
        .as_str()
        .unwrap()
        .contains("stalled by the host"));
}

#[test]
fn a_host_capacity_of_one_cpu_keeps_lending_off_and_bad_factors_fail_clearly() {
    let f = scenario(
        "cpus = 2\nrt_cpus = 1\n{\n instances = 3\n loop = 1000000\n}\n{\n cpu_mask = 0x2\n sched = FIFO\n priority = 99\n loop = 10000000\n sloop = 5\n sleep = 245\n periodic = 1\n}\n",
    );
    for bad in ["0", "-1", "x"] {
        let out = Command::new(BIN)
            .args(["lb", "--sim", &format!("--host-capacity={bad}")])
            .arg(f.path())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("host-capacity"), "{bad}: {err}");
        assert!(out.stdout.is_empty());
    }
    let out = Command::new(BIN)
        .args([
            "lb",
            "--sim",
            "--json",
            "--balancer",
            "rtmgr",
            "--host-capacity",
            "1",
        ])
        .arg(f.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cpu1 = &v["runs"][0]["report"]["host"]["lending"][0];
    assert_eq!(
        (cpu1["lending"].as_bool(), cpu1["lends"].as_u64()),
        (Some(false), Some(0)),
        "{cpu1}"
    );
    assert!(cpu1["reason"]
        .as_str()
        .unwrap()
        .contains("lending adds no capacity"));
}

#[test]
fn simulated_ab_run_is_json_and_deterministic() {
    let f = scenario(
        "cpus = 2\nrt_cpus = 1\n{\n instances = 3\n loop = 100000\n}\n{\n cpu_mask = 0x2\n sched = FIFO\n priority = 99\n loop = 10000000\n sloop = 900\n sleep = 100\n}\n",
    );
    let run = || {
        let out = Command::new(BIN)
            .args([
                "lb",
                "--sim",
                "--json",
                "--balancer",
                "linux,shield,artis,rtmgr",
            ])
            .arg(f.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let (a, b) = (run(), run());
    let runs = a["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 4);
    for (x, y) in runs.iter().zip(b["runs"].as_array().unwrap()) {
        assert_eq!(x["report"], y["report"]);
        assert_eq!(x["report"]["unfinished"], 0);
        assert_eq!(x["report"]["tasks"].as_array().unwrap().len(), 4);
    }
}
