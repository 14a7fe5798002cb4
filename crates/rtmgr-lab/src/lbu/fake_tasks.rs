//! lbµ fake tasks on the real machine (ARTiS §3.3): one thread per task
//! instance with the scenario's mask and scheduling class, doing calibrated
//! busy-loop iterations, sleeps (absolute CLOCK_MONOTONIC deadlines, so RT0
//! wake-up latency is measured too) and optional kernel-heavy phases (reads
//! of /dev/zero). Collects the lbµ figures: wall-clock time, CPU time per
//! CPU, context switches.

use crate::measure::{gettid, mono_ns, sleep_until, thread_cpu_ns, thread_switches, MeasureError};
use rtmgr_core::balance::scenario::{Scenario, Sched};
use rtmgr_core::class::TaskClass;
use rtmgr_core::CpuSet;
use rtmgr_linux::sched::{self, Policy};
use std::io::Read;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Barrier};

/// Inner operations of one busy-loop "unit"; a scenario iteration is
/// `units_per_iter` units, calibrated so that it takes `iter_ns`.
const UNIT_OPS: u64 = 64;
/// Work between two CPU checks, ns.
const CHUNK_NS: u64 = 200_000;
/// Start time the tasks read when another task's set-up failed.
const SETUP_FAILED: u64 = u64::MAX;

#[inline(never)]
fn spin_units(n: u64) -> u64 {
    let mut x = std::hint::black_box(0x9e37_79b9u64);
    for _ in 0..n * UNIT_OPS {
        x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    }
    std::hint::black_box(x)
}

/// Units per ns of CPU time on this machine (best of a few short runs).
pub fn calibrate() -> f64 {
    let mut best = 0.0f64;
    for _ in 0..5 {
        let n = 20_000;
        let t0 = thread_cpu_ns();
        spin_units(n);
        let dt = thread_cpu_ns().saturating_sub(t0).max(1) as f64;
        best = best.max(n as f64 / dt);
    }
    best
}

/// One fake task to run.
#[derive(Debug, Clone)]
pub struct FakeTask {
    pub name: String,
    pub class: TaskClass,
    pub mask: CpuSet,
    pub policy: Option<Policy>,
    pub work_ns: u64,
    pub burst_ns: u64,
    pub sleep_ns: u64,
    pub kernel_every_ns: u64,
    pub kernel_ns: u64,
}

/// From a scenario, with every mask intersected with `online`.
pub fn fake_tasks(sc: &Scenario, online: &CpuSet) -> Vec<FakeTask> {
    sc.instances()
        .into_iter()
        .map(|(name, t)| FakeTask {
            name,
            class: t.class(),
            mask: t
                .cpu_mask
                .as_ref()
                .map(|m| m.intersection(online))
                .filter(|m| !m.is_empty())
                .unwrap_or_else(|| online.clone()),
            policy: match t.sched {
                Sched::Other => None,
                Sched::Fifo => Some(Policy::Fifo {
                    priority: t.priority,
                }),
                Sched::Rr => Some(Policy::Rr {
                    priority: t.priority,
                }),
            },
            work_ns: t.loops.saturating_mul(sc.iter_ns),
            burst_ns: t.sloop.saturating_mul(sc.iter_ns),
            sleep_ns: t.sleep_us.saturating_mul(1000),
            kernel_every_ns: t.kernel_every.saturating_mul(sc.iter_ns),
            kernel_ns: t.kernel_us.saturating_mul(1000),
        })
        .collect()
}

/// What one fake task measured.
#[derive(Debug, Clone, Default)]
pub struct FakeResult {
    pub name: String,
    pub class: Option<TaskClass>,
    pub tid: u32,
    pub wall_ns: u64,
    pub cpu_ns: Vec<u64>,
    pub kernel_ns: u64,
    pub switches: u64,
    pub migrations: u64,
    /// Wake-up latencies after each sleep (RT0 latency), ns.
    pub wake_latency_ns: Vec<u64>,
}

fn current_cpu() -> usize {
    rtmgr_sys::sched::current_cpu() as usize
}

/// Called in each fake-task thread with (index, tid) before it pins itself,
/// e.g. to put RT0 threads into the RT cpuset.
pub type Prepare = Arc<dyn Fn(usize, u32) -> Result<(), String> + Send + Sync>;

/// Run the fake tasks, all started at the same time. `started` receives the
/// thread ids once every thread is set up (e.g. to scope a live balancer);
/// `stop` ends them early. Blocks until all are done; RT0 tasks are stopped
/// once every other task has finished (as in the simulator).
pub fn run(
    tasks: &[FakeTask],
    ncpus: usize,
    prepare: Option<Prepare>,
    started: impl FnOnce(&[u32]),
    stop: Arc<AtomicBool>,
) -> Result<Vec<FakeResult>, MeasureError> {
    let rate = calibrate();
    let daemons_stop = Arc::new(AtomicBool::new(false));
    let barrier = Arc::new(Barrier::new(tasks.len() + 1));
    let t0 = Arc::new(AtomicU64::new(0));
    let (tx, rx) = mpsc::channel::<Result<u32, String>>();
    let mut handles = Vec::new();
    for (i, spec) in tasks.iter().cloned().enumerate() {
        let (barrier, t0, tx, prepare) = (barrier.clone(), t0.clone(), tx.clone(), prepare.clone());
        let stop =
            if spec.class == TaskClass::Rt0 && tasks.iter().any(|t| t.class != TaskClass::Rt0) {
                daemons_stop.clone()
            } else {
                stop.clone()
            };
        let h = std::thread::Builder::new()
            .name(format!("lbu-{}", spec.name))
            .spawn(move || {
                let tid = gettid();
                let setup = (|| {
                    if let Some(p) = &prepare {
                        p(i, tid)?;
                    }
                    sched::set_affinity(0, &spec.mask)
                        .map_err(|e| format!("{}: affinity {}: {e}", spec.name, spec.mask))?;
                    if let Some(pol) = spec.policy {
                        sched::set_policy(0, pol)
                            .map_err(|e| format!("{}: {pol:?}: {e} (needs root)", spec.name))?;
                    }
                    Ok(tid)
                })();
                let ok = setup.is_ok();
                let _ = tx.send(setup);
                drop(tx);
                barrier.wait();
                let start = t0.load(Ordering::SeqCst);
                if !ok || start == SETUP_FAILED {
                    return FakeResult::default();
                }
                fake_body(&spec, tid, rate, ncpus, start, &stop)
            })
            .map_err(|e| MeasureError::io("spawn fake task", e))?;
        handles.push(h);
    }
    drop(tx);
    let mut tids = Vec::new();
    let mut errors = Vec::new();
    for r in rx.iter() {
        match r {
            Ok(t) => tids.push(t),
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        t0.store(SETUP_FAILED, Ordering::SeqCst);
        barrier.wait();
        for h in handles {
            let _ = h.join();
        }
        return Err(MeasureError::Setup(errors.join("; ")));
    }
    started(&tids);
    t0.store(mono_ns(), Ordering::SeqCst);
    barrier.wait();
    let mut results: Vec<Option<FakeResult>> = vec![None; handles.len()];
    let mut rt0 = Vec::new();
    for (i, h) in handles.into_iter().enumerate() {
        if tasks[i].class == TaskClass::Rt0 {
            rt0.push((i, h));
        } else {
            results[i] = Some(h.join().unwrap_or_default());
        }
    }
    daemons_stop.store(true, Ordering::Relaxed);
    for (i, h) in rt0 {
        results[i] = Some(h.join().unwrap_or_default());
    }
    Ok(results.into_iter().map(Option::unwrap_or_default).collect())
}

fn fake_body(
    spec: &FakeTask,
    tid: u32,
    rate: f64,
    ncpus: usize,
    start: u64,
    stop: &AtomicBool,
) -> FakeResult {
    let mut res = FakeResult {
        name: spec.name.clone(),
        class: Some(spec.class),
        tid,
        cpu_ns: vec![0; ncpus],
        ..Default::default()
    };
    let sw0 = thread_switches();
    let mut zero = std::fs::File::open("/dev/zero").ok();
    let mut buf = vec![0u8; 64 * 1024];
    let (mut work, mut burst, mut kern) = (
        spec.work_ns,
        if spec.burst_ns > 0 {
            spec.burst_ns
        } else {
            u64::MAX
        },
        if spec.kernel_every_ns > 0 {
            spec.kernel_every_ns
        } else {
            u64::MAX
        },
    );
    let mut last_cpu = current_cpu();
    let mut cpu_t = thread_cpu_ns();
    while work > 0 && !stop.load(Ordering::Relaxed) {
        let step = work.min(burst).min(kern).min(CHUNK_NS);
        spin_units(((step as f64) * rate).max(1.0) as u64);
        let (now_cpu, now_t) = (current_cpu(), thread_cpu_ns());
        res.cpu_ns[now_cpu.min(ncpus - 1)] += now_t.saturating_sub(cpu_t);
        if now_cpu != last_cpu {
            res.migrations += 1;
        }
        (last_cpu, cpu_t) = (now_cpu, now_t);
        work -= step;
        if burst != u64::MAX {
            burst -= step;
        }
        if kern != u64::MAX {
            kern -= step;
        }
        if kern == 0 {
            kern = spec.kernel_every_ns;
            // Kernel-heavy phase: system calls that copy in the kernel.
            let end = mono_ns() + spec.kernel_ns;
            let k0 = thread_cpu_ns();
            while mono_ns() < end {
                if let Some(z) = zero.as_mut() {
                    let _ = z.read(&mut buf);
                }
            }
            let k = thread_cpu_ns().saturating_sub(k0);
            res.kernel_ns += k;
            res.cpu_ns[current_cpu().min(ncpus - 1)] += k;
            cpu_t = thread_cpu_ns();
        }
        if burst == 0 && work > 0 {
            burst = spec.burst_ns;
            let target = mono_ns() + spec.sleep_ns;
            sleep_until(target);
            res.wake_latency_ns.push(mono_ns().saturating_sub(target));
            cpu_t = thread_cpu_ns();
            last_cpu = current_cpu();
        }
    }
    res.wall_ns = mono_ns().saturating_sub(start);
    res.switches = {
        let sw1 = thread_switches();
        (sw1.0 + sw1.1) - (sw0.0 + sw0.1)
    };
    res
}
