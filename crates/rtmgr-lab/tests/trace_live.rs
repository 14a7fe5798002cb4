//! The tracer on this machine (root only): a private tracefs instance records
//! a pinned thread's system calls and is gone afterwards (from the machine's
//! list of instances too), and paused (no task named) records nothing and
//! stops when told; the tail tracer explains a late sample offered over
//! a busy window, its parts adding up to the sample's latency.

use rtmgr_core::CpuSet;
use rtmgr_lab::trace::{list_instances, TailTracer, TraceSession, TraceSpec};
use rtmgr_lab::trace::{Cause, Event, Kind, Sample};
use rtmgr_linux::lock::{MachineLock, DEFAULT_LOCK_PATH};
use rtmgr_linux::{cpus, sched, Host};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn ready(test: &str) -> Option<(MachineLock, u32)> {
    if !sched::is_root() {
        eprintln!("skip {test}: tracefs needs root");
        return None;
    }
    let lock = MachineLock::acquire(Path::new(DEFAULT_LOCK_PATH)).unwrap();
    let cpu = cpus::online(&Host::real()).unwrap().iter().last().unwrap();
    Some((lock, cpu))
}

/// A thread pinned to `cpu` making `getppid` calls for `d`; its tid.
fn busy_syscalls(cpu: u32, d: Duration) -> std::thread::JoinHandle<u32> {
    std::thread::Builder::new()
        .name("trace-busy".into())
        .spawn(move || {
            sched::set_affinity(0, &CpuSet::single(cpu)).unwrap();
            let t0 = Instant::now();
            while t0.elapsed() < d {
                std::hint::black_box(std::os::unix::process::parent_id());
            }
            rtmgr_sys::sched::gettid()
        })
        .unwrap()
}

#[test]
fn a_private_instance_records_a_threads_syscalls_and_goes_away() {
    let Some((_lock, cpu)) = ready("a_private_instance_records") else {
        return;
    };
    let seen: Arc<Mutex<Vec<Event>>> = Arc::default();
    let s = seen.clone();
    let spec = TraceSpec {
        cpus: CpuSet::single(cpu),
        events: vec!["raw_syscalls/sys_enter".into(), "sched/sched_switch".into()],
        buffer_kb: 1024,
        pids: None,
        react_at_priority: None,
        events_only_with_pids: false,
    };
    let session = TraceSession::start(
        spec,
        Box::new(move |ev: &[Event]| s.lock().unwrap().extend_from_slice(ev)),
    )
    .expect("tracer starts");
    let ours: Vec<String> = list_instances().unwrap();
    assert_eq!(ours.len(), 1, "one instance while tracing: {ours:?}");
    let tid = busy_syscalls(cpu, Duration::from_millis(200))
        .join()
        .unwrap();
    let stats = session.finish().unwrap();
    assert!(stats.events > 0);
    let ev = seen.lock().unwrap();
    let getppid = ev
        .iter()
        .filter(|e| e.pid == tid && e.kind == Kind::SysEnter { nr: 110 })
        .count();
    assert!(
        getppid > 10,
        "getppid entries of the busy thread: {getppid}"
    );
    assert!(
        ev.windows(2).all(|w| w[0].ts_ns <= w[1].ts_ns),
        "one CPU: in order"
    );
    assert_eq!(
        list_instances().unwrap(),
        Vec::<String>::new(),
        "instance removed"
    );
}

/// Paused (events only with pids, none named), the reader sleeps on its
/// controls; a stop wakes it, so `finish` does not wait out its backstop
/// poll (5 s; without the wake it would wait most of that, the 100 ms of
/// work before `finish` less).
#[test]
fn a_paused_tracer_records_nothing_and_stops_when_told() {
    let Some((_lock, cpu)) = ready("a_paused_tracer") else {
        return;
    };
    let spec = TraceSpec {
        cpus: CpuSet::single(cpu),
        events: vec!["raw_syscalls/sys_enter".into()],
        buffer_kb: 256,
        pids: Some(Vec::new()),
        react_at_priority: None,
        events_only_with_pids: true,
    };
    let session = TraceSession::start(spec, Box::new(|_: &[Event]| {})).expect("tracer starts");
    busy_syscalls(cpu, Duration::from_millis(100))
        .join()
        .unwrap();
    let t0 = Instant::now();
    let stats = session.finish().unwrap();
    assert!(
        t0.elapsed() < Duration::from_millis(2500),
        "finish waited for the paused reader's backstop poll"
    );
    assert_eq!(stats.events, 0, "paused, yet recorded");
    assert!(list_instances().unwrap().is_empty());
}

#[test]
fn the_tail_tracer_explains_an_offered_sample() {
    let Some((_lock, cpu)) = ready("the_tail_tracer_explains") else {
        return;
    };
    let (tracer, mut late) = TailTracer::start(&CpuSet::single(cpu), 1, Some(0)).unwrap();
    let busy = busy_syscalls(cpu, Duration::from_millis(100));
    std::thread::sleep(Duration::from_millis(30));
    let t0 = rtmgr_sys::time::mono_ns();
    std::thread::sleep(Duration::from_millis(5));
    let t1 = rtmgr_sys::time::mono_ns();
    let sample = Sample {
        cpu,
        tid: u32::MAX,
        release_ns: t0,
        wake_ns: t1,
    };
    late[0].offer(sample);
    busy.join().unwrap();
    let out = tracer.finish().unwrap();
    assert_eq!(out.attributions.len(), 1);
    let a = &out.attributions[0];
    assert_eq!(
        a.parts.iter().map(|p| p.1).sum::<u64>(),
        sample.latency_ns(),
        "{a:?}"
    );
    // The busy thread floods the buffer with getppid() entries: the kernel
    // may drop the window's events (trace_lost, or no event at all). When
    // events were read, its system call must be named. (Not its comm: the
    // tracer learns a name once, and may see the thread before it renames
    // itself.)
    let events_read = a
        .parts
        .iter()
        .any(|(c, _)| !matches!(c, Cause::Unexplained | Cause::TraceLost));
    if events_read {
        let busy_named = a
            .parts
            .iter()
            .any(|(c, _)| matches!(c, Cause::Syscall { syscall, .. } if syscall == "getppid"));
        assert!(busy_named, "the busy thread held the CPU: {a:?}");
    } else {
        eprintln!("the kernel dropped this window's events: {a:?}");
    }
    assert_eq!(list_instances().unwrap(), Vec::<String>::new());
}
