//! A build without the optional cargo features (the default build) refuses
//! what needs them with one error naming the feature, before it needs root
//! or changes anything: `serve --rtkit`, `serve --metrics`, `[rtkit] enabled`
//! in the config, `__gen-man`, and `top` (but `top --once --json`). scripts/test.sh runs these on the default
//! build; in a build with the features they are compiled out.

#![cfg(not(all(
    feature = "rtkit",
    feature = "metrics",
    feature = "manuals",
    feature = "top"
)))]

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_rtmgr");

fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("XDG_STATE_HOME", dir)
        .output()
        .unwrap()
}

/// `rtmgr serve ARGS --config FILE` with `config` as the file's text, and a
/// state directory that must stay absent: it failed with exit code 2 and
/// this stderr.
#[cfg(not(all(feature = "rtkit", feature = "metrics")))]
fn serve_refused(config: &str, args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("serve.toml");
    std::fs::write(&file, config).unwrap();
    let state = dir.path().join("state");
    let mut all = vec!["serve", "--config", file.to_str().unwrap()];
    all.extend(["--state-dir", state.to_str().unwrap()]);
    all.extend(args);
    let out = run(dir.path(), &all);
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(2), "rtmgr {all:?}: {err}");
    assert!(!state.exists(), "rtmgr {all:?} made its state directory");
    assert_eq!(err.trim().lines().count(), 1, "not one error: {err}");
    err
}

#[cfg(not(feature = "rtkit"))]
#[test]
fn serve_rtkit_names_the_feature() {
    let install = "cargo install --path crates/rtmgr --features rtkit";
    let err = serve_refused("rt_cpus = \"1\"\n", &["--rtkit"]);
    assert!(err.contains(install), "{err}");
    let err = serve_refused("rt_cpus = \"1\"\n[rtkit]\nenabled = true\n", &[]);
    assert!(err.contains(install), "{err}");
}

#[cfg(not(feature = "metrics"))]
#[test]
fn serve_metrics_names_the_feature() {
    let install = "cargo install --path crates/rtmgr --features metrics";
    let err = serve_refused("rt_cpus = \"1\"\n", &["--metrics", "127.0.0.1:9464"]);
    assert!(err.contains(install), "{err}");
    let err = serve_refused(
        "rt_cpus = \"1\"\n[serve]\nmetrics = \"127.0.0.1:9464\"\n",
        &[],
    );
    assert!(err.contains(install), "{err}");
}

#[cfg(not(feature = "manuals"))]
#[test]
fn gen_man_names_the_feature_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["__gen-man", dir.path().to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--features manuals"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[cfg(not(feature = "top"))]
#[test]
fn top_names_the_feature_but_once_json_works() {
    let dir = tempfile::tempdir().unwrap();
    for args in [&["top"][..], &["top", "--once"], &["top", "--probe"]] {
        let out = run(dir.path(), args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "not one error: {err}");
        assert!(
            err.contains("--features top") && err.contains("--once --json"),
            "{err}"
        );
    }
    let sock = dir.path().join("none.sock");
    let out = Command::new(BIN)
        .args(["top", "--once", "--json", "--interval", "100ms", "--socket"])
        .arg(&sock)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], "rtmgr.top/1");
    assert_eq!(v["source"], "partition in place");
}

#[test]
fn top_refuses_a_too_short_interval_with_one_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &["top", "--once", "--json", "--interval", "10ms"],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "not one error: {err}");
    assert!(err.contains("at least 100ms"), "{err}");
    assert!(out.stdout.is_empty());
}
