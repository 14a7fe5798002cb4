//! The periodic-task C API from C (budget-based RTAI §3.2): the C test and the
//! C examples build with `cc -std=c11 -Wall -Wextra -Werror` against
//! include/rtmgr.h and the static library, and run (as RT1+ tasks when root,
//! then under the machine lock). `reserve_demo` (the daemon client's C API,
//! DROPS §4.1) says so and exits 0 when no `rtmgr serve` runs. The header's
//! freshness and the pkg-config / shared-library builds are checked by the
//! `c_api` test.

use std::path::{Path, PathBuf};
use std::process::Command;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// librtmgr_rt.a built alongside this test binary.
fn static_lib() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    [deps, deps.parent().unwrap()]
        .iter()
        .map(|d| d.join("librtmgr_rt.a"))
        .find(|p| p.exists())
        .unwrap_or_else(|| panic!("librtmgr_rt.a not found next to {}", exe.display()))
}

/// Root runs RT tasks: take the machine lock then.
fn machine_lock_if_root() -> Option<rtmgr_sys::lock::MachineLock> {
    rtmgr_sys::process::is_root().then(|| {
        rtmgr_sys::lock::MachineLock::acquire(Path::new(rtmgr_sys::lock::DEFAULT_LOCK_PATH))
            .expect("machine lock")
    })
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn c_periodic_programs_build_and_run() {
    let _lock = machine_lock_if_root();
    let tmp = tempfile::tempdir().unwrap();
    let root = repo_root();
    for (prog, args) in [
        ("periodic_test", vec![]),
        ("periodic_budget", vec!["25", "soft"]),
        ("overrun_demo", vec!["8", "soft"]),
        ("reserve_demo", vec!["5"]),
        ("reserve_resources", vec!["65536", "rt", "0.1"]),
    ] {
        let exe = tmp.path().join(prog);
        run(Command::new("cc")
            .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-O1"])
            .arg("-I")
            .arg(root.join("include"))
            .arg(root.join(format!("examples/c/{prog}.c")))
            .arg(static_lib())
            .args(["-lpthread", "-ldl", "-lm", "-o"])
            .arg(&exe));
        let out = run(Command::new(&exe).args(&args));
        println!("{prog}: {}", out.trim());
    }
}

/// The Rust twins of the C examples (built by `cargo test` next to the test
/// binaries, in `../examples`) run too.
#[test]
fn rust_examples_run() {
    let _lock = machine_lock_if_root();
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap().join("examples");
    for (prog, args) in [
        ("periodic_budget", ["25", "soft"]),
        ("overrun_demo", ["8", "soft"]),
    ] {
        let path = dir.join(prog);
        assert!(
            path.exists(),
            "{} not built (cargo test builds examples)",
            path.display()
        );
        let out = run(Command::new(&path).args(args));
        println!("{prog}: {}", out.trim());
        if prog == "overrun_demo" {
            assert!(out.contains("ignored"), "{out}");
        }
    }
}
