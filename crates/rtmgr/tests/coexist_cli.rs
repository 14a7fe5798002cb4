//! Beside irqbalance and tuned, through the binary on fake machine trees
//! (RTMGR_SYSROOT): `partition apply` refuses beside a running irqbalance
//! (exit 2, naming the flag) and with `--irqbalance ban` bans the RT CPUs
//! through its socket; `partition export --tuned DIR` writes a profile that
//! tuned itself loads (checked with deploy/tuned/check-profile.py when tuned
//! is installed; skipped with the reason otherwise).

use rtmgr_linux::fake::irqbalance::{self as fake_irqbalance, Heard};
use rtmgr_linux::fake::FakeMachine;
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_rtmgr");

fn run(fake: &FakeMachine, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("RTMGR_SYSROOT", fake.root())
        .env("RTMGR_LOCK_HELD", "1")
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn apply_refuses_beside_irqbalance_and_bans_with_the_flag() {
    let fake = FakeMachine::new(2)
        .typical_tasks()
        .task(800, "irqbalance")
        .build();
    let heard = fake_irqbalance::serve(&fake, 800, None);
    let o = run(&fake, &["partition", "apply", "--rt-cpus", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("--irqbalance ban"),
        "{}",
        text(&o.stderr)
    );
    let o = run(
        &fake,
        &[
            "partition",
            "apply",
            "--rt-cpus",
            "1",
            "--irqbalance",
            "ban",
        ],
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert!(
        text(&o.stdout).contains("bans CPUs 1"),
        "{}",
        text(&o.stdout)
    );
    assert_eq!(
        Heard::wait_for(&heard, 2).ban,
        Some(rtmgr_core::CpuSet::single(1))
    );
    let o = run(&fake, &["partition", "reset"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(
        Heard::wait_for(&heard, 3).commands.last().unwrap(),
        "settings cpus NULL"
    );
    let o = run(
        &fake,
        &[
            "partition",
            "apply",
            "--irqbalance",
            "maybe",
            "--rt-cpus",
            "1",
        ],
    );
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn the_exported_tuned_profile_matches_the_applied_partition() {
    let fake = FakeMachine::new(4).typical_tasks().build();
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("rtmgr-rt");
    let p = profile.to_str().unwrap();
    let o = run(&fake, &["partition", "export", "--tuned", p]);
    assert_eq!(o.status.code(), Some(2), "no partition applied yet");
    assert!(text(&o.stderr).contains("no partition applied"));
    let o = run(&fake, &["partition", "apply", "--rt-cpus", "2-3"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let o = run(&fake, &["partition", "export", "--tuned", p]);
    let _ = run(&fake, &["partition", "reset"]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let conf = std::fs::read_to_string(profile.join("tuned.conf")).unwrap();
    assert!(conf.contains("include=cpu-partitioning\n"), "{conf}");
    assert!(conf.contains("isolated_cores=2-3\n"), "{conf}");
    let cmdline = std::fs::read_to_string(profile.join("cmdline")).unwrap();
    assert!(
        cmdline.contains("nohz_full=2-3 rcu_nocbs=2-3 tuned.non_isolcpus=00000003")
            && cmdline.contains("isolcpus=managed_irq,domain,2-3 irqaffinity=0-1"),
        "{cmdline}"
    );
    assert!(profile.join("cpu-partitioning-variables.conf").exists());
    // tuned itself: the profile loads and its assertions hold (online CPUs
    // of this machine, so export one for RT CPU 1 of the real machine).
    let real = dir.path().join("rtmgr-real");
    let o = Command::new(BIN)
        .args(["partition", "export", "--rt-cpus", "1", "--tuned"])
        .arg(&real)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o.stderr));
    let check = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy/tuned/check-profile.py");
    let o = Command::new("/usr/bin/python3")
        .arg(&check)
        .arg(&real)
        .output()
        .unwrap();
    match o.status.code() {
        Some(77) => eprintln!("skipped tuned's own check: {}", text(&o.stdout).trim()),
        Some(0) => assert!(
            text(&o.stdout).contains("[irqbalance] banned_cpus = 1"),
            "{}",
            text(&o.stdout)
        ),
        _ => panic!(
            "tuned rejects the profile: {}{}",
            text(&o.stdout),
            text(&o.stderr)
        ),
    }
}
