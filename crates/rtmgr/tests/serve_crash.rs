//! Issue 30: after `kill -9` of `rtmgr serve` and a restart, the daemon's
//! stop still gives every grant back exactly (DROPS §4.1: what the manager
//! granted it takes back), and no CPU mask of rtmgr's is left behind. rt0
//! and rt1 grants of a sleeping and a running process each; after the stop
//! each must be as an ungranted process started beside them is (cpuset,
//! affinity, policy and its flags, every rlimit, I/O priority), and the
//! daemon must exit 0 without an error line: after a normal stop, after one
//! crash, after three in a row, and after a crash during the stop itself.

mod serve_common;

use serve_common::*;
use std::process::{Command, Stdio};
use std::time::Duration;

/// The daemon as a user runs it: the balancer on (it took a re-adopted
/// rt1 grant for an RT1+ task to adopt, the cause of issue 30).
const DAEMON: &str = "balancer = true\n";

/// A process as a revocation must leave it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    cpuset: Option<String>,
    affinity: Option<String>,
    /// policy, priority, nice, flags (reset-on-fork among them).
    attr: Option<(u32, u32, i32, u64)>,
    limits: Option<String>,
    ioprio: Option<u16>,
}

fn seen(pid: u32) -> Seen {
    let read = |f: &str| std::fs::read_to_string(format!("/proc/{pid}/{f}")).ok();
    Seen {
        cpuset: read("cgroup").and_then(|t| {
            t.lines()
                .find(|l| {
                    l.split(':')
                        .nth(1)
                        .is_some_and(|c| c.split(',').any(|c| c == "cpuset"))
                })
                .and_then(|l| l.rsplit(':').next().map(str::to_string))
        }),
        affinity: read("status").and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                .map(|v| v.trim().to_string())
        }),
        attr: rtmgr_sys::sched::get_attr(pid)
            .ok()
            .map(|a| (a.policy, a.priority, a.nice, a.flags)),
        limits: read("limits"),
        ioprio: rtmgr_sys::ioprio::get(pid).ok(),
    }
}

/// Busy 2 ms, asleep 8 ms, for ever (a thread that runs, without tripping
/// RLIMIT_RTTIME at SCHED_FIFO).
const RUNNER: &str =
    "import time\nwhile True:\n    t = time.monotonic()\n    while time.monotonic() - t < 0.002: pass\n    time.sleep(0.008)\n";

/// Four granted clients (rt0 and rt1, sleeping and running) and one
/// ungranted process started beside them: what each must end as.
struct Clients {
    kids: Children,
    granted: Vec<(&'static str, u32)>,
    control: u32,
}

fn python() -> Option<&'static str> {
    ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
}

fn start_clients(live: &Live) -> Option<Clients> {
    let Some(py) = python() else {
        eprintln!("skip: no python3 for the running client");
        return None;
    };
    let mut kids = Children::default();
    let mut control = Command::new("sleep");
    control.arg("300").stdout(Stdio::null());
    rtmgr_sys::child::ChildSetup::new()
        .kill_with_parent()
        .install(&mut control);
    let control = kids.add(control.spawn().unwrap());
    let rt0 = ["--period", "10ms", "--budget", "1ms"];
    let rt1 = ["--period", "10ms", "--budget", "1ms", "--class", "rt1:20"];
    let run = [py, "-c", RUNNER];
    let granted = vec![
        (
            "rt0 sleeping",
            kids.add(live.reserve_child(&rt0, &["sleep", "300"])),
        ),
        ("rt0 running", kids.add(live.reserve_child(&rt0, &run))),
        (
            "rt1 sleeping",
            kids.add(live.reserve_child(&rt1, &["sleep", "300"])),
        ),
        ("rt1 running", kids.add(live.reserve_child(&rt1, &run))),
    ];
    let mut c = live.client();
    eventually("four grants", || listed(&mut c).len() == 4);
    Some(Clients {
        kids,
        granted,
        control,
    })
}

impl Clients {
    /// Each granted process as the ungranted one is.
    fn assert_given_back(&self, when: &str) {
        let want = seen(self.control);
        assert_eq!(
            want.cpuset.as_deref(),
            Some("/"),
            "{when}: control {want:?}"
        );
        for (what, pid) in &self.granted {
            assert_eq!(
                seen(*pid),
                want,
                "{when}: {what} (pid {pid}) differs from an ungranted process"
            );
        }
    }

    fn end(mut self) {
        for c in &mut self.kids.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// SIGTERM: exit 0 and no error line in the log.
fn stop_cleanly(live: &Live, d: Daemon, when: &str) {
    let st = d.stop();
    let log = std::fs::read_to_string(live.dir.path().join("serve.log")).unwrap_or_default();
    assert!(st.success(), "{when}: daemon exit {st}: {log}");
    assert!(
        !log.contains("error:") && !log.contains("could not undo"),
        "{when}: {log}"
    );
}

/// `crashes` kill -9 and restarts, each re-adopting the four grants, then a stop.
fn crash_then_stop(crashes: usize) {
    let Some(live) = Live::new() else { return };
    let mut d = live.start(DAEMON);
    let Some(clients) = start_clients(&live) else {
        return;
    };
    for i in 0..crashes {
        d.kill9();
        d = live.start(DAEMON);
        let mut c = live.client();
        assert_eq!(listed(&mut c).len(), 4, "crash {}: re-adopted", i + 1);
    }
    stop_cleanly(&live, d, &format!("stop after {crashes} crash(es)"));
    clients.assert_given_back(&format!("after {crashes} crash(es) and a stop"));
    clients.end();
    live.assert_restored("end");
}

#[test]
fn a_normal_stop_leaves_no_cpu_mask_behind() {
    crash_then_stop(0);
}

#[test]
fn after_a_crash_the_stop_gives_every_grant_back_exactly() {
    crash_then_stop(1);
}

#[test]
fn three_crashes_in_a_row_then_a_stop() {
    crash_then_stop(3);
}

/// kill -9 while the daemon is revoking at its stop (deadline grants wait
/// out a period there): the next daemon, or its stop, finishes the job.
#[test]
fn a_crash_during_the_stop_is_finished_by_the_next_daemon() {
    let Some(live) = Live::new() else { return };
    let mut d = live.start(DAEMON);
    let Some(clients) = start_clients(&live) else {
        return;
    };
    for delay_ms in [0, 3, 8] {
        d.kill9();
        d = live.start(DAEMON);
        rtmgr_sys::process::kill(d.pid() as i32, libc::SIGTERM).unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        d.kill9();
        d = live.start(DAEMON);
    }
    stop_cleanly(&live, d, "stop after crashes during stops");
    clients.assert_given_back("after crashes during stops");
    clients.end();
    live.assert_restored("end");
}
