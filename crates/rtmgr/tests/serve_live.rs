//! `rtmgr serve` end to end on this machine (root): grants and their undo,
//! SIGTERM resets everything, a foreign partition is refused, `kill -9` then
//! restart re-adopts live clients, `kill -9` then `rtmgr partition reset`
//! alone restores the machine, `kill -9` at random moments of grants, the
//! periodic task API asking the daemon for its (P, W), and drift of a grant
//! repaired (and none found in a fresh one); the resource flags of `rtmgr
//! reserve` granted and refused; a thread granted SCHED_FIFO again and
//! again that never sleeps at it is not killed by its RLIMIT_RTTIME.

mod serve_common;

use rtmgr_rt::client::ReserveRequest;
use rtmgr_sys::sched::{SCHED_DEADLINE, SCHED_FIFO, SCHED_OTHER};
use serve_common::*;
use std::process::Command;

#[test]
fn grants_release_and_sigterm_give_everything_back() {
    let Some(live) = Live::new() else { return };
    let d = live.start("");
    let mut hard = live.reserve_child(&["--period", "10ms", "--budget", "2ms"], &["sleep", "30"]);
    let mut soft = live.reserve_child(
        &["--period", "20ms", "--budget", "2ms", "--class", "rt1:20"],
        &["sleep", "30"],
    );
    let mut c = live.client();
    eventually("two grants", || listed(&mut c).len() == 2);
    // Pending (SCHED_FIFO 1) until it has run on its RT CPU, then SCHED_DEADLINE.
    eventually("hard at SCHED_DEADLINE", || {
        policy_of(hard.id()) == Some(SCHED_DEADLINE)
    });
    assert_eq!(policy_of(soft.id()), Some(SCHED_FIFO));
    // The request loop (the daemon's main thread) at SCHED_FIFO 1 ([serve] loop_priority).
    assert_eq!(
        policy_of(d.pid()),
        Some(SCHED_FIFO),
        "the daemon's request loop"
    );
    let rs = listed(&mut c);
    let soft_id = rs.iter().find(|r| r.pid == soft.id()).unwrap().id;
    assert!(rs.iter().all(|r| r.cpu == live.rt_cpu));
    // Admission refuses what does not fit, with its numbers; nothing changes.
    let mut too_big = ReserveRequest::new(10_000_000, 8_000_000);
    too_big.cpu = Some(live.rt_cpu);
    let e = c.reserve(too_big).unwrap_err().to_string();
    assert!(e.contains("U would be") && e.contains("> cap 0.90"), "{e}");
    assert_eq!(listed(&mut c).len(), 2);
    // Release gives the soft one back; the process lives on at SCHED_OTHER.
    let o = Command::new(BIN)
        .args(["release", &soft_id.to_string(), "--socket"])
        .arg(live.socket())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(policy_of(soft.id()), Some(SCHED_OTHER));
    // A reservation dies with its client.
    soft.kill().unwrap();
    soft.wait().unwrap();
    let st = d.stop();
    assert!(st.success(), "daemon exit {st}");
    assert_eq!(policy_of(hard.id()), Some(SCHED_OTHER), "SIGTERM revokes");
    hard.kill().unwrap();
    hard.wait().unwrap();
    live.assert_restored("after SIGTERM");
}

#[test]
fn a_partition_it_does_not_own_is_refused() {
    let Some(live) = Live::new() else { return };
    let o = Command::new(BIN)
        .args([
            "partition",
            "apply",
            "--rt-cpus",
            &live.rt_cpu.to_string(),
            "--journal",
        ])
        .arg(live.journal())
        .env("RTMGR_LOCK_HELD", "1")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cfg = live.config("");
    let o = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&cfg)
        .env("RTMGR_LOCK_HELD", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("does not take over a partition it does not own"),
        "{err}"
    );
    assert!(live.partition_reset().status.success());
    live.assert_restored("after reset");
}

#[test]
fn kill_9_then_restart_readopts_and_partition_reset_alone_restores() {
    let Some(live) = Live::new() else { return };
    let d = live.start("");
    let mut keeps = live.reserve_child(&["--period", "10ms", "--budget", "1ms"], &["sleep", "30"]);
    let mut dies = live.reserve_child(
        &["--period", "10ms", "--budget", "1ms", "--class", "rt1:10"],
        &["sleep", "30"],
    );
    let mut c = live.client();
    eventually("two grants", || listed(&mut c).len() == 2);
    d.kill9();
    dies.kill().unwrap();
    dies.wait().unwrap();
    let d = live.start("");
    let mut c = live.client();
    let rs = listed(&mut c);
    assert_eq!(
        rs.len(),
        1,
        "only the live client's grant is re-adopted: {rs:?}"
    );
    assert_eq!(rs[0].pid, keeps.id());
    // Pending (SCHED_FIFO 1) until it has run on its RT CPU, then SCHED_DEADLINE.
    eventually("keeps at SCHED_DEADLINE", || {
        policy_of(keeps.id()) == Some(SCHED_DEADLINE)
    });
    // Its budget is still counted: a request that no longer fits is refused.
    let mut r = ReserveRequest::new(10_000_000, 8_500_000);
    r.class = "rt1:5".into();
    assert!(c.reserve(r).is_err());
    d.kill9();
    let o = live.partition_reset();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(policy_of(keeps.id()), Some(SCHED_OTHER));
    keeps.kill().unwrap();
    keeps.wait().unwrap();
    live.assert_restored("after kill -9 and partition reset");
}

/// `kill -9` of the daemon at random moments while clients are being
/// granted, then a restart: every grant it lists is in effect, every client
/// it does not list is back at SCHED_OTHER; at the end the machine is as before.
#[test]
fn kill_9_at_random_moments_of_a_grant_leaves_a_consistent_machine() {
    let Some(live) = Live::new() else { return };
    let rounds: u32 = std::env::var("RTMGR_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let mut seed = 0x9e37_79b9_u64 ^ u64::from(std::process::id());
    let mut rand = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let mut d = live.start("");
    let mut clients = Vec::new();
    let (mut adopted, mut unlisted) = (0, 0);
    for round in 0..rounds {
        for i in 0..3 {
            let class = if (round + i) % 2 == 0 {
                "rt0"
            } else {
                "rt1:10"
            };
            clients.push(live.reserve_child(
                &["--period", "20ms", "--budget", "1ms", "--class", class],
                &["sleep", "60"],
            ));
        }
        std::thread::sleep(std::time::Duration::from_micros(rand(40_000)));
        d.kill9();
        d = live.start("");
        let mut c = live.client();
        let rs = listed(&mut c);
        for ch in clients.iter_mut() {
            let pid = ch.id();
            if ch.try_wait().unwrap().is_some() {
                continue; // refused or failed: it exited
            }
            let policy = policy_of(pid);
            match rs.iter().find(|r| r.pid == pid) {
                Some(r) => {
                    adopted += 1;
                    let want = if r.policy == "SCHED_DEADLINE" {
                        SCHED_DEADLINE
                    } else {
                        SCHED_FIFO
                    };
                    // The client may still be waiting for the dead daemon's answer.
                    if policy != Some(SCHED_OTHER) || r.policy.is_empty() {
                        assert_eq!(
                            policy,
                            Some(want),
                            "round {round}: listed grant not in effect: {r:?}"
                        );
                    }
                }
                None => {
                    unlisted += 1;
                    // Not re-adopted: either never granted or revoked.
                    eventually("unlisted client back at SCHED_OTHER", || {
                        policy_of(pid) == Some(SCHED_OTHER) || policy_of(pid).is_none()
                    });
                }
            }
        }
        // Old clients go, so the CPU keeps room.
        for mut ch in clients.drain(..) {
            let _ = ch.kill();
            let _ = ch.wait();
        }
    }
    let st = d.stop();
    assert!(st.success(), "daemon exit {st}");
    live.assert_restored("after the kill -9 rounds");
    eprintln!("kill -9 rounds: {rounds}; live clients re-adopted with their grant in effect: {adopted}; live clients not listed and back at SCHED_OTHER: {unlisted}; machine restored");
}

/// rtmgr-rt's periodic task asks the daemon for its (P, W) instead of
/// setting its policy itself, and gives it back on delete.
#[test]
fn the_periodic_task_api_reserves_through_the_daemon() {
    use rtmgr_rt::periodic::{BudgetMode, Task, TaskClass, TaskConfig};
    let Some(live) = Live::new() else { return };
    let d = live.start("");
    std::env::set_var("RTMGR_SOCKET", live.socket());
    let rt_cpu = live.rt_cpu;
    let (id_seen, after) = std::thread::spawn(move || {
        let mut t =
            Task::init(TaskConfig::new("daemon-test", TaskClass::Rt1 { priority: 30 }).cpu(rt_cpu))
                .unwrap();
        t.make_periodic_budget(0, 10_000_000, 1_000_000, BudgetMode::soft())
            .unwrap();
        for _ in 0..3 {
            t.wait_period().unwrap();
        }
        let me = rtmgr_sys::sched::gettid();
        let mut c = rtmgr_rt::client::Client::connect().unwrap();
        let seen = c
            .list()
            .unwrap()
            .iter()
            .any(|r| r.threads == vec![me] && r.class == "rt1:30");
        assert_eq!(policy_of(me), Some(SCHED_FIFO));
        t.delete().unwrap();
        (seen, policy_of(me))
    })
    .join()
    .unwrap();
    std::env::remove_var("RTMGR_SOCKET");
    assert!(id_seen, "the task's reservation was listed by the daemon");
    assert_eq!(after, Some(SCHED_OTHER));
    assert!(d.stop().success());
    live.assert_restored("after the periodic task");
}

/// The drift check on this kernel (every step of the grant pipeline
/// verifies): fresh grants (deadline and FIFO) show no drift; a policy and an RLIMIT_RTTIME
/// changed behind the daemon's back are put back, and only then is a repair
/// counted.
#[test]
fn a_grant_changed_behind_the_daemon_is_put_back() {
    use rtmgr_sys::process::{get_limit, set_limit, Limit, LimitKind};
    let Some(live) = Live::new() else { return };
    let d = live.start("");
    let soft = live.reserve_child(
        &["--period", "20ms", "--budget", "2ms", "--class", "rt1:20"],
        &["sleep", "30"],
    );
    let hard = live.reserve_child(&["--period", "10ms", "--budget", "1ms"], &["sleep", "30"]);
    let pid = soft.id();
    let mut c = live.client();
    eventually("two grants", || listed(&mut c).len() == 2);
    // Pending (SCHED_FIFO 1) until it has run on its RT CPU, then SCHED_DEADLINE.
    eventually("hard at SCHED_DEADLINE", || {
        policy_of(hard.id()) == Some(SCHED_DEADLINE)
    });
    let reapplied = |c: &mut rtmgr_rt::client::Client| {
        let st = c.status().unwrap();
        st.drift.get("grants_reapplied").copied().unwrap_or(0)
    };
    // Several reconciliations (reconcile_ms = 200) find nothing to repair.
    std::thread::sleep(std::time::Duration::from_millis(700));
    assert_eq!(reapplied(&mut c), 0, "a fresh grant drifted");
    let granted = get_limit(pid, LimitKind::RtTime).unwrap();
    assert!(granted.soft.is_some(), "a soft grant sets RLIMIT_RTTIME");
    rtmgr_sys::sched::set_attr(pid, &Default::default()).unwrap();
    let unlimited = Limit {
        soft: granted.hard,
        hard: granted.hard,
    };
    set_limit(pid, LimitKind::RtTime, unlimited).unwrap();
    eventually("policy and limit back", || {
        policy_of(pid) == Some(SCHED_FIFO)
            && get_limit(pid, LimitKind::RtTime).ok() == Some(granted)
    });
    assert!(reapplied(&mut c) >= 1);
    let st = d.stop();
    assert!(st.success(), "daemon exit {st}");
    for mut child in [soft, hard] {
        child.kill().unwrap();
        child.wait().unwrap();
    }
    live.assert_restored("after SIGTERM");
}

/// `rtmgr reserve --mlock --io-class --cache-share`: granted with what each
/// resource got in its line; asked too much, refused with the numbers
/// (exit 1) and nothing reserved.
#[test]
fn reserve_flags_ask_for_memory_io_and_cache() {
    let Some(live) = Live::new() else { return };
    let d = live.start("");
    let reserve = |flags: &[&str]| {
        let o = Command::new(BIN)
            .args(["reserve", "--period", "10ms", "--budget", "1ms", "--socket"])
            .arg(live.socket())
            .args(flags)
            .args(["--", "true"])
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let (code, text) = reserve(&["--mlock", "4M", "--io-class", "rt", "--cache-share", "0.1"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("locked memory 4 MiB reserved"), "{text}");
    assert!(text.contains("I/O class rt:"), "{text}");
    assert!(text.contains("cache: not available"), "{text}");
    let (code, text) = reserve(&["--mlock", "1G"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("locked memory: 1 GiB asked, the client's rule allows 64 MiB"),
        "{text}"
    );
    let (code, text) = reserve(&["--cache-share", "2"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("cache_share 2 is not within 0..1"), "{text}");
    let mut c = live.client();
    eventually("nothing is reserved", || listed(&mut c).is_empty());
    assert!(d.stop().success());
    live.assert_restored("after the resource flags");
}

/// Set in the child of the RLIMIT_RTTIME test: the daemon's socket.
const RTTIME_CHILD: &str = "RTMGR_TEST_RTTIME_CHILD";

/// A thread granted SCHED_FIFO (rt1) again and again, that works 2 ms at
/// it each time and never sleeps while SCHED_FIFO, lives on: the client
/// library waits for each grant asleep, so the answer wakes it at
/// SCHED_FIFO and Linux restarts its RLIMIT_RTTIME count (a FIFO grant
/// sets the soft limit, 200 ms; Linux counts a thread's RT ticks across
/// policy changes and restarts only when it wakes as an RT thread). A
/// library that spun through its grants let the thread's RT time add up
/// over them until SIGXCPU (the soak's process died of it once in CI).
/// Here another thread of the client releases each grant while the
/// granted one spins on until its policy is back, so the grant's answer
/// is its only wake-up. The client is a child process (this test binary
/// again, this test alone), which SIGXCPU would kill: with the spinning
/// library it was killed (checked).
#[test]
fn a_thread_granted_fifo_again_and_again_outlives_its_rt_time_limit() {
    if let Some(socket) = std::env::var_os(RTTIME_CHILD) {
        fifo_again_and_again(std::path::Path::new(&socket));
        return;
    }
    let Some(live) = Live::new() else { return };
    // Root's rule without its rate limit (300 requests in a second).
    let d = live.start(
        "[[client]]\nusers = [\"root\"]\nmax_priority = 98\nrequests_per_burst = 1000000\nburst_s = 1\n",
    );
    let me = "a_thread_granted_fifo_again_and_again_outlives_its_rt_time_limit";
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", me, "--nocapture", "--test-threads=1"])
        .env(RTTIME_CHILD, live.socket())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the client: {:?}\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(d.stop().success());
    live.assert_restored("after 150 FIFO grants");
}

/// The child's part: 150 times, rt1 granted, 2 ms of CPU at it, released
/// by a second thread (its own connection) while it spins on.
fn fifo_again_and_again(socket: &std::path::Path) {
    use std::sync::atomic::{AtomicU64, Ordering};
    const NONE: u64 = u64::MAX;
    let to_release = std::sync::Arc::new(AtomicU64::new(NONE));
    let releaser = {
        let (to_release, socket) = (to_release.clone(), socket.to_path_buf());
        std::thread::spawn(move || {
            let mut c = rtmgr_rt::client::Client::connect_to(&socket).unwrap();
            for _ in 0..150 {
                let id = loop {
                    match to_release.swap(NONE, Ordering::AcqRel) {
                        NONE => std::thread::sleep(std::time::Duration::from_micros(100)),
                        id => break id,
                    }
                };
                c.release(id).unwrap();
            }
        })
    };
    let mut c = rtmgr_rt::client::Client::connect_to(socket).unwrap();
    let me = rtmgr_sys::sched::gettid();
    for _ in 0..150 {
        let mut r = ReserveRequest::new(10_000_000, 3_000_000);
        r.class = "rt1:20".into();
        let g = c.reserve(r).unwrap();
        assert_eq!(policy_of(me), Some(SCHED_FIFO));
        let t0 = rtmgr_sys::time::thread_cpu_ns();
        while rtmgr_sys::time::thread_cpu_ns() - t0 < 2_000_000 {}
        to_release.store(g.id, Ordering::Release);
        while rtmgr_sys::sched::get_attr(0).unwrap().policy != SCHED_OTHER {}
    }
    releaser.join().unwrap();
}
