//! The partition commands end to end, through the rtmgr binary: bad input
//! (exit 2, one line, nothing changed), a real apply / run / reset on this
//! machine (root only), and the crash test: `kill -9` of `partition apply` at
//! several points, then `reset`, then the machine must equal its before-state.

use rtmgr_linux::fake::{FakeCgroup, FakeMachine};
use rtmgr_linux::lock::{MachineLock, DEFAULT_LOCK_PATH};
use rtmgr_linux::snapshot::{self, MachineState};
use rtmgr_linux::{cpus, Host};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_rtmgr");

fn is_root() -> bool {
    rtmgr_linux::sched::is_root()
}

fn rtmgr(args: &[&str], journal: &Path) -> Command {
    // --journal goes before a `--` that starts a program's own arguments.
    let split = args.iter().position(|a| *a == "--").unwrap_or(args.len());
    let mut c = Command::new(BIN);
    c.args(&args[..split])
        .arg("--journal")
        .arg(journal)
        .args(&args[split..]);
    c.env("RTMGR_LOCK_HELD", "1");
    c
}

fn out(mut c: Command) -> Output {
    c.output().expect("run rtmgr")
}

/// Holds the machine lock and a private journal path for one test.
struct Live {
    _lock: MachineLock,
    dir: tempfile::TempDir,
}

impl Live {
    fn new() -> Option<Self> {
        if !is_root() {
            eprintln!("skip: needs root to change cpusets and IRQs");
            return None;
        }
        let host = Host::real();
        if rtmgr_linux::partition::layout(&host).is_err() {
            eprintln!("skip: no cpuset controller on this machine");
            return None;
        }
        if cpus::online(&host).map(|c| c.len()).unwrap_or(0) < 2 {
            eprintln!("skip: needs 2 CPUs");
            return None;
        }
        let lock = MachineLock::acquire(Path::new(DEFAULT_LOCK_PATH)).unwrap();
        Some(Live {
            _lock: lock,
            dir: tempfile::tempdir().unwrap(),
        })
    }
    fn journal(&self) -> PathBuf {
        self.dir.path().join("journal.jsonl")
    }
    fn rt_cpu(&self) -> String {
        cpus::online(&Host::real())
            .unwrap()
            .iter()
            .last()
            .unwrap()
            .to_string()
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        // Whatever happened, leave nothing behind.
        let o = out(rtmgr(&["partition", "reset"], &self.journal()));
        assert!(
            o.status.success(),
            "cleanup reset failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

fn assert_restored(before: &MachineState, what: &str) {
    let after = snapshot::capture(&Host::real());
    let d = before.diff(&after);
    assert!(
        d.is_empty(),
        "{what}: machine not restored:\n{}",
        d.join("\n")
    );
}

/// The run-time knobs took effect where this machine has their files (the
/// files it lacks are said "not available" in the report).
fn assert_run_time_knobs(host: &Host, rt: &rtmgr_core::CpuSet, report: &serde_json::Value) {
    let nrt = cpus::online(host).unwrap().difference(rt);
    let read = |p: &str| host.read_opt(p).map(|t| t.trim().to_string());
    let mask = |p: &str| read(p).map(|t| rtmgr_core::CpuSet::parse_mask(&t).unwrap());
    let expect = [
        ("/proc/sys/kernel/timer_migration", "0".to_string()),
        ("/proc/sys/vm/stat_interval", "10".to_string()),
        ("/proc/sys/kernel/watchdog_cpumask", nrt.to_list()),
    ];
    for (path, want) in expect {
        match read(path) {
            Some(v) => assert_eq!(v, want, "{path}"),
            None => eprintln!("skip: no {path} on this machine"),
        }
    }
    for path in [
        "/sys/class/net/lo/queues/rx-0/rps_cpus",
        "/sys/devices/virtual/workqueue/cpumask",
        "/sys/devices/virtual/workqueue/writeback/cpumask",
    ] {
        match mask(path) {
            Some(m) => assert_eq!(m, nrt, "{path}"),
            None => eprintln!("skip: no {path} on this machine"),
        }
    }
    let knobs = report["knobs"].as_array().expect("knob reports");
    let names: Vec<&str> = knobs.iter().filter_map(|k| k["knob"].as_str()).collect();
    for k in [
        "cgroups",
        "rps",
        "block",
        "timer_migration",
        "watchdog",
        "cpuidle",
        "preempt",
    ] {
        assert!(names.contains(&k), "no report for {k}: {names:?}");
    }
    assert!(report["boot"].as_array().is_some_and(|b| b.len() == 4));
}

#[test]
fn bad_input_is_one_line_exit_2_and_changes_nothing() {
    // The before/after snapshots compare the whole machine: no other rtmgr
    // (test or measurement) may change it meanwhile.
    let _lock = MachineLock::acquire(Path::new(DEFAULT_LOCK_PATH)).expect("machine lock");
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("j.jsonl");
    let host = Host::real();
    let online = cpus::online(&host).unwrap();
    let all = online.to_list();
    let offline = (online.iter().last().unwrap() + 1).to_string();
    let cfg_unknown = dir.path().join("unknown.toml");
    std::fs::write(&cfg_unknown, "rt_cpus = \"1\"\nrt_cpu = \"1\"\n").unwrap();
    let cfg_bad = dir.path().join("bad.toml");
    std::fs::write(&cfg_bad, "rt_cpus = \"1-\"\n").unwrap();
    let cfg_missing = dir.path().join("absent.toml");
    // IRQ numbers the machine does not have, in either exception list.
    let no_irq = rtmgr_linux::irq::numbers(&host)
        .unwrap()
        .last()
        .copied()
        .unwrap_or(0)
        + 1000;
    let rt_cpu = online.iter().last().unwrap();
    let cfg_irq_rt = dir.path().join("irq-rt.toml");
    std::fs::write(
        &cfg_irq_rt,
        format!("rt_cpus = \"{rt_cpu}\"\n[irq]\nrt = [{no_irq}]\n"),
    )
    .unwrap();
    let cfg_irq_leave = dir.path().join("irq-leave.toml");
    std::fs::write(
        &cfg_irq_leave,
        format!("rt_cpus = \"{rt_cpu}\"\n[irq]\nleave = [{no_irq}]\n"),
    )
    .unwrap();
    let cfg_knob = dir.path().join("knob.toml");
    std::fs::write(
        &cfg_knob,
        "rt_cpus = \"1\"\nknobs = [\"cgroups\", \"frobnicate\"]\n",
    )
    .unwrap();
    let cfg_no_cgroups = dir.path().join("nocg.toml");
    std::fs::write(
        &cfg_no_cgroups,
        "rt_cpus = \"1\"\nknobs = [\"tasks\", \"rps\"]\n",
    )
    .unwrap();
    let too_many = format!("auto:{}", online.len());
    let cases: Vec<(&str, Vec<String>)> = vec![
        ("malformed list", vec!["--rt-cpus".into(), "1-x".into()]),
        ("reversed range", vec!["--rt-cpus".into(), "3-1".into()]),
        ("offline CPU", vec!["--rt-cpus".into(), offline.clone()]),
        ("all CPUs RT", vec!["--rt-cpus".into(), all.clone()]),
        ("empty RT list", vec!["--rt-cpus".into(), "".into()]),
        ("no RT CPU at all", vec![]),
        (
            "unknown config key",
            vec!["--config".into(), cfg_unknown.display().to_string()],
        ),
        (
            "malformed list in config",
            vec!["--config".into(), cfg_bad.display().to_string()],
        ),
        (
            "missing config file",
            vec!["--config".into(), cfg_missing.display().to_string()],
        ),
        (
            "IRQ in [irq] rt that does not exist",
            vec!["--config".into(), cfg_irq_rt.display().to_string()],
        ),
        (
            "IRQ in [irq] leave that does not exist",
            vec!["--config".into(), cfg_irq_leave.display().to_string()],
        ),
        (
            "unknown knob",
            vec!["--config".into(), cfg_knob.display().to_string()],
        ),
        (
            "knobs without cgroups",
            vec!["--config".into(), cfg_no_cgroups.display().to_string()],
        ),
        ("auto:0", vec!["--rt-cpus".into(), "auto:0".into()]),
        (
            "auto:N >= online",
            vec!["--rt-cpus".into(), too_many.clone()],
        ),
        ("auto:garbage", vec!["--rt-cpus".into(), "auto:x".into()]),
        (
            "unknown preemption model",
            vec![
                "--rt-cpus".into(),
                "1".into(),
                "--preempt".into(),
                "none".into(),
            ],
        ),
    ];
    let before = snapshot::capture(&host);
    for (what, extra) in &cases {
        let mut args = vec!["partition", "apply"];
        args.extend(extra.iter().map(String::as_str));
        let o = out(rtmgr(&args, &journal));
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{what}: exit {:?}, stderr {err}",
            o.status
        );
        assert_eq!(
            err.lines().count(),
            1,
            "{what}: want one error line, got: {err}"
        );
        assert!(err.starts_with("rtmgr: error:"), "{what}: {err}");
        if what.starts_with("IRQ") {
            assert!(
                err.contains(&format!("IRQ {no_irq} in [irq]")),
                "{what}: {err}"
            );
        }
        assert!(!journal.exists(), "{what}: journal created");
    }
    assert_restored(&before, "after bad input");

    // Not root: refused before anything changes.
    if is_root() {
        let o = Command::new("setpriv")
            .args([
                "--reuid=65534",
                "--regid=65534",
                "--clear-groups",
                BIN,
                "partition",
                "apply",
                "--rt-cpus",
                "1",
            ])
            .arg("--journal")
            .arg(&journal)
            .output();
        if let Ok(o) = o {
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "not root: {err}");
            assert!(err.contains("needs root"), "{err}");
            assert_eq!(err.lines().count(), 1, "{err}");
        }
    } else {
        let o = out(rtmgr(&["partition", "apply", "--rt-cpus", "1"], &journal));
        assert_eq!(o.status.code(), Some(2));
    }
    assert_restored(&before, "after not-root");

    // No cpuset controller anywhere (a fake machine with cgroup v2 lacking cpuset).
    let fake = FakeMachine::new(2)
        .cgroup(FakeCgroup::V2NoCpuset)
        .typical_tasks()
        .build();
    let fake_before = snapshot::capture(&fake.host());
    let mut c = rtmgr(
        &["partition", "apply", "--rt-cpus", "1"],
        Path::new("/run/rtmgr/journal.jsonl"),
    );
    c.env("RTMGR_SYSROOT", fake.root());
    let o = out(c);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no cpuset controller"), "{err}");
    assert!(fake_before
        .diff(&snapshot::capture(&fake.host()))
        .is_empty());
    assert!(!fake.host().exists("/run/rtmgr"));
}

#[test]
fn fake_v2_machine_through_the_cli() {
    let fake = FakeMachine::new(4)
        .cgroup(FakeCgroup::V2)
        .typical_tasks()
        .build();
    let before = snapshot::capture(&fake.host());
    let j = Path::new("/run/rtmgr/journal.jsonl");
    let run = |args: &[&str]| {
        let mut c = rtmgr(args, j);
        c.env("RTMGR_SYSROOT", fake.root());
        out(c)
    };
    let o = run(&["partition", "apply", "--rt-cpus", "3", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(report["layout"], "v2");
    assert_eq!(report["partition_state"], "isolated");
    let o = run(&["partition", "apply", "--rt-cpus", "3"]);
    assert_eq!(o.status.code(), Some(2), "second apply must be refused");
    let o = run(&["partition", "show", "--json"]);
    let shown: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(shown["rt_cpus"], "3");
    assert_eq!(shown["complete"], true);
    let o = run(&["partition", "reset"]);
    assert!(o.status.success());
    assert!(before.diff(&snapshot::capture(&fake.host())).is_empty());
}

#[test]
fn live_apply_run_and_reset_leave_no_trace() {
    let Some(live) = Live::new() else { return };
    let host = Host::real();
    let rt = live.rt_cpu();
    let before = snapshot::capture(&host);
    let o = out(rtmgr(
        &["partition", "apply", "--rt-cpus", &rt, "--json"],
        &live.journal(),
    ));
    assert!(
        o.status.success(),
        "apply: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let refused: Vec<String> = report["not_moved"]
        .as_object()
        .map(|m| {
            m.values()
                .flat_map(|v| v.as_array().cloned().unwrap_or_default())
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let rt_set = rtmgr_core::CpuSet::parse_list(&rt).unwrap();
    assert_run_time_knobs(&host, &rt_set, &report);

    // No movable IRQ on the RT CPU.
    for n in rtmgr_linux::irq::numbers(&host).unwrap() {
        let aff = rtmgr_linux::irq::affinity(&host, n).unwrap();
        if !aff.is_disjoint(&rt_set) {
            assert!(
                refused.iter().any(|r| r.starts_with(&format!("{n} "))),
                "IRQ {n} still on the RT CPU and not reported"
            );
        }
    }
    // No movable task on the RT CPU.
    for t in rtmgr_linux::tasks::all(&host).unwrap() {
        if t.no_setaffinity || t.comm.starts_with("irq/") {
            continue;
        }
        if let Ok(aff) = host.get_affinity(t.tid) {
            assert!(
                aff.is_disjoint(&rt_set),
                "task {} {} still may run on RT CPU: {aff}",
                t.tid,
                t.comm
            );
        }
    }
    // An RT0 program runs there at the top priority, in the RT cpuset.
    let o = out(rtmgr(
        &[
            "run",
            "--class",
            "rt0",
            "--cpu",
            &rt,
            "--mlock",
            "--",
            "sh",
            "-c",
            "cat /proc/$$/stat /proc/$$/status /proc/$$/cpuset",
        ],
        &live.journal(),
    ));
    assert!(
        o.status.success(),
        "run: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let text = String::from_utf8_lossy(&o.stdout);
    let stat = text.lines().next().unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    assert_eq!(fields[37], "99", "rt_priority");
    assert_eq!(fields[38], "1", "policy SCHED_FIFO");
    assert!(
        text.contains(&format!("Cpus_allowed_list:\t{rt}\n")),
        "{text}"
    );
    assert!(text.lines().any(|l| l == "/rtmgr-rt"), "{text}");
    let locked: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("VmLck:"))
        .unwrap()
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()
        .unwrap();
    assert!(locked > 0, "--mlock did not lock memory");
    // Exit status and signals are passed on.
    let o = out(rtmgr(
        &["run", "--class", "linux", "--", "sh", "-c", "exit 7"],
        &live.journal(),
    ));
    assert_eq!(o.status.code(), Some(7));
    let o = out(rtmgr(
        &["run", "--class", "linux", "--", "sh", "-c", "kill -TERM $$"],
        &live.journal(),
    ));
    assert_eq!(o.status.signal(), Some(libc::SIGTERM));

    let o = out(rtmgr(&["partition", "reset"], &live.journal()));
    assert!(
        o.status.success(),
        "reset: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_restored(&before, "after reset");
    let o = out(rtmgr(&["partition", "reset"], &live.journal()));
    assert!(o.status.success(), "second reset must be a no-op");
    assert_restored(&before, "after second reset");
}

#[test]
fn kill_9_during_apply_then_reset_restores_everything() {
    let Some(live) = Live::new() else { return };
    let host = Host::real();
    let rt = live.rt_cpu();
    let mut points = vec![
        "begin",
        "cgroups",
        "tasks-half",
        "tasks",
        "irqs-half",
        "irqs",
        "defaults",
        "workqueues",
        "rps",
        "block",
        "timer_migration",
        "stat_interval",
        "watchdog",
        "cpuidle",
        "cpufreq",
        "preempt",
    ];
    // Half-way through a knob's files, where this machine has them.
    for (point, file) in [
        ("workqueues-half", "/sys/devices/virtual/workqueue/cpumask"),
        ("rps-half", "/sys/class/net/lo/queues/rx-0/rps_cpus"),
        ("timer_migration-half", "/proc/sys/kernel/timer_migration"),
        ("watchdog-half", "/proc/sys/kernel/watchdog_cpumask"),
    ] {
        if host.exists(file) {
            points.push(point);
        } else {
            eprintln!("skip crash point {point}: no {file} here");
        }
    }
    for point in points {
        let before = snapshot::capture(&host);
        let o = out({
            let mut c = rtmgr(
                &["partition", "apply", "--rt-cpus", &rt, "--preempt", "full"],
                &live.journal(),
            );
            c.env("RTMGR_TEST_CRASH_AT", point);
            c
        });
        assert_eq!(
            o.status.signal(),
            Some(libc::SIGKILL),
            "{point}: apply was not killed: {o:?}"
        );
        let o = out(rtmgr(&["partition", "show"], &live.journal()));
        assert!(
            String::from_utf8_lossy(&o.stdout).contains("INCOMPLETE"),
            "{point}: show must flag the interrupted apply"
        );
        let o = out(rtmgr(
            &["run", "--class", "rt0", "--cpu", &rt, "--", "true"],
            &live.journal(),
        ));
        assert_eq!(
            o.status.code(),
            Some(2),
            "{point}: run must refuse an incomplete partition"
        );
        let o = out(rtmgr(&["partition", "reset"], &live.journal()));
        assert!(
            o.status.success(),
            "{point}: reset failed: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_restored(&before, point);
        assert!(!live.journal().exists(), "{point}: journal left behind");
    }
}

#[test]
fn live_preempt_is_set_for_the_partition_or_said_once() {
    let Some(live) = Live::new() else { return };
    let host = Host::real();
    let rt = live.rt_cpu();
    let before = snapshot::capture(&host);
    let model_before = host.read_debugfs("sched/preempt");
    let o = out(rtmgr(
        &[
            "partition",
            "apply",
            "--rt-cpus",
            &rt,
            "--preempt",
            "full",
            "--json",
        ],
        &live.journal(),
    ));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let report: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let k = report["knobs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["knob"] == "preempt")
        .cloned()
        .unwrap();
    if k["available"] == true {
        let now = host.read_debugfs("sched/preempt").unwrap_or_default();
        assert!(now.contains("(full)"), "{now}");
    } else {
        eprintln!("preempt not settable here: {}", k["lines"][0]);
        assert_eq!(k["lines"].as_array().unwrap().len(), 1, "said once: {k}");
    }
    let o = out(rtmgr(&["partition", "reset"], &live.journal()));
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(host.read_debugfs("sched/preempt"), model_before);
    assert_restored(&before, "after preempt reset");
}
