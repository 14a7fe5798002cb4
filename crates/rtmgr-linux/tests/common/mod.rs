//! Shared set-up of the live balancer tests (root only): a partition with the
//! last CPU as the RT CPU under a private journal, and bounded busy threads.
#![allow(dead_code)] // each test binary uses its part

use rtmgr_core::partition::{validate, PartitionConfig};
use rtmgr_core::CpuSet;
use rtmgr_linux::lock::{MachineLock, DEFAULT_LOCK_PATH};
use rtmgr_linux::partition::{self, Applied, ApplyOptions, PartitionGuard};
use rtmgr_linux::{cpus, Host};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// An applied partition, reset by `finish` (or by the guard's drop on a
/// panic) while the journal and the machine lock are still held.
pub struct Lab {
    pub host: Host,
    pub applied: Applied,
    pub rt_cpu: u32,
    guard: PartitionGuard,
    _dir: tempfile::TempDir,
    _lock: MachineLock,
}

impl Lab {
    /// None (with the reason printed) where the test cannot run.
    pub fn start() -> Option<Lab> {
        if !rtmgr_linux::sched::is_root() {
            eprintln!("skip: needs root (cpusets, affinities, tracefs)");
            return None;
        }
        let host = Host::real();
        let online = cpus::online(&host).unwrap();
        if partition::layout(&host).is_err() || online.len() < 2 {
            eprintln!("skip: needs a cpuset controller and 2 CPUs");
            return None;
        }
        let lock = MachineLock::acquire(Path::new(DEFAULT_LOCK_PATH)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let rt_cpu = online.iter().last().unwrap();
        let plan = validate(
            &PartitionConfig {
                rt_cpus: Some(CpuSet::single(rt_cpu)),
                ..Default::default()
            },
            None,
            &online,
        )
        .unwrap();
        let opts = ApplyOptions {
            journal: dir.path().join("journal"),
            replace: false,
        };
        let guard = PartitionGuard::apply(&host, &plan, &opts).unwrap();
        let applied = guard.applied().clone();
        Some(Lab {
            host,
            guard,
            applied,
            rt_cpu,
            _dir: dir,
            _lock: lock,
        })
    }

    /// Reset the partition (fields drop in order: guard, journal, lock).
    pub fn finish(self) {
        self.guard.reset().unwrap();
    }
}

/// `n` busy threads, each bounded to `limit` whatever happens; while
/// `syscalls` is set they make system calls instead of computing.
pub struct Busy {
    pub tids: BTreeSet<u32>,
    pub syscalls: Arc<AtomicBool>,
    done: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
}

impl Busy {
    pub fn spawn(n: usize, limit: Duration) -> Busy {
        let done = Arc::new(AtomicBool::new(false));
        let syscalls = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let workers: Vec<_> = (0..n)
            .map(|_| {
                let (done, syscalls, tx) = (done.clone(), syscalls.clone(), tx.clone());
                std::thread::spawn(move || {
                    // Nice -10: on a shared machine the other work confined to
                    // the NRT CPUs must not starve these below the policy's
                    // "CPU-bound" threshold (half an NRT share), or nothing is lent.
                    let _ = rtmgr_sys::sched::set_policy(
                        0,
                        rtmgr_sys::sched::Policy::Other { nice: -10 },
                    );
                    tx.send(rtmgr_sys::sched::gettid()).unwrap();
                    let t0 = Instant::now();
                    let mut x = 0u64;
                    while !done.load(Ordering::Relaxed) && t0.elapsed() < limit {
                        if syscalls.load(Ordering::Relaxed) {
                            std::hint::black_box(std::os::unix::process::parent_id());
                        } else {
                            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                        }
                    }
                })
            })
            .collect();
        let tids = (0..n).map(|_| rx.recv().unwrap()).collect();
        // Threads start in the process's cpuset: after the partition, the NRT set.
        std::thread::sleep(Duration::from_millis(100));
        Busy {
            tids,
            syscalls,
            done,
            workers,
        }
    }

    pub fn stop(self) {
        self.done.store(true, Ordering::Relaxed);
        for w in self.workers {
            w.join().unwrap();
        }
    }
}

/// Does this kernel offer tracefs at all (`/proc/filesystems`)? Where it
/// does, a kernel-entry watch that fails to start is a failure, not a skip.
pub fn tracefs_in_kernel() -> bool {
    std::fs::read_to_string("/proc/filesystems").is_ok_and(|f| {
        f.lines()
            .any(|l| l.split_whitespace().last() == Some("tracefs"))
    })
}

/// Occupy `lab`'s RT CPU for `length` at the guard probe's own SCHED_FIFO
/// priority (in the RT cpuset, as the probe is), so that the probe's next
/// wake-up is late by most of `length`: a late sample made on purpose.
pub fn hog_rt_cpu(lab: &Lab, length: Duration) -> JoinHandle<()> {
    use rtmgr_linux::rt_thread::{max_fifo_priority, setup_rt_thread, Prepare};
    let (host, layout, dir) = (
        lab.host.clone(),
        lab.applied.layout.clone(),
        lab.applied.rt_cgroup.clone(),
    );
    let prepare: Prepare = Arc::new(move |tid| {
        if matches!(layout, rtmgr_linux::cgroup::Layout::V1(_)) {
            rtmgr_linux::cgroup::attach(&host, &layout, &dir, tid)
                .map_err(|e| rtmgr_linux::rt_thread::MeasureError::Setup(e.to_string()))?;
        }
        Ok(())
    });
    let cpu = lab.rt_cpu;
    std::thread::spawn(move || {
        let policy = rtmgr_linux::sched::Policy::Fifo {
            priority: max_fifo_priority(),
        };
        setup_rt_thread(cpu, policy, Some(&prepare)).expect("hog thread on the RT CPU");
        let t0 = Instant::now();
        let mut x = 0u64;
        while t0.elapsed() < length {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
    })
}
