//! Helpers shared by the measure_* and evaluate_* integration tests: running the
//! rtmgr binary with a private TMPDIR (so the loads it starts — stress-ng or
//! the built-in ones — can be found by command line), and checking that
//! nothing was left behind.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

pub fn is_root() -> bool {
    rtmgr_sys::process::is_root()
}

/// At least 2 online CPUs (not this process's affinity, which a partition
/// may narrow); else a printed skip for `what`.
pub fn two_cpus(what: &str) -> bool {
    let n = std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| s.trim().parse::<rtmgr_core::CpuSet>().ok())
        .map(|c| c.len())
        .unwrap_or(1);
    if n < 2 {
        eprintln!("skip: {what} needs 2 CPUs");
    }
    n >= 2
}

pub fn have(tool: &str) -> bool {
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
        .unwrap_or(false)
}

/// A live test's hold on the machine: the machine lock for the test's whole
/// duration (the rtmgr it runs is told so with RTMGR_LOCK_HELD).
pub struct Live {
    _lock: rtmgr_linux::lock::MachineLock,
}

fn foreign_partition() -> Option<String> {
    let rd = std::fs::read_dir("/sys/fs/cgroup/cpuset").ok()?;
    rd.flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("rtmgr"))
}

/// Root, the machine lock taken and no partition applied by someone else; or
/// None after printing why the test skips. (Loads need nothing installed: the
/// built-in engine runs them when stress-ng is absent.)
pub fn live_ready(test: &str) -> Option<Live> {
    if !is_root() {
        eprintln!("skip {test}: needs root (SCHED_FIFO, cpusets)");
        return None;
    }
    let lock = rtmgr_linux::lock::MachineLock::acquire(std::path::Path::new(
        rtmgr_linux::lock::DEFAULT_LOCK_PATH,
    ))
    .expect("machine lock");
    if let Some(cg) = foreign_partition() {
        eprintln!("skip {test}: a partition applied by someone else is in place (cgroup {cg})");
        return None;
    }
    Some(Live { _lock: lock })
}

pub fn rtmgr(tmp: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_rtmgr"));
    c.env("TMPDIR", tmp)
        .env("RTMGR_LOCK_HELD", "1")
        .current_dir(tmp);
    c
}

pub fn run(tmp: &Path, args: &[&str]) -> Output {
    rtmgr(tmp).args(args).output().expect("run rtmgr")
}

/// The command exited 0, else fail with its stderr.
pub fn assert_succeeded(out: &Output) {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub fn spawn(tmp: &Path, args: &[&str]) -> Child {
    rtmgr(tmp)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rtmgr")
}

/// The engine rtmgr picks by default here.
pub fn default_engine() -> &'static str {
    if have("stress-ng") {
        "stress-ng"
    } else {
        "builtin"
    }
}

/// Processes whose command line mentions `tmp` (the loads rtmgr started there).
pub fn processes_mentioning(tmp: &Path) -> Vec<u32> {
    let needle = tmp.display().to_string();
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(&needle))
                .unwrap_or(false)
        })
        .collect()
}

/// `rtmgr measure latency` for 60 s under the load `load` flags say, its report
/// r.json in `tmp`; returns once the load runs.
pub fn spawn_under_load(tmp: &Path, load: &[&str]) -> Child {
    let mut args = vec![
        "measure",
        "latency",
        "--duration",
        "60s",
        "--json",
        "r.json",
    ];
    args.extend(load);
    let child = spawn(tmp, &args);
    let t0 = Instant::now();
    while processes_mentioning(tmp).is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(10), "no load started");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

/// Wait for `child` up to `limit`; its exit code.
pub fn wait(child: &mut Child, limit: Duration) -> i32 {
    let end = Instant::now() + limit;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code().unwrap_or(-1);
        }
        assert!(Instant::now() < end, "rtmgr did not finish in {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn sigint(child: &Child) {
    let _ = rtmgr_sys::process::kill(child.id() as i32, libc::SIGINT);
}

pub fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// The report's summary n equals its histogram's total, and per-bucket counts add up.
pub fn check_result(r: &serde_json::Value) -> u64 {
    let n = r["summary"]["n"].as_u64().unwrap();
    assert_eq!(r["hist"]["n"].as_u64().unwrap(), n);
    let sum: u64 = r["hist"]["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b[1].as_u64().unwrap())
        .sum();
    assert_eq!(sum, n);
    assert!(r["summary"]["missed"].as_u64().unwrap() <= n);
    n
}

/// The machine is as before: no partition journal, no rtmgr cgroups.
pub fn assert_machine_restored() {
    assert!(
        !Path::new("/run/rtmgr/journal.jsonl").exists(),
        "journal left behind"
    );
    for root in [
        "/sys/fs/cgroup/cpuset",
        "/sys/fs/cgroup/unified",
        "/sys/fs/cgroup",
    ] {
        if let Ok(rd) = std::fs::read_dir(root) {
            for e in rd.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                assert!(!name.contains("rtmgr"), "cgroup {root}/{name} left behind");
            }
        }
    }
}

/// The names of the entries of `dir`, sorted.
pub fn file_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

pub fn path(tmp: &Path, name: &str) -> PathBuf {
    tmp.join(name)
}
