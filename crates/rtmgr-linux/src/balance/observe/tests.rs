//! The observer against a /proc written by hand: what it reads, and when.

use super::*;
use rtmgr_core::balance::Observation;

/// A /proc with tasks of one process (pid 100), written by hand.
struct FakeProc {
    dir: tempfile::TempDir,
}

impl FakeProc {
    fn new() -> Self {
        let f = FakeProc {
            dir: tempfile::tempdir().unwrap(),
        };
        f.write(
            "stat",
            "cpu  0 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0\ncpu1 0 0 0 0 0 0 0\n",
        );
        f.loadavg(1, 100);
        f.pressure(0);
        f
    }
    fn write(&self, rel: &str, text: &str) {
        let p = self.dir.path().join("proc").join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    fn loadavg(&self, running: u64, last_pid: u64) {
        self.write(
            "loadavg",
            &format!("0.00 0.00 0.00 {running}/300 {last_pid}\n"),
        );
    }
    fn pressure(&self, total_us: u64) {
        self.write(
            "pressure/cpu",
            &format!("some avg10=0.00 avg60=0.00 avg300=0.00 total={total_us}\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
        );
    }
    /// Task `tid` of pid 100: state, CPU time so far (ms) split
    /// user/kernel as ticks, run-queue wait (ms).
    fn task(&self, tid: u32, state: char, run_ms: u64, wait_ms: u64) {
        // Switched in once per ms it ran (1000/s while running).
        self.task_switched(tid, state, run_ms, wait_ms, run_ms);
    }
    fn task_switched(&self, tid: u32, state: char, run_ms: u64, wait_ms: u64, slices: u64) {
        let d = format!("100/task/{tid}");
        let ticks = run_ms / 10;
        self.write(
            &format!("{d}/stat"),
            &format!("{tid} (t{tid}) {state} 1 100 100 0 -1 0 0 0 0 0 {ticks} 0 0 0 20 0 1 0 {} 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n", 5000 + tid),
        );
        self.write(
            &format!("{d}/schedstat"),
            &format!("{} {} {slices}\n", run_ms * 1_000_000, wait_ms * 1_000_000),
        );
        self.write(
            &format!("{d}/status"),
            "Name:\tt\nCpus_allowed_list:\t0\nvoluntary_ctxt_switches:\t3\nnonvoluntary_ctxt_switches:\t1\n",
        );
    }
    fn observer(&self) -> Observer {
        let mut o = Observer::new(
            self.dir.path(),
            CpuSet::single(1),
            CpuSet::single(0),
            Scope::All,
        );
        o.own_pid = 1; // pid 100 is not this process
        o.set_scan_every(2);
        o
    }
}

const T: u64 = 50_000_000;

fn sample(o: &mut Observer, i: u64) -> Observation {
    o.sample(i * T, T, &BTreeMap::new(), &BTreeMap::new())
}

fn obs_task(obs: &Observation, tid: u64) -> Option<&TaskObs> {
    obs.tasks.iter().find(|t| t.id == tid)
}

#[test]
fn full_scans_read_stat_only_of_tasks_that_ran_or_waited() {
    let f = FakeProc::new();
    f.task(101, 'S', 100, 0);
    f.task(102, 'S', 100, 0);
    let mut o = f.observer();
    sample(&mut o, 0); // full: both fresh, everything read
    assert!(o.last.listed);
    assert_eq!(o.known_tasks(), 2);
    sample(&mut o, 1); // between scans: nobody hot
    assert_eq!(o.last.reads, 0);
    f.task(102, 'S', 160, 5); // 102 ran 60 ms, 101 slept
    f.pressure(100_000); // tasks waited: not calm
    let obs = sample(&mut o, 2);
    assert!(!o.last.listed, "no new pid: /proc not listed again");
    // 101: schedstat only; 102: schedstat + stat + status.
    assert_eq!(o.last.reads, 4);
    assert!(obs_task(&obs, 101).is_none(), "a sleeping task is left out");
    let t = obs_task(&obs, 102).expect("the task that ran is observed");
    assert_eq!(t.user_ns + t.kernel_ns, 60_000_000);
    assert_eq!(t.place, Place::Nrt);
    // 102 is hot now: read between full scans too, 101 is not. It was
    // switched in 4 times in 50 ms (80/s): too few for status to be
    // worth reading, the switch-ins stand for its voluntary switches.
    f.task_switched(102, 'R', 200, 5, 164);
    let obs = sample(&mut o, 3);
    assert_eq!(o.last.reads, 2);
    let t = obs_task(&obs, 102).unwrap();
    assert!(t.runnable);
    assert_eq!((t.voluntary, t.involuntary), (4, 0));
}

#[test]
fn proc_is_listed_again_only_after_a_new_pid() {
    let f = FakeProc::new();
    f.task(101, 'S', 0, 0);
    let mut o = f.observer();
    sample(&mut o, 0);
    f.task(103, 'R', 0, 0);
    f.pressure(1_000_000);
    sample(&mut o, 1);
    sample(&mut o, 2);
    assert_eq!(o.known_tasks(), 1, "loadavg's last pid did not move");
    f.loadavg(2, 103);
    f.pressure(2_000_000);
    sample(&mut o, 3);
    sample(&mut o, 4);
    assert!(o.last.listed);
    assert_eq!(o.known_tasks(), 2);
    // A task that is gone is forgotten and its files closed. (The kernel
    // fails reads of a dead task's open files; the fake empties them.)
    let open = o.open_files();
    for name in ["stat", "schedstat", "status"] {
        f.write(&format!("100/task/103/{name}"), "");
    }
    std::fs::remove_dir_all(f.dir.path().join("proc/100/task/103")).unwrap();
    f.pressure(3_000_000);
    sample(&mut o, 5);
    sample(&mut o, 6);
    assert_eq!(o.known_tasks(), 1);
    assert!(o.open_files() < open, "{} -> {}", open, o.open_files());
}

#[test]
fn calm_machine_skips_full_scans_but_reads_hot_tasks() {
    let f = FakeProc::new();
    f.task(101, 'S', 0, 0);
    f.task(102, 'R', 0, 0);
    let mut o = f.observer();
    sample(&mut o, 0);
    f.task(101, 'S', 30, 0); // ran, but nobody waited for a CPU
    f.task(102, 'R', 40, 0);
    sample(&mut o, 1); // 102 was runnable: hot
    let obs = sample(&mut o, 2);
    assert!(o.last.skipped, "no CPU pressure: full scan skipped");
    assert!(obs_task(&obs, 101).is_none(), "cold task not read");
    assert!(obs_task(&obs, 102).is_some());
    f.pressure(500_000); // 0.5 s of waiting since: scan
    sample(&mut o, 3);
    let obs = sample(&mut o, 4);
    assert!(!o.last.skipped);
    assert!(obs_task(&obs, 101).is_some());
}

#[test]
fn waiting_task_that_did_not_run_is_not_read_again() {
    let f = FakeProc::new();
    f.task(101, 'R', 100, 0);
    let mut o = f.observer();
    sample(&mut o, 0);
    f.task(101, 'R', 150, 5); // ran, still runnable
    sample(&mut o, 1);
    assert_eq!(o.last.reads, 3, "schedstat + stat + status");
    // Same schedstat: it has not run, so it cannot have blocked; the
    // fake's stat says 'S' to show it is not read.
    f.write(
        "100/task/101/stat",
        "101 (t101) S 1 100 100 0 -1 0 0 0 0 0 15 0 0 0 20 0 1 0 5101 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n",
    );
    f.pressure(1_000_000);
    let obs = sample(&mut o, 2);
    assert_eq!(o.last.reads, 1, "schedstat only");
    assert!(obs_task(&obs, 101).is_some_and(|t| t.runnable));
}

/// Task 101 woke and waits on a run queue: schedstat counts the wait
/// only once it runs, so its pulse is still. `running` is loadavg's count
/// at two full scans in a row.
fn waiting_task_seen(running: u64) -> (bool, bool) {
    let f = FakeProc::new();
    f.task(101, 'S', 10, 0);
    let mut o = f.observer();
    sample(&mut o, 0);
    sample(&mut o, 1);
    f.task(101, 'R', 10, 0);
    f.pressure(1_000_000);
    f.loadavg(running, 100);
    sample(&mut o, 2);
    assert!(!o.last.swept, "one scan is not enough to sweep");
    sample(&mut o, 3);
    f.pressure(2_000_000);
    let obs = sample(&mut o, 4);
    let seen = obs_task(&obs, 101).is_some_and(|t| t.runnable);
    (o.last.swept, seen)
}

#[test]
fn runnable_task_whose_schedstat_did_not_move_is_found_by_a_sweep() {
    // loadavg counts the sampler and 101: the sweep finds it.
    assert_eq!(waiting_task_seen(2), (true, true));
    // Without loadavg's hint it stays unseen until it runs.
    assert_eq!(waiting_task_seen(1), (false, false));
}

#[test]
fn quiet_tasks_are_checked_less_and_less_often() {
    let f = FakeProc::new();
    f.task(101, 'S', 10, 0);
    let mut o = f.observer();
    let mut checked = Vec::new();
    for scan in 1..=17u64 {
        f.pressure(scan * 1_000_000); // always under pressure: no skipping
        sample(&mut o, 2 * scan - 2);
        if o.last.reads > 0 {
            checked.push(scan);
        }
        sample(&mut o, 2 * scan - 1);
    }
    assert_eq!(checked, vec![1, 2, 4, 8, 16]);
    // Once it runs, it is checked at every scan again.
    f.task(101, 'S', 500, 0);
    for scan in 18..=24u64 {
        f.pressure(scan * 1_000_000);
        sample(&mut o, 2 * scan - 2);
        sample(&mut o, 2 * scan - 1);
    }
    f.task(101, 'S', 900, 0);
    f.pressure(25_000_000);
    let obs = sample(&mut o, 48);
    assert!(obs_task(&obs, 101).is_some(), "ran 400 ms: seen at once");
}

/// Issue 30: the balancer adopts an RT1+ task whose affinity reaches the RT
/// and the NRT CPUs both (ARTiS §2.1), never one pinned to RT CPUs only (a
/// grant of `rtmgr serve`, e.g. one re-adopted after a crash).
#[test]
fn an_rt1_task_pinned_to_rt_cpus_is_left_alone_one_across_both_sets_is_adopted() {
    let f = FakeProc::new();
    for (tid, cpus) in [(101, "1"), (102, "0-1")] {
        // SCHED_FIFO (policy 1) at priority 20, on CPU 1.
        f.write(
            &format!("100/task/{tid}/stat"),
            &format!("{tid} (t{tid}) S 1 100 100 0 -1 0 0 0 0 0 10 0 0 0 -21 0 1 0 {} 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 17 1 20 1 0 0 0\n", 5000 + tid),
        );
        f.write(&format!("100/task/{tid}/schedstat"), "100000000 0 10\n");
        f.write(
            &format!("100/task/{tid}/status"),
            &format!("Name:\tt\nCpus_allowed_list:\t{cpus}\nvoluntary_ctxt_switches:\t3\nnonvoluntary_ctxt_switches:\t1\n"),
        );
    }
    let mut o = f.observer();
    sample(&mut o, 0);
    sample(&mut o, 1);
    let adopted: Vec<u32> = o
        .spanning_rt1(&BTreeMap::new())
        .into_iter()
        .map(|(tid, _)| tid)
        .collect();
    assert_eq!(adopted, vec![102]);
}
