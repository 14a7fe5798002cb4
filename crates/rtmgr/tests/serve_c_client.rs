//! The C client against a daemon that grants (root, live; DROPS §4.1:
//! resources given on request): examples/c/reserve_demo.c, built with `cc`
//! against include/rtmgr.h and the librtmgr_rt.so built with these tests,
//! asks `rtmgr serve` for 1 ms every 10 ms, runs its jobs under the grant
//! (SCHED_DEADLINE, then SCHED_FIFO for rt1), and releases it; the daemon
//! then lists nothing and the machine is as before. examples/c/reserve_resources.c
//! asks with `rtmgr_reserve_with()` for locked memory, an I/O class and a
//! cache share too, and is refused with the numbers when it asks too much.

mod serve_common;

use serve_common::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The directory holding librtmgr_rt.so built alongside this test.
fn lib_dir() -> Option<PathBuf> {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    [deps.clone(), deps.parent().unwrap().to_path_buf()]
        .into_iter()
        .find(|d| d.join("librtmgr_rt.so").exists())
}

/// `cc` the C example `prog` against include/rtmgr.h and librtmgr_rt.so into
/// the test's directory; None (with the reason printed) when it cannot.
fn build_example(live: &Live, prog: &str) -> Option<PathBuf> {
    let Some(lib) = lib_dir() else {
        eprintln!("skip: librtmgr_rt.so not built next to this test");
        return None;
    };
    if Command::new("cc").arg("--version").output().is_err() {
        eprintln!("skip: no C compiler (cc)");
        return None;
    }
    let exe = live.dir.path().join(prog);
    let out = Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
        .arg("-I")
        .arg(repo_root().join("include"))
        .arg(repo_root().join(format!("examples/c/{prog}.c")))
        .arg(format!("-L{}", lib.display()))
        .arg("-lrtmgr_rt")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(exe)
}

#[test]
fn reserve_demo_is_granted_runs_and_releases() {
    let Some(live) = Live::new() else { return };
    let Some(exe) = build_example(&live, "reserve_demo") else {
        return;
    };
    let d = live.start("");
    for class in ["rt0", "rt1:20"] {
        let out = Command::new(&exe)
            .args(["20", class])
            .env("RTMGR_SOCKET", live.socket())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        eprintln!("{class}: {text}{}", String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{class}: exit {}", out.status);
        let policy = if class == "rt0" {
            "SCHED_DEADLINE"
        } else {
            "SCHED_FIFO at priority 20"
        };
        assert!(
            text.contains(&format!("on CPU {}", live.rt_cpu)),
            "{class}: {text}"
        );
        assert!(
            text.contains(&format!("this thread now runs under {policy}")),
            "{class}: {text}"
        );
        assert!(text.contains("20 jobs: 20 on CPU"), "{class}: {text}");
        assert!(
            text.contains("this thread runs under SCHED_OTHER again"),
            "{class}: {text}"
        );
        let mut c = live.client();
        eventually("the reservation is gone", || listed(&mut c).is_empty());
    }
    assert!(d.stop().success());
    live.assert_restored("after the C client");
}

#[test]
fn reserve_resources_is_granted_memory_io_and_cache_or_refused_with_numbers() {
    let Some(live) = Live::new() else { return };
    let Some(exe) = build_example(&live, "reserve_resources") else {
        return;
    };
    let d = live.start("");
    let run = |args: &[&str]| {
        let out = Command::new(&exe)
            .args(args)
            .env("RTMGR_SOCKET", live.socket())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        eprintln!("{args:?}: {text}{}", String::from_utf8_lossy(&out.stderr));
        (out.status.code(), text)
    };
    // 4 MiB locked, I/O class rt, a tenth of the L3 (no resctrl here: granted
    // without a cache partition, and the reply says so).
    let (code, text) = run(&["4194304", "rt", "0.1"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("locked memory 4194304 bytes; I/O class rt level"),
        "{text}"
    );
    assert!(text.contains("locked 4194304 bytes"), "{text}");
    assert!(text.contains("released reservation"), "{text}");
    // More than the client rule allows (64 MiB by default): refused, with the numbers.
    let (code, text) = run(&["1073741824", "be"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("locked memory: 1 GiB asked, the client's rule allows 64 MiB"),
        "{text}"
    );
    let mut c = live.client();
    eventually("nothing is reserved", || listed(&mut c).is_empty());
    assert!(d.stop().success());
    live.assert_restored("after the C resource client");
}
