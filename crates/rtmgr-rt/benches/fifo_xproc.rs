//! RT-FIFO benchmark, everything in one run, interleaved round by round:
//! throughput (ops/s) and hand-off latency (p50/p99/p99.99) of the in-process
//! ring and Valois list, rtrb, crossbeam's ArrayQueue, the cross-process
//! shared-memory RT-FIFO (spinning and sleeping consumer) and a pipe between
//! two processes. Producer and consumer are pinned to different CPUs.
//!
//! `cargo bench -p rtmgr-rt --bench fifo_xproc -- [--rounds 5] [--ops 2000000]
//!  [--samples 20000] [--rt] [--json FILE]`
//! Prints a table and JSON; Ctrl-C (or SIGTERM) stops after the current
//! measurement and prints the partial report. With `--rt` it holds the
//! machine lock, and pauses between measurements to stay under RT throttling.

mod fifo_queues;

use fifo_queues::common::{self, ChildGuard};
use fifo_queues::*;
use hdrhistogram::Histogram;
use rtmgr_rt::fifo::shm::{self, ShmConsumer, ShmProducer, Wake};
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const RECORD: u32 = 16;
/// Late wake-ups seen by sleeping shm consumers (see `shm::Wake::Lazy`).
static LATE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Sends one record (child side of a cross-process run).
type Sender = Box<dyn FnMut(&[u8; 16])>;
/// Runs one cross-process measurement: (records, gap ns) → (ops/s, latencies).
type Run<'a> = &'a dyn Fn(u64, u64) -> (f64, Vec<u64>);
/// Pacing of latency samples: spinning consumers / sleeping consumers.
const GAP_SPIN_NS: u64 = 10_000;
const GAP_SLEEP_NS: u64 = 200_000;

struct Opts {
    rounds: usize,
    ops: u64,
    samples: usize,
    rt: bool,
    json: Option<String>,
}

fn opts() -> Opts {
    let mut o = Opts {
        rounds: 5,
        ops: 2_000_000,
        samples: 20_000,
        rt: false,
        json: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = || args.next().expect("missing value");
        match a.as_str() {
            "--rounds" => o.rounds = val().parse().expect("--rounds N"),
            "--ops" => o.ops = val().parse().expect("--ops N"),
            "--samples" => o.samples = val().parse().expect("--samples N"),
            "--rt" => o.rt = true,
            "--json" => o.json = Some(val()),
            _ => {} // cargo passes --bench
        }
    }
    assert!(!o.rt || common::is_root(), "--rt needs root (SCHED_FIFO)");
    o
}

/// One contestant's accumulated results.
struct Entry {
    name: &'static str,
    kind: &'static str,
    consumer: &'static str,
    ops_per_s: Vec<f64>,
    lat: Histogram<u64>,
}

impl Entry {
    fn new(name: &'static str, kind: &'static str, consumer: &'static str) -> Self {
        Entry {
            name,
            kind,
            consumer,
            ops_per_s: Vec::new(),
            lat: Histogram::new(3).unwrap(),
        }
    }
    fn add_lat(&mut self, v: &[u64]) {
        for &x in v {
            self.lat.record(x.max(1)).unwrap();
        }
    }
    fn median_ops(&self) -> f64 {
        let mut v = self.ops_per_s.clone();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    }
    fn json(&self) -> serde_json::Value {
        let q = |p: f64| self.lat.value_at_quantile(p);
        serde_json::json!({
            "name": self.name, "kind": self.kind, "consumer": self.consumer,
            "throughput_ops_per_s": {"median": self.median_ops(), "rounds": self.ops_per_s},
            "latency_ns": {"n": self.lat.len(), "min": self.lat.min(), "p50": q(0.5), "p99": q(0.99),
                            "p99_99": q(0.9999), "max": self.lat.max()},
        })
    }
}

// ---------- cross-process contestants: the child side ----------

/// Child: produce into the shm FIFO `FIFO_NAME` or into pipe fd `PIPE_FD`.
fn child_main(role: &str) {
    let n: u64 = std::env::var("N").unwrap().parse().unwrap();
    let gap: u64 = std::env::var("GAP_NS").unwrap().parse().unwrap();
    let cpu: u32 = std::env::var("CPU").unwrap().parse().unwrap();
    let rt = std::env::var("RT").as_deref() == Ok("1");
    // Die with the parent: never leave a spinning SCHED_FIFO producer behind.
    rtmgr_sys::process::die_with_parent().expect("PR_SET_PDEATHSIG");
    pin_checked(cpu);
    let _g = rt.then(|| common::FifoPolicy::enter(50).expect("SCHED_FIFO"));
    let mut send: Sender = match role {
        "shm" => {
            let mut p = ShmProducer::open(&std::env::var("FIFO_NAME").unwrap(), RECORD).unwrap();
            if std::env::var("WAKE").as_deref() == Ok("lazy") {
                p.set_wake(Wake::Lazy);
            }
            Box::new(move |r| {
                let mut spin = Spin::new();
                while !p.try_push(r).unwrap() {
                    spin.step();
                }
            })
        }
        "pipe" => {
            // The parent made the pipe's write end our stdout.
            let fd = std::io::stdout().as_fd().try_clone_to_owned().unwrap();
            let mut f = std::fs::File::from(fd);
            Box::new(move |r| f.write_all(r).unwrap())
        }
        other => panic!("unknown role {other}"),
    };
    let mut next = now_ns();
    for i in 0..n {
        let mut rec = [0u8; 16];
        if gap > 0 {
            // Latency run: paced, time-stamped. Throughput runs send no
            // timestamp (a clock read per record would be the bottleneck).
            next += gap;
            spin_until(next);
            rec[..8].copy_from_slice(&now_ns().to_ne_bytes());
        }
        rec[8..].copy_from_slice(&i.to_ne_bytes());
        send(&rec);
    }
}

fn spawn_producer(
    role: &str,
    n: u64,
    gap: u64,
    o: &Opts,
    extra: &[(&str, String)],
    stdout: Stdio,
) -> ChildGuard {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.env(common::ROLE_ENV, role)
        .env("N", n.to_string())
        .env("GAP_NS", gap.to_string())
        .env("CPU", "0")
        .env("RT", if o.rt { "1" } else { "0" })
        .stdout(stdout);
    for (k, v) in extra {
        cmd.env(k, v);
    }
    ChildGuard(Some(cmd.spawn().expect("spawn producer")))
}

/// Records arrive as (send timestamp, sequence number).
fn parse(rec: &[u8; 16]) -> (u64, u64) {
    (
        u64::from_ne_bytes(rec[..8].try_into().unwrap()),
        u64::from_ne_bytes(rec[8..].try_into().unwrap()),
    )
}

/// Parent side of a cross-process run: receive `n` records; returns
/// (throughput ops/s first→last record, latencies when `gap` > 0).
fn receive(n: u64, gap: u64, mut recv: impl FnMut(&mut [u8; 16])) -> (f64, Vec<u64>) {
    let mut lat = Vec::with_capacity(if gap > 0 { n as usize } else { 0 });
    let mut rec = [0u8; 16];
    let mut t_first = Instant::now();
    for i in 0..n {
        recv(&mut rec);
        let (t, seq) = parse(&rec);
        assert_eq!(seq, i, "lost or reordered record");
        if i == 0 {
            t_first = Instant::now();
        }
        if gap > 0 {
            lat.push(now_ns().saturating_sub(t));
        }
    }
    let dt = t_first.elapsed().as_secs_f64();
    ((n - 1) as f64 / dt, lat)
}

/// The shm RT-FIFO across processes; `spin`: consumer polls, else it sleeps
/// in `wait`; `lazy`: the producer uses `Wake::Lazy`.
fn shm_run(n: u64, gap: u64, spin: bool, lazy: bool, o: &Opts) -> (f64, Vec<u64>) {
    let name = format!("rtmgr-fifo-bench-{}", std::process::id());
    let _ = shm::unlink(&name);
    let mut c = ShmConsumer::create(&name, RECORD, CAPACITY as u32).unwrap();
    let wake = if lazy { "lazy" } else { "fenced" };
    let mut child = spawn_producer(
        "shm",
        n,
        gap,
        o,
        &[("FIFO_NAME", name.clone()), ("WAKE", wake.into())],
        Stdio::null(),
    );
    let r = receive(n, gap, |rec| {
        let mut s = Spin::new();
        loop {
            if c.try_pop(rec).unwrap() {
                return;
            }
            if spin {
                s.step();
            } else {
                assert!(
                    c.wait(Some(STUCK_AFTER)).unwrap(),
                    "producer stopped sending"
                );
            }
        }
    });
    child.finish_status();
    let _ = shm::unlink(&name);
    LATE.fetch_add(c.late_wakeups(), Ordering::Relaxed);
    r
}

/// Remove segments left by earlier runs that were killed (their pid is gone).
fn remove_stale_segments() {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix("rtmgr-fifo-bench-") else {
            continue;
        };
        let Ok(pid) = pid.parse::<i32>() else {
            continue;
        };
        if !rtmgr_sys::process::exists(pid) {
            let _ = shm::unlink(&name);
        }
    }
}

/// A pipe between two processes; the consumer blocks in read(2).
fn pipe_run(n: u64, gap: u64, o: &Opts) -> (f64, Vec<u64>) {
    let (mut rd, wr) = std::io::pipe().expect("pipe");
    let mut child = spawn_producer("pipe", n, gap, o, &[], Stdio::from(wr));
    let f = &mut rd;
    let r = receive(n, gap, |rec| f.read_exact(rec).unwrap());
    child.finish_status();
    r
}

trait FinishStatus {
    fn finish_status(&mut self);
}
impl FinishStatus for ChildGuard {
    fn finish_status(&mut self) {
        let st = self.0.take().unwrap().wait().unwrap();
        assert!(st.success(), "producer child failed: {st}");
    }
}

/// Run `f` with the calling thread pinned to `cpu` (and at SCHED_FIFO with
/// `rt`), restoring its affinity and policy afterwards.
fn on_cpu<R>(cpu: u32, rt: bool, f: impl FnOnce() -> R) -> R {
    let before = rtmgr_sys::sched::get_affinity(0).unwrap();
    pin_checked(cpu);
    let g = rt.then(|| common::FifoPolicy::enter(50).expect("SCHED_FIFO"));
    let r = f();
    drop(g);
    rtmgr_sys::sched::set_affinity(0, &before).unwrap();
    r
}

/// With `--rt`, pause between measurements so that spinning SCHED_FIFO
/// threads stay well under the kernel's RT throttling limit (95 % per second).
fn rest(o: &Opts) {
    if o.rt {
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn print_table(entries: &[Entry], o: &Opts, rounds_done: usize) {
    println!(
        "\nRT-FIFO benchmark: {rounds_done} round(s), {} ops/throughput run, {} latency samples/round, rt={}, {} CPUs",
        o.ops,
        o.samples,
        o.rt,
        common::online_cpus()
    );
    println!(
        "{:<22} {:<8} {:<6} {:>12} {:>8} {:>8} {:>9} {:>9} {:>8}",
        "queue", "kind", "cons.", "Mops/s(med)", "p50 ns", "p99 ns", "p99.99", "max ns", "n"
    );
    for e in entries {
        let q = |p: f64| e.lat.value_at_quantile(p);
        println!(
            "{:<22} {:<8} {:<6} {:>12.2} {:>8} {:>8} {:>9} {:>9} {:>8}",
            e.name,
            e.kind,
            e.consumer,
            e.median_ops() / 1e6,
            q(0.5),
            q(0.99),
            q(0.9999),
            e.lat.max(),
            e.lat.len()
        );
    }
}

fn main() {
    if let Ok(role) = std::env::var(common::ROLE_ENV) {
        child_main(&role);
        return;
    }
    let o = opts();
    remove_stale_segments();
    let stop = Arc::new(AtomicBool::new(false));
    signal_hook::flag::register(signal_hook::consts::SIGINT, stop.clone()).unwrap();
    signal_hook::flag::register(signal_hook::consts::SIGTERM, stop.clone()).unwrap();
    let _lock = o.rt.then(|| {
        rtmgr_sys::lock::MachineLock::acquire(std::path::Path::new(
            rtmgr_sys::lock::DEFAULT_LOCK_PATH,
        ))
        .unwrap()
    });
    let at = Placement {
        producer_cpu: 0,
        consumer_cpu: 1,
        rt: o.rt,
    };
    let clock_cost = {
        let t0 = Instant::now();
        for _ in 0..100_000 {
            std::hint::black_box(now_ns());
        }
        t0.elapsed().as_nanos() as f64 / 100_000.0
    };
    let mut e = vec![
        Entry::new(Ring::NAME, "threads", "spin"),
        Entry::new(List::NAME, "threads", "spin"),
        Entry::new(Rtrb::NAME, "threads", "spin"),
        Entry::new(Crossbeam::NAME, "threads", "spin"),
        Entry::new("rtmgr shm fenced", "procs", "spin"),
        Entry::new("rtmgr shm lazy", "procs", "spin"),
        Entry::new("rtmgr shm fenced", "procs", "sleep"),
        Entry::new("rtmgr shm lazy", "procs", "sleep"),
        Entry::new("pipe", "procs", "sleep"),
    ];
    let (ops, s) = (o.ops, o.samples);
    // Sleeping consumers: fewer ops and samples (each costs a wake-up).
    let (ops_sleep, s_sleep) = ((o.ops / 20).max(1000), (o.samples / 10).max(100));
    let mut rounds_done = 0;
    'rounds: for round in 0..o.rounds {
        eprintln!("round {}/{}", round + 1, o.rounds);
        macro_rules! threads {
            ($i:expr, $q:ty) => {{
                if stop.load(Ordering::Relaxed) {
                    break 'rounds;
                }
                let dt = throughput::<$q>(ops, at);
                e[$i].ops_per_s.push(ops as f64 / dt.as_secs_f64());
                rest(&o);
                let l = latency::<$q>(s, GAP_SPIN_NS, at);
                e[$i].add_lat(&l);
                rest(&o);
            }};
        }
        threads!(0, Ring);
        threads!(1, List);
        threads!(2, Rtrb);
        threads!(3, Crossbeam);
        let procs: [(usize, u64, usize, Run); 5] = [
            (4, ops, s, &|n, g| {
                on_cpu(1, o.rt, || shm_run(n, g, true, false, &o))
            }),
            (5, ops, s, &|n, g| {
                on_cpu(1, o.rt, || shm_run(n, g, true, true, &o))
            }),
            (6, ops_sleep, s_sleep, &|n, g| {
                on_cpu(1, o.rt, || shm_run(n, g, false, false, &o))
            }),
            (7, ops_sleep, s_sleep, &|n, g| {
                on_cpu(1, o.rt, || shm_run(n, g, false, true, &o))
            }),
            (8, ops_sleep, s_sleep, &|n, g| {
                on_cpu(1, o.rt, || pipe_run(n, g, &o))
            }),
        ];
        for (i, n, samples, run) in procs {
            if stop.load(Ordering::Relaxed) {
                break 'rounds;
            }
            let gap = if e[i].consumer == "spin" {
                GAP_SPIN_NS
            } else {
                GAP_SLEEP_NS
            };
            let (tput, _) = run(n, 0);
            e[i].ops_per_s.push(tput);
            rest(&o);
            let (_, l) = run(samples as u64, gap);
            e[i].add_lat(&l);
            rest(&o);
        }
        rounds_done += 1;
    }
    print_table(&e, &o, rounds_done);
    let late = LATE.load(Ordering::Relaxed);
    println!("clock_gettime cost: {clock_cost:.1} ns (included in every latency); late wake-ups of sleeping shm consumers: {late}");
    let report = serde_json::json!({
        "benchmark": "rtmgr-rt fifo_xproc",
        "rounds": rounds_done, "rounds_requested": o.rounds, "complete": rounds_done == o.rounds,
        "ops": o.ops, "samples": o.samples, "rt": o.rt, "cpus": common::online_cpus(),
        "capacity": CAPACITY, "gap_ns": {"spin": GAP_SPIN_NS, "sleep": GAP_SLEEP_NS},
        "clock_cost_ns": clock_cost, "late_wakeups": late,
        "results": e.iter().map(Entry::json).collect::<Vec<_>>(),
    });
    let text = serde_json::to_string_pretty(&report).unwrap();
    println!("{text}");
    if let Some(path) = &o.json {
        std::fs::write(path, &text).unwrap();
    }
}
