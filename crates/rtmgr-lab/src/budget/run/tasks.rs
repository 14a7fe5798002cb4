//! The task threads of `rtmgr measure budget` (budget-based RTAI §4.2): compute
//! tasks that burn CPU time per job or run away, and an I/O task reading a file
//! in 512-byte chunks like the seed's MPEG player, each a periodic task of
//! `rtmgr-rt` under soft or hard enforcement, or sharing a group budget (§5).

use super::summary::{Raw, WARMUP};
use super::taskset::{ns, TaskSpec};
use super::Mode;
use rtmgr_rt::periodic::{mono_ns, thread_cpu_ns, BudgetMode, Group, Task, TaskClass, TaskConfig};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A file the I/O task reads (removed on drop).
pub struct IoFile {
    path: PathBuf,
    file: std::fs::File,
    len: u64,
}

impl IoFile {
    pub fn create() -> std::io::Result<Self> {
        let path = std::env::temp_dir().join(format!("rtmgr-budget-io-{}.dat", std::process::id()));
        let data: Vec<u8> = (0..4u32 << 20)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
            .collect();
        std::fs::write(&path, &data)?;
        let file = std::fs::File::open(&path)?;
        Ok(Self {
            path,
            file,
            len: data.len() as u64,
        })
    }
}

impl Drop for IoFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Burn `ns` of this thread's CPU time (or until `stop`/`end`).
fn burn(ns: u64, end: u64, stop: &AtomicBool) {
    let t0 = thread_cpu_ns();
    while thread_cpu_ns() - t0 < ns && mono_ns() < end && !stop.load(Ordering::Relaxed) {
        std::hint::spin_loop();
    }
}

/// The I/O job: read 512-byte chunks (many system calls) and checksum them
/// until `demand` ns of CPU time are used, like the seed's MPEG player.
fn io_job(f: &IoFile, pos: &mut u64, demand: u64, end: u64, stop: &AtomicBool) -> u64 {
    let t0 = thread_cpu_ns();
    let mut buf = [0u8; 512];
    let mut sum = 0u64;
    while thread_cpu_ns() - t0 < demand && mono_ns() < end && !stop.load(Ordering::Relaxed) {
        let n = f.file.read_at(&mut buf, *pos).unwrap_or(0);
        sum = buf[..n]
            .iter()
            .fold(sum, |a, &b| a.rotate_left(5) ^ b as u64);
        *pos = (*pos + 512) % (f.len - 512);
    }
    sum
}

/// What every task thread of one run shares.
#[derive(Clone)]
struct Shared {
    mode: Mode,
    start: u64,
    end: u64,
    stop: Arc<AtomicBool>,
    io: Arc<IoFile>,
    group: Option<Arc<Group>>,
}

fn task_thread(t: TaskSpec, priority: u8, sh: Shared) -> Result<Raw, String> {
    let p = ns(t.period_ms);
    let w = ns(t.budget_ms);
    let (class, cpu, bmode) = match sh.mode {
        Mode::Soft(v) => (
            TaskClass::Rt1 { priority },
            t.cpu,
            BudgetMode::Soft {
                signal: None,
                variant: v,
            },
        ),
        Mode::Hard => (TaskClass::Linux, None, BudgetMode::hard()),
        // The budget comes from `group` (make_periodic_group below).
        Mode::Group => (TaskClass::Rt1 { priority }, t.cpu, BudgetMode::soft()),
    };
    let (start, end, stop) = (sh.start, sh.end, &sh.stop);
    let mut cfg = TaskConfig::new(t.name.clone(), class);
    cfg.cpu = cpu;
    cfg.lock_memory = false;
    cfg.ring_capacity = ((end - start) / p + 64) as usize;
    let err = |e: rtmgr_rt::periodic::TaskError| format!("{}: {e}", t.name);
    let mut task = Task::init(cfg).map_err(err)?;
    match &sh.group {
        Some(g) => task.make_periodic_group(g, None),
        None => task.make_periodic_budget(start, p, w, bmode),
    }
    .map_err(err)?;
    let mut seed = 0x9e37_79b9_7f4a_7c15u64 ^ p;
    let mut pos = 0u64;
    let mut sink = 0u64;
    while mono_ns() < end && !stop.load(Ordering::Relaxed) {
        match (t.kind.as_str(), t.job_ms) {
            ("io", _) => {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                let demand = w * 6 / 10 + (seed >> 33) % (w * 8 / 10);
                sink ^= io_job(&sh.io, &mut pos, demand, end, stop);
            }
            (_, Some(job)) => burn(ns(job), end, stop),
            (_, None) => {
                burn(u64::MAX, end, stop);
                continue;
            }
        }
        task.wait_period().map_err(err)?;
    }
    std::hint::black_box(sink);
    let records = task.records();
    let stats = task.stats();
    task.delete().map_err(err)?;
    Ok(Raw {
        warmup: records.len().min(WARMUP),
        records: records.into_iter().skip(WARMUP).collect(),
        stats,
        cpu,
    })
}

/// Run one task set in one mode for `duration_ns`: per task, its raw results.
pub fn run_set(
    set: &[TaskSpec],
    mode: Mode,
    duration_ns: u64,
    stop: &Arc<AtomicBool>,
    io: &Arc<IoFile>,
) -> Vec<Result<Raw, String>> {
    let start = mono_ns() + 50_000_000;
    let end = start + duration_ns;
    let group = match mode {
        Mode::Group => match Group::new(start, ns(set[0].period_ms), ns(set[0].budget_ms)) {
            Ok(g) => Some(g),
            Err(e) => return vec![Err(format!("group: {e}"))],
        },
        _ => None,
    };
    let shared = Shared {
        mode,
        start,
        end,
        stop: stop.clone(),
        io: io.clone(),
        group,
    };
    // Rate-monotonic priorities: shorter period, higher priority.
    let mut order: Vec<usize> = (0..set.len()).collect();
    order.sort_by(|&a, &b| set[a].period_ms.total_cmp(&set[b].period_ms));
    let mut prio = vec![0u8; set.len()];
    for (rank, &i) in order.iter().enumerate() {
        prio[i] = set[i]
            .priority
            .unwrap_or(60u8.saturating_sub(rank as u8).max(1));
    }
    let handles: Vec<_> = set
        .iter()
        .cloned()
        .zip(prio)
        .map(|(t, pr)| {
            let sh = shared.clone();
            std::thread::Builder::new()
                .name(format!("budget-{}", t.name))
                .spawn(move || task_thread(t, pr, sh))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| match h {
            Ok(h) => h
                .join()
                .unwrap_or_else(|_| Err("task thread panicked".into())),
            Err(e) => Err(format!("spawn: {e}")),
        })
        .collect()
}
