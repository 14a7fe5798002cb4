//! Programs rtmgr did not write, granted while they run (root; issue 27 item
//! 1, "the manager works for real programs"): cyclictest (rt-tests) measuring
//! at SCHED_OTHER, and an rt-app task file's periodic task. Each gets a hard
//! reservation for its working thread with `rtmgr reserve --pid` (`--tid`
//! for cyclictest's, `--thread NAME` for rt-app's, which it names after its
//! task) while that thread sleeps between activations; the thread must be at
//! SCHED_DEADLINE with the reserved budget on the RT CPU, the program must go
//! on to its own end and exit 0, and the grant must go with it. Skipped, with
//! the reason, where the program is not installed (.ci/run installs both).

mod serve_common;

use rtmgr_linux::Host;
use rtmgr_sys::sched::{self, SCHED_DEADLINE, SCHED_OTHER};
use serve_common::*;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

const PERIOD_NS: u64 = 10_000_000;
const BUDGET_NS: u64 = 1_000_000;

/// Whether `program` is on PATH; prints why the test skips when not.
fn installed(program: &str, package: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        eprintln!("skip: {program} is not installed (apt-get install {package})");
    }
    found
}

/// `cmd` as a child that dies with this test's thread, its output piped.
fn spawn(mut cmd: Command) -> Child {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    rtmgr_sys::child::ChildSetup::new()
        .kill_with_parent()
        .install(&mut cmd);
    cmd.spawn().unwrap()
}

/// The one thread of process `pid` other than its main thread, once it has
/// started (both programs here start one working thread).
fn working_thread(pid: u32) -> u32 {
    let t0 = Instant::now();
    loop {
        let others: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .filter(|&t| t != pid)
                    .collect()
            })
            .unwrap_or_default();
        if let [tid] = others[..] {
            return tid;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "process {pid}: threads other than main {others:?}, expected one"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Wait until thread `tid` is in its periodic loop: ten voluntary context
/// switches (a sleep each), so that its program has set its own policy
/// (SCHED_OTHER here) before the grant, as a program already running has.
fn in_its_loop(pid: u32, tid: u32) {
    let switches = || -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
            .unwrap_or_default()
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    eventually("the thread in its periodic loop", || switches() >= 10);
    assert_eq!(
        policy_of(tid),
        Some(SCHED_OTHER),
        "thread {tid} before the grant"
    );
}

/// Thread `tid` of `pid`, named by `threads` (`--tid TID`, `--thread NAME`),
/// granted (rt0, the default class: hard; 1 ms every 10 ms); then it is at SCHED_DEADLINE with the budget, alone on the RT CPU.
fn grant_and_check(live: &Live, pid: u32, tid: u32, threads: &[&str], what: &str) {
    let (code, err) = reserve_pid(live, None, pid, threads);
    assert_eq!(code, Some(0), "{what}: {err}");
    assert!(err.contains(&format!("(threads {tid})")), "{what}: {err}");
    let pending = if err.contains("; pending ") {
        vec![tid]
    } else {
        vec![]
    };
    assert_policy(tid, SCHED_DEADLINE, &pending, what);
    let attr = sched::get_attr(tid).unwrap();
    assert_eq!(
        (attr.runtime, attr.period),
        (BUDGET_NS, PERIOD_NS),
        "{what}"
    );
    let cpus: Vec<u32> = sched::get_affinity(tid).unwrap().cpus().collect();
    assert_eq!(cpus, vec![live.rt_cpu], "{what}: affinity");
    assert_eq!(listed(&mut live.client()).len(), 1, "{what}");
}

/// The program's end (within `limit`): it must exit 0 by itself, its
/// granted thread `tid` at SCHED_DEADLINE to its end (the program does not
/// set its policy again, nor does anything else) unless it is exiting or the
/// daemon lists it pending (a stranded thread's repair holds it at its own
/// policy until its 0-lag time: docs/serve.md, "Stranded threads").
fn finished(live: &Live, mut child: Child, tid: u32, limit: Duration, what: &str) -> Output {
    let t0 = Instant::now();
    while child.try_wait().unwrap().is_none() {
        let policy = policy_of(tid);
        if !matches!(policy, Some(SCHED_DEADLINE) | None) {
            let exiting = rtmgr_linux::tasks::exiting(&Host::real(), tid);
            let pending = listed(&mut live.client())
                .iter()
                .any(|r| r.pending.contains(&tid));
            assert!(
                exiting != Some(false) || pending,
                "{what}: thread {tid} at policy {policy:?} after {:?}, not exiting nor pending; the daemon's log:\n{}",
                t0.elapsed(),
                live.log()
            );
            eprintln!(
                "{what}: thread {tid} at policy {policy:?}, exiting {exiting:?}, pending {pending}"
            );
        }
        if t0.elapsed() > limit {
            child.kill().unwrap();
            panic!("{what}: still running after {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{what}: {:?}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// After the program `what` exited: its grant gone, the daemon stopped
/// cleanly, the machine as before.
fn gone_with_the_program(live: &Live, d: Daemon, what: &str) {
    let mut c = live.client();
    eventually(&format!("the grant gone with {what}"), || {
        listed(&mut c).is_empty()
    });
    assert!(d.stop().success());
    live.assert_restored(&format!("after {what}"));
}

/// The thread and loop count of cyclictest's summary line, whose fields it
/// pads: `T: 0 ( 8339) P: 0 I:1000 C:   4000 Min: …`.
fn cyclictest_thread_and_count(summary: &str) -> Option<(u32, u64)> {
    let (_, rest) = summary.split_once('(')?;
    let (tid, rest) = rest.split_once(')')?;
    let (_, count) = rest.split_once("C:")?;
    Some((
        tid.trim().parse().ok()?,
        count.split_whitespace().next()?.parse().ok()?,
    ))
}

#[test]
fn cyclictest_s_summary_is_read_whatever_its_padding() {
    let line = "T: 0 ( 8339) P: 0 I:1000 C:   4000 Min:     12 Act:   23 Avg:   27 Max:     657";
    assert_eq!(cyclictest_thread_and_count(line), Some((8339, 4000)));
    let line = "T: 0 (21184) P: 0 I:1000 C:   4000 Min:     10 Act:   38 Avg:   34 Max:    1124";
    assert_eq!(cyclictest_thread_and_count(line), Some((21184, 4000)));
    assert_eq!(cyclictest_thread_and_count("T: 0 (x) C: 1"), None);
}

#[test]
fn cyclictest_s_measuring_thread_measures_on_under_a_hard_grant() {
    if !installed("cyclictest", "rt-tests") {
        return;
    }
    let Some(live) = Live::new() else { return };
    let d = live.start("");
    // 4 000 wake-ups 1 ms apart at SCHED_OTHER, the machine left untuned
    // (no /dev/cpu_dma_latency), a summary at the end.
    let mut cmd = Command::new("cyclictest");
    // (`-p` would make it SCHED_FIFO.)
    cmd.args(["--default-system", "--policy=other", "-t", "1"])
        .args(["-i", "1000", "-l", "4000", "-q"]);
    let child = spawn(cmd);
    let pid = child.id();
    let tid = working_thread(pid);
    in_its_loop(pid, tid);
    grant_and_check(&live, pid, tid, &["--tid", &tid.to_string()], "cyclictest");
    let out = finished(&live, child, tid, Duration::from_secs(60), "cyclictest");
    // Every loop ran (the summary's count); its latencies are the VM's.
    let summary = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        cyclictest_thread_and_count(&summary),
        Some((tid, 4000)),
        "cyclictest's summary: {summary}"
    );
    eprintln!("cyclictest under the grant: {}", summary.trim());
    gone_with_the_program(&live, d, "cyclictest");
}

/// An rt-app task file: one periodic task, 200 µs of work every 10 ms for 4 s,
/// at SCHED_OTHER, without calibration (a fixed 100 ns a loop) or locked
/// pages, its log in `dir`.
fn rt_app_task_file(dir: &std::path::Path) -> String {
    format!(
        r#"{{
  "tasks": {{
    "control": {{ "loop": -1, "run": 200, "timer": {{ "ref": "tick", "period": 10000 }} }}
  }},
  "global": {{
    "duration": 4, "calibration": 100, "default_policy": "SCHED_OTHER",
    "lock_pages": false, "gnuplot": false,
    "logdir": "{}", "log_basename": "rt-app", "logsize": "2M"
  }}
}}"#,
        dir.display()
    )
}

#[test]
fn an_rt_app_task_runs_its_course_under_a_hard_grant() {
    if !installed("rt-app", "rt-app") {
        return;
    }
    let Some(live) = Live::new() else { return };
    let d = live.start("");
    let logs = live.dir.path().join("rt-app-logs");
    std::fs::create_dir(&logs).unwrap();
    let file = live.dir.path().join("control.json");
    std::fs::write(&file, rt_app_task_file(&logs)).unwrap();
    let mut cmd = Command::new("rt-app");
    cmd.arg(&file);
    let child = spawn(cmd);
    let pid = child.id();
    let tid = working_thread(pid);
    in_its_loop(pid, tid);
    // A name that is not the task's: one error, with the names there are;
    // nothing asked of the daemon.
    let (code, err) = reserve_pid(&live, None, pid, &["--thread", "contro"]);
    assert_eq!(code, Some(2), "{err}");
    // (Its threads in tid order: a wrapped pid may put the task's first.)
    let (first, second) = if pid < tid {
        ((pid, "rt-app"), (tid, "control"))
    } else {
        ((tid, "control"), (pid, "rt-app"))
    };
    assert!(
        err.contains(&format!(
            "has no thread named \"contro\" (its threads: {} {}, {} {})",
            first.0, first.1, second.0, second.1
        )),
        "{err}"
    );
    assert!(listed(&mut live.client()).is_empty());
    // The task's thread by its name, as rt-app names it.
    grant_and_check(&live, pid, tid, &["--thread", "control"], "rt-app");
    finished(&live, child, tid, Duration::from_secs(60), "rt-app");
    // Its log has a row per activation: it went on after the grant.
    let log = std::fs::read_to_string(logs.join("rt-app-control-0.log")).unwrap();
    let rows = log
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .count();
    eprintln!("rt-app under the grant: {rows} activations logged of 400 periods");
    assert!(rows > 50, "rt-app logged {rows} activations:\n{log}");
    gone_with_the_program(&live, d, "rt-app");
}

/// `--tid` and `--thread` without `--pid` (a program to run given instead):
/// one clear error before any daemon is asked (none answers at this socket).
#[test]
fn threads_named_without_a_pid_are_bad_input() {
    for threads in [["--tid", "3"], ["--thread", "control"]] {
        let o = Command::new(BIN)
            .args(["reserve", "--socket", "/nonexistent/rtmgr.sock"])
            .args(threads)
            .args(["--period", "10ms", "--budget", "1ms", "--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{threads:?}: {err}");
        assert_eq!(
            err.trim(),
            "rtmgr: error: --tid and --thread pick threads of the process given by --pid"
        );
    }
}
