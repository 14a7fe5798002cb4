use super::*;
use std::time::Duration;

fn args(kind: LoadKind, dir: &Path) -> WorkerArgs {
    WorkerArgs {
        kind,
        instances: 2,
        dir: dir.to_path_buf(),
        timeout: Duration::from_secs(20),
    }
}

/// Run `kind` in this process for `ms`, then stop it as SIGINT would.
fn run_for(kind: LoadKind, ms: u64) -> (WorkerReport, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let timer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(ms));
        s.store(true, Ordering::Relaxed);
    });
    let report = run(&args(kind, dir.path()), stop);
    timer.join().unwrap();
    (report, dir)
}

#[test]
fn arguments_round_trip_and_bad_ones_are_refused() {
    let a = args(LoadKind::All, Path::new("/tmp/rtmgr-load-x"));
    assert_eq!(WorkerArgs::parse(&a.to_args()), Ok(a));
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    assert!(WorkerArgs::parse(&s(&["--kind", "all"])).is_err());
    assert!(WorkerArgs::parse(&s(&["--kind", "nope", "--instances", "1"])).is_err());
    let zero = s(&[
        "--kind",
        "io",
        "--instances",
        "0",
        "--dir",
        "/d",
        "--timeout-s",
        "1",
    ]);
    assert!(WorkerArgs::parse(&zero).is_err());
    assert!(WorkerArgs::parse(&s(&["--kind"])).is_err());
    assert!(WorkerArgs::parse(&s(&["--frobnicate", "1"])).is_err());
}

#[test]
fn each_load_counts_its_components_and_stops() {
    let cases = [
        (LoadKind::Compute, vec![compute::NAME]),
        (LoadKind::Io, vec![io::NAME]),
        (LoadKind::Network, vec![net::NAME]),
        (LoadKind::Locks, vec![locks::FUTEX, locks::FILE]),
        (LoadKind::Cache, vec![cache::NAME]),
    ];
    for (kind, names) in cases {
        let t = Instant::now();
        let (r, dir) = run_for(kind, 1000);
        assert!(t.elapsed() < Duration::from_secs(5), "{kind}: slow stop");
        assert!(r.errors.is_empty(), "{kind}: {:?}", r.errors);
        let got: Vec<&str> = r.components.iter().map(|c| c.component.as_str()).collect();
        assert_eq!(got, names, "{kind}");
        for c in &r.components {
            assert!(c.ops > 0 && c.ops_per_s > 0.0, "{kind}: {c:?}");
            assert!(!c.op.is_empty());
        }
        // The I/O files are removed by their workers (the lock file stays in
        // the directory, which the starter removes).
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with("io-"))
            .collect();
        assert!(left.is_empty(), "{kind}: {left:?}");
    }
}

#[test]
fn all_runs_the_five_loads_and_the_timeout_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut a = args(LoadKind::All, dir.path());
    a.timeout = Duration::from_secs(1);
    let t = Instant::now();
    let r = run(&a, Arc::new(AtomicBool::new(false)));
    assert!(t.elapsed() < Duration::from_secs(6), "{:?}", t.elapsed());
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.components.len(), 6);
    assert!(r.components.iter().all(|c| c.ops > 0), "{:?}", r.components);
}

#[test]
fn a_failing_worker_stops_the_load_with_its_error() {
    // The I/O load cannot create its files in a directory that does not exist.
    let dir = tempfile::tempdir().unwrap();
    let gone = dir.path().join("absent");
    let r = run(&args(LoadKind::Io, &gone), Arc::new(AtomicBool::new(false)));
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert!(
        r.errors[0].starts_with("start the io load"),
        "{:?}",
        r.errors
    );
}

#[test]
fn cache_walk_touches_every_line_and_sizes_follow_the_llc() {
    let words = 4096 * 8; // 256 KiB: 4096 lines
    let mut buffer = vec![0u64; words];
    let mut at = 0;
    for _ in 0..8 {
        at = cache::walk(&mut buffer, at);
    }
    // 8 × 4096 accesses over 4096 lines at a stride coprime to their number.
    let touched = (0..words).step_by(8).filter(|&i| buffer[i] > 0);
    assert_eq!(touched.count(), 4096);
    assert_eq!(cache::parse_size("16384K"), Some(16 << 20));
    assert_eq!(cache::parse_size("32M"), Some(32 << 20));
    assert_eq!(cache::parse_size("x"), None);
    assert_eq!(cache::buffer_bytes(16 << 20), 32 << 20);
    assert_eq!(cache::buffer_bytes(1 << 20), 8 << 20);
    assert_eq!(cache::buffer_bytes(1 << 40), 512 << 20);
}

#[test]
fn compute_rounds_depend_on_their_input() {
    assert_ne!(compute::rounds(1, 1.0), compute::rounds(2, 1.0));
}
