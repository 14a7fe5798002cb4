//! The built-in loads as real processes (`rtmgr __load`, started through the
//! library as rtmgr starts them): each load starts, reports its operations,
//! stops and leaves nothing behind; its own timeout and its parent's death
//! end it even when nobody stops it; and (root) it runs as SCHED_IDLE guests
//! inside the RT cpuset of a partition when asked.

mod measure_common;
use measure_common::live_ready;
use rtmgr_core::partition::{validate, PartitionConfig};
use rtmgr_core::CpuSet;
use rtmgr_lab::load::{LoadEngine, LoadKind, ALL_KINDS};
use rtmgr_lab::measure::builtin::{WorkerReport, METRICS_FILE, WORKER_COMMAND};
use rtmgr_lab::measure::load::{LoadProgram, LoadSpec, RunningLoad};
use rtmgr_linux::partition::{self, ApplyOptions, PartitionGuard, Role};
use rtmgr_linux::{cgroup, cpus, sched, tasks, Host};
use rtmgr_sys::process;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rtmgr");

/// The tests look for leftovers among all processes: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn program() -> LoadProgram {
    LoadProgram::Builtin(PathBuf::from(BIN))
}

/// Load directories of this test process left in the temporary directory.
fn leftover_dirs() -> Vec<String> {
    let prefix = format!("rtmgr-load-{}-", std::process::id());
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

/// Wait up to `limit` for the process group to be gone.
fn gone_within(pgid: u32, limit: Duration) -> bool {
    let end = Instant::now() + limit;
    while process::exists(-(pgid as i32)) {
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

fn spec(kind: LoadKind, program: &LoadProgram) -> LoadSpec<'_> {
    LoadSpec {
        kind,
        program,
        cpus: CpuSet::single(0),
        instances: None,
        sched_idle: false,
        max_duration: Duration::from_secs(30),
        before_run: None,
    }
}

#[test]
fn each_builtin_load_starts_reports_stops_and_leaves_nothing() {
    let _serial = serial();
    let program = program();
    for kind in ALL_KINDS.into_iter().chain([LoadKind::All]) {
        let mut load = RunningLoad::start(spec(kind, &program)).unwrap();
        assert_eq!(load.engine(), LoadEngine::Builtin);
        let pgid = load.pid().unwrap();
        std::thread::sleep(Duration::from_millis(800));
        assert!(load.alive(), "{kind}: the load died at start");
        assert_eq!(
            sched::get_affinity(pgid).unwrap(),
            CpuSet::single(0),
            "{kind}: not pinned"
        );
        let metrics = load.stop().unwrap();
        let components = match kind {
            LoadKind::Locks => 2,
            LoadKind::All => 6,
            _ => 1,
        };
        assert_eq!(metrics.len(), components, "{kind}: {metrics:?}");
        for m in &metrics {
            assert!(m.ops > 0 && m.ops_per_s > 0.0, "{kind}: {m:?}");
        }
        assert!(!process::exists(-(pgid as i32)), "{kind}: process left");
        assert!(leftover_dirs().is_empty(), "{kind}: {:?}", leftover_dirs());
    }
}

#[test]
fn a_dropped_builtin_load_is_killed_with_its_group() {
    let _serial = serial();
    let program = program();
    let load = RunningLoad::start(spec(LoadKind::Network, &program)).unwrap();
    let pgid = load.pid().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    drop(load);
    assert!(!process::exists(-(pgid as i32)));
    assert!(leftover_dirs().is_empty());
}

fn worker(dir: &Path, timeout_s: u64) -> Vec<String> {
    let d = dir.display().to_string();
    let t = timeout_s.to_string();
    [
        WORKER_COMMAND,
        "--kind",
        "all",
        "--instances",
        "1",
        "--dir",
        &d,
        "--timeout-s",
        &t,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[test]
fn its_timeout_ends_a_builtin_load_nobody_stops() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    let t0 = Instant::now();
    let st = Command::new(BIN)
        .args(worker(dir.path(), 1))
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success(), "{st:?}");
    // 1 s of load plus the threads' stop; far from any other bound.
    assert!(t0.elapsed() < Duration::from_secs(8), "{:?}", t0.elapsed());
    let text = std::fs::read_to_string(dir.path().join(METRICS_FILE)).unwrap();
    let r: WorkerReport = serde_json::from_str(&text).unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.components.len(), 6);
    assert!(r.elapsed_ns >= 1_000_000_000);
}

#[test]
fn a_builtin_load_ends_soon_after_its_parent_is_killed() {
    let _serial = serial();
    let dir = tempfile::tempdir().unwrap();
    // A parent that starts the load (timeout 60 s) and is then SIGKILLed.
    let mut parent = Command::new("/bin/sh")
        .arg("-c")
        .arg("\"$@\" & echo $!; wait")
        .arg("sh")
        .arg(BIN)
        .args(worker(dir.path(), 60))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(parent.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    let pid: i32 = line.trim().parse().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(process::exists(pid), "the load should be running");
    process::kill(parent.id() as i32, libc::SIGKILL).unwrap();
    parent.wait().unwrap();
    let end = Instant::now() + Duration::from_secs(8);
    while process::exists(pid) && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!process::exists(pid), "the orphaned load kept running");
    assert!(
        !dir.path().exists(),
        "an orphaned load removes its directory"
    );
}

#[test]
fn builtin_guests_run_sched_idle_inside_the_rt_cpuset() {
    let _serial = serial();
    let Some(_live) = live_ready("builtin_guests_run_sched_idle_inside_the_rt_cpuset") else {
        return;
    };
    let host = Host::real();
    let online = cpus::online(&host).unwrap();
    if partition::layout(&host).is_err() || online.len() < 2 {
        eprintln!("skip: needs a cpuset controller and 2 CPUs");
        return;
    }
    let journal = tempfile::tempdir().unwrap();
    let rt = CpuSet::single(online.iter().last().unwrap());
    let plan = validate(&PartitionConfig::default(), Some(&rt), &online).unwrap();
    let guard = PartitionGuard::apply(
        &host,
        &plan,
        &ApplyOptions {
            journal: journal.path().join("journal"),
            replace: false,
        },
    )
    .unwrap();
    let applied = guard.applied().clone();
    let program = program();
    let enter = |pid: u32| {
        partition::enter(&host, &applied, Role::Rt, pid)
            .map_err(|e| rtmgr_lab::measure::MeasureError::Setup(e.to_string()))
    };
    let mut load = RunningLoad::start(LoadSpec {
        kind: LoadKind::All,
        program: &program,
        cpus: rt.clone(),
        instances: None,
        sched_idle: true,
        max_duration: Duration::from_secs(30),
        before_run: Some(&enter),
    })
    .unwrap();
    let pid = load.pid().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(load.alive());
    let threads = tasks::threads_of(&host, pid);
    assert!(threads.len() > 6, "{threads:?}");
    let rt_cgroup = applied.rt_cgroup.display().to_string();
    for tid in threads {
        assert_eq!(
            sched::get_policy(tid).unwrap(),
            sched::Policy::Idle,
            "{tid}"
        );
        assert_eq!(sched::get_affinity(tid).unwrap(), rt, "{tid}");
        let cg = cgroup::task_cgroup(&host, &applied.layout, tid).unwrap();
        assert!(rt_cgroup.ends_with(&cg), "{tid} in {cg}, not {rt_cgroup}");
    }
    let metrics = load.stop().unwrap();
    assert_eq!(metrics.len(), 6);
    assert!(gone_within(pid, Duration::ZERO));
    guard.reset().unwrap();
    assert!(leftover_dirs().is_empty());
}
