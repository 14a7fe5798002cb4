//! `rtmgr admit FILE` (offline admission for `rtmgr serve`, ARTiS §4): what
//! it prints for a set that leaves an RT CPU empty. Needs no root: the RT
//! CPUs come from the set, nothing is granted.

use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rtmgr");

#[test]
fn an_empty_cpu_prints_u_zero_not_minus_zero() {
    let dir = tempfile::tempdir().unwrap();
    let set = dir.path().join("set.toml");
    std::fs::write(
        &set,
        "rt_cpus = \"1-2\"\n[[task]]\nname = \"ctl\"\nperiod = \"10ms\"\nbudget = \"2ms\"\ncpu = 1\n",
    )
    .unwrap();
    let out = Command::new(BIN)
        .arg("admit")
        .arg(&set)
        .env("XDG_STATE_HOME", dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("CPU 2: U 0.000 (SCHED_DEADLINE 0.000)"),
        "{text}"
    );
    assert!(!text.contains("-0.000"), "{text}");
}
