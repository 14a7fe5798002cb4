//! The protocol's conformance client (issue 27): `conformance/rtmgr_client.py`,
//! a raw client in Python's standard library written from docs/protocol.md,
//! run against a live daemon (DROPS "Taming Linux" §4.1: resources on
//! request through a protocol). Each asking thread names its own tid and
//! sleeps in recv() for the answer. Bad lines get one error each and change
//! nothing; soft grants (alone and 16 at once) are granted, listed and
//! released; the machine is as before at the end.

mod serve_common;

use serve_common::*;
use std::process::Command;

fn python() -> Option<&'static str> {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
}

/// Run the client's checks (`only` / `skip`: comma-separated names).
fn run_checks(flag: &str, names: &str) {
    let Some(live) = Live::new() else { return };
    let Some(py) = python() else {
        eprintln!("skip: no python3");
        return;
    };
    let d = live.start("");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/conformance/rtmgr_client.py"
    );
    let o = Command::new(py)
        .arg(script)
        .arg("--socket")
        .arg(live.socket())
        .args(["conformance", flag, names])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    eprintln!("{out}{}", String::from_utf8_lossy(&o.stderr));
    let mut c = live.client();
    assert!(listed(&mut c).is_empty(), "the checks left a reservation");
    let st = d.stop();
    assert!(st.success(), "daemon exit {st}");
    assert!(o.status.success(), "conformance checks failed:\n{out}");
    live.assert_restored("after the conformance client");
}

#[test]
fn the_raw_python_client_conforms() {
    run_checks("--skip", "hard_sleeping");
}

/// A hard grant for a thread asleep in recv() (issue 27 item 1): granted;
/// SCHED_DEADLINE at once, or, when the reply lists the thread `pending`,
/// within 2 s of its waking on its RT CPU to read the answer.
#[test]
fn a_hard_grant_for_a_thread_asleep_in_recv() {
    run_checks("--only", "hard_sleeping");
}
