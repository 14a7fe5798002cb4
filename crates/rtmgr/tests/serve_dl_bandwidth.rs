//! SCHED_DEADLINE bandwidth after revocations (root, live; budget-based
//! RTAI §3.3: hard reservations as SCHED_DEADLINE). A thread asleep past
//! its 0-lag time whose policy another process (the daemon) sets back to
//! SCHED_OTHER keeps its bandwidth booked in its root domain on Linux 6.18
//! (docs/kernel-dl-bandwidth-leak.md, reproducer docs/repro/dl_leak.c); the
//! daemon rebuilds the RT CPU's root domain once that thread is past its
//! 0-lag time (daemon/dl_leak.rs). 100 rounds: reserve 80 % of the RT CPU
//! for a sleeping thread, release it from another client. Then the RT CPU's
//! whole share (90 %: the kernel's 95 % less the fair server's 5 %, one
//! unit of 2^-20 to spare) must still be granted, and the root domain's
//! booked bandwidth must be what it was before the first round.

mod serve_common;

use rtmgr_sys::sched::{SCHED_DEADLINE, SCHED_OTHER};
use serve_common::*;
use std::process::Command;
use std::time::Duration;

/// Sleeping deadline threads revoked before the full-share grant.
const ROUNDS: usize = 100;

/// The RT CPU's root-domain deadline bandwidth (`dl_bw->total_bw`) from
/// /sys/kernel/debug/sched/debug, read in a private mount namespace (the
/// host's mounts stay as they are); None when debugfs is not there.
fn total_bw(cpu: u32) -> Option<u64> {
    let script = format!(
        "mount -t debugfs none /sys/kernel/debug 2>/dev/null; \
         awk '/^dl_rq\\[{cpu}\\]/{{f=1}} f && /dl_bw->total_bw/{{print $3; exit}}' /sys/kernel/debug/sched/debug"
    );
    let out = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .ok()?;
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

/// `rtmgr reserve ARGS -- sleep 30` granted: its pid, or the refusal.
fn granted_sleeper(live: &Live, kids: &mut Children, args: &[&str]) -> Result<u32, String> {
    let pid = kids.add(live.reserve_child(args, &["sleep", "30"]));
    eventually("the sleeper's grant or its refusal", || {
        policy_of(pid) == Some(SCHED_DEADLINE)
            || matches!(kids.0.last_mut().unwrap().try_wait(), Ok(Some(_)))
    });
    if policy_of(pid) == Some(SCHED_DEADLINE) {
        return Ok(pid);
    }
    let ch = kids.0.pop().unwrap();
    let out = ch.wait_with_output().unwrap();
    Err(String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn revoking_sleeping_deadline_threads_leaks_no_bandwidth() {
    let Some(live) = Live::new() else { return };
    // Two requests a round: more than the default rate allows root.
    let d =
        live.start("[[client]]\nusers = [\"root\"]\nrequests_per_burst = 100000\nburst_s = 1\n");
    let mut c = live.client();
    let bw0 = total_bw(live.rt_cpu);
    for round in 0..ROUNDS {
        let mut kids = Children::default();
        let pid = granted_sleeper(&live, &mut kids, &["--period", "10ms", "--budget", "8ms"])
            .unwrap_or_else(|e| {
                panic!(
                    "round {round}: the 80 % reservation was refused (booked: {:?}, before: {bw0:?}): {e}",
                    total_bw(live.rt_cpu)
                )
            });
        // Asleep well past its 0-lag time (3 periods).
        std::thread::sleep(Duration::from_millis(30));
        let id = listed(&mut c)[0].id;
        c.release(id).unwrap();
        assert_eq!(policy_of(pid), Some(SCHED_OTHER));
        eventually("released", || listed(&mut c).is_empty());
    }
    let mut kids = Children::default();
    granted_sleeper(&live, &mut kids, &["--period", "10ms", "--budget", "9ms"]).unwrap_or_else(
        |e| {
            panic!(
                "after {ROUNDS} revocations the full share was refused (booked: {:?}, before: {bw0:?}): {e}",
                total_bw(live.rt_cpu)
            )
        },
    );
    drop(kids);
    eventually("the full share released", || listed(&mut c).is_empty());
    // The exited thread's bandwidth goes back at its 0-lag time.
    std::thread::sleep(Duration::from_millis(50));
    let bw1 = total_bw(live.rt_cpu);
    eprintln!(
        "RT CPU {}: dl_bw->total_bw before {bw0:?}, after {ROUNDS} revocations and the full share {bw1:?}",
        live.rt_cpu
    );
    assert_eq!(bw1, bw0, "deadline bandwidth booked before and after");
    drop(c);
    assert!(d.stop().success());
    live.assert_restored("after the rounds");
}
