//! What `rtmgr balance` sees of the machine (ARTiS §2.3 on an unpatched
//! kernel): tasks from /proc — class, CPU, runnable, CPU time split
//! user/kernel, voluntary/involuntary switches — and the load that the policy
//! cannot move on each CPU. To stay cheap with hundreds of tasks it keeps each
//! task's files open (re-read with pread), checks every task only every
//! `scan_every` samples through its tiny `schedstat` and reads `stat`/`status`
//! only of tasks that ran or waited; in between it reads only the "hot" ones
//! (guests, tasks that used CPU or were runnable). It lists /proc again only
//! when a task was created since (the last pid in /proc/loadavg moved).
//! `task` refreshes one task, `pacing` decides what a sample reads; the
//! parsers of the /proc files are pure, in `rtmgr_core::proctext`.

mod pacing;
mod task;
#[cfg(test)]
mod tests;

use super::procfile::{FdBudget, ProcFile};
use rtmgr_core::balance::{CpuObs, Observation, Place, TaskId, TaskObs};
use rtmgr_core::class::TaskClass;
use rtmgr_core::CpuSet;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use task::Rec;

/// Default switch rate (per second) under which a task's switch-ins stand
/// for its voluntary switches and `status` is not read: a quarter of the
/// policy's default `switch_rate_max` (2000/s).
const SWITCH_FLOOR_PER_S: f64 = 500.0;

/// Which tasks the balancer may consider.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Every task of the machine except this process's own threads.
    All,
    /// Only these thread ids (lbµ: the fake tasks), and every thread of the
    /// processes whose pid is among them (the threads they create later too).
    Tids(BTreeSet<u32>),
}

/// What the observer did in its last sample (for the overhead report).
#[derive(Debug, Clone, Copy, Default)]
pub struct SampleCost {
    /// Task files read (pread or open + read).
    pub reads: usize,
    /// /proc was listed to find new tasks.
    pub listed: bool,
    /// Every task's `stat` was read (loadavg said some runnable task was unseen).
    pub swept: bool,
    /// A full scan was due but skipped: no task waited for a CPU since the
    /// last one (PSI), so there was nobody to lend an RT CPU to.
    pub skipped: bool,
}

/// The sampler. Keeps per-task counters and open files between samples.
pub struct Observer {
    proc_root: PathBuf,
    rt: CpuSet,
    nrt: CpuSet,
    scope: Scope,
    own_pid: u32,
    scan_every: u64,
    /// A task that ran at least this long in a window is read every sample.
    hot_ns: u64,
    samples: u64,
    full_scans: u64,
    last_listed_scan: u64,
    recs: BTreeMap<u32, Rec>,
    /// Tasks with something in their last window (ran, runnable, hot or
    /// not read yet): the only ones a sample between full scans looks at.
    active: BTreeSet<u32>,
    budget: FdBudget,
    buf: Vec<u8>,
    /// None until known: does this kernel have /proc/<pid>/task/<tid>/schedstat?
    schedstat: Option<bool>,
    loadavg: Option<ProcFile>,
    last_pid: Option<u64>,
    proc_stat: Option<ProcFile>,
    pressure: Option<ProcFile>,
    /// CPU pressure ("some" total, µs) at the last full scan and when.
    last_pressure: Option<(u64, u64)>,
    /// Full scans that read every task (not skipped for lack of pressure).
    last_read_all_scan: u64,
    /// Full scans in a row where loadavg counted more running tasks than found.
    unseen_scans: u32,
    irq_ticks: Vec<u64>,
    irq_at_ns: Option<u64>,
    /// Share of each CPU (0..1) spent in interrupts since the last full scan.
    irq_share: Vec<f64>,
    /// What the last sample cost.
    pub last: SampleCost,
    /// Time of the current sample.
    now_ns: u64,
    switch_floor_per_s: f64,
}

impl Observer {
    pub fn new(host_root: &Path, rt: CpuSet, nrt: CpuSet, scope: Scope) -> Self {
        Observer {
            proc_root: host_root.join("proc"),
            rt,
            nrt,
            scope,
            own_pid: std::process::id(),
            scan_every: 20,
            hot_ns: 500_000,
            samples: 0,
            full_scans: 0,
            last_listed_scan: 0,
            recs: BTreeMap::new(),
            active: BTreeSet::new(),
            budget: FdBudget::from_rlimit(),
            buf: Vec::with_capacity(4096),
            schedstat: None,
            loadavg: None,
            last_pid: None,
            proc_stat: None,
            pressure: None,
            last_pressure: None,
            last_read_all_scan: 0,
            unseen_scans: 0,
            irq_ticks: Vec::new(),
            irq_at_ns: None,
            irq_share: Vec::new(),
            last: SampleCost::default(),
            now_ns: 0,
            switch_floor_per_s: SWITCH_FLOOR_PER_S,
        }
    }

    /// Full scans every this many samples (default 20: once a second at T = 50 ms).
    pub fn set_scan_every(&mut self, n: u64) {
        self.scan_every = n.max(1);
    }

    /// Tasks that ran at least `ns` in a window (or are runnable) are "hot":
    /// read at every sample. Default 0.5 ms (1 % of T = 50 ms).
    /// Tasks switched in less often than this per second are not split into
    /// voluntary/involuntary switches (their switch-ins count as voluntary);
    /// keep it under the policy's `switch_rate_max`.
    pub fn set_switch_floor(&mut self, per_s: f64) {
        self.switch_floor_per_s = per_s;
    }

    pub fn set_hot_ns(&mut self, ns: u64) {
        self.hot_ns = ns;
    }

    /// Descriptors the observer keeps open now.
    pub fn open_files(&self) -> usize {
        self.budget.open()
    }

    fn in_scope(&self, pid: u32, tid: u32) -> bool {
        match &self.scope {
            Scope::All => pid != self.own_pid,
            Scope::Tids(t) => t.contains(&tid) || t.contains(&pid),
        }
    }

    /// Does this kernel report CPU pressure (PSI)? Known after the first sample.
    pub fn has_psi(&self) -> bool {
        self.pressure.is_some() && self.last_pressure.is_some()
    }

    /// Does this kernel have per-task schedstat? Known after the first sample.
    pub fn has_schedstat(&self) -> bool {
        self.schedstat == Some(true)
    }

    /// One observation. `guests` are the tasks the balancer placed on RT CPUs
    /// (tid → CPU), `p99` the latency guard's recent p99 per RT CPU.
    pub fn sample(
        &mut self,
        now_ns: u64,
        window_ns: u64,
        guests: &BTreeMap<u32, u32>,
        p99: &BTreeMap<u32, u64>,
    ) -> Observation {
        self.last = SampleCost::default();
        self.now_ns = now_ns;
        if self.samples.is_multiple_of(self.scan_every) {
            self.full_scan(now_ns, guests);
        } else {
            self.refresh_hot(guests);
        }
        self.samples += 1;
        self.observation(now_ns, window_ns, guests, p99)
    }

    fn observation(
        &self,
        now_ns: u64,
        window_ns: u64,
        guests: &BTreeMap<u32, u32>,
        p99: &BTreeMap<u32, u64>,
    ) -> Observation {
        let w = window_ns.max(1) as f64;
        let mut fixed_ns: BTreeMap<u32, u64> = BTreeMap::new();
        let mut tasks = Vec::with_capacity(self.active.len() + guests.len());
        // Tasks asleep all window have nothing to weigh or move: only the
        // active ones and the guests are observed.
        let mut seen: BTreeSet<u32> = self.active.clone();
        seen.extend(guests.keys());
        for (tid, r) in seen
            .into_iter()
            .filter_map(|t| Some((t, self.recs.get(&t)?)))
            .filter(|(_, r)| !r.fresh)
        {
            let guest = guests.get(&tid);
            let place = if let Some(&c) = guest {
                Place::Rt(c)
            } else if !r.kthread && r.class != TaskClass::Rt0 && r.nrt_only {
                Place::Nrt
            } else {
                Place::Fixed
            };
            if place == Place::Fixed {
                *fixed_ns.entry(r.cpu).or_default() += r.w_user + r.w_kernel;
                if r.kthread {
                    continue;
                }
            }
            tasks.push(TaskObs {
                id: TaskId::from(tid),
                class: r.class,
                place,
                runnable: r.runnable,
                user_ns: r.w_user,
                kernel_ns: r.w_kernel,
                voluntary: r.w_vol,
                involuntary: r.w_invol,
                total_ns: r.run_ns,
                np_entered: false,
                kernel_entries: r.w_entries,
            });
        }
        let cpus = self
            .rt
            .iter()
            .chain(self.nrt.iter())
            .map(|c| {
                let irq = self.irq_share.get(c as usize).copied().unwrap_or(0.0);
                let fixed = fixed_ns.get(&c).copied().unwrap_or(0) as f64 / w;
                CpuObs {
                    cpu: c,
                    rt: self.rt.contains(c),
                    rt_load: (fixed + irq).min(1.0),
                    latency_p99_ns: p99.get(&c).copied(),
                    // The lending controller's evidence: filled by the live side (issue 20).
                    ..Default::default()
                }
            })
            .collect();
        Observation {
            now_ns,
            window_ns,
            cpus,
            tasks,
            time_resolution_ns: 1_000_000_000 / rtmgr_sys::time::clock_ticks_per_second().max(1),
        }
    }

    /// RT1+ tasks whose affinity reaches into the RT and the NRT CPUs
    /// (started across both sets): (tid, start time). The balancer adopts
    /// them (ARTiS §2.1); one pinned to RT CPUs only (a grant) it leaves alone.
    pub fn spanning_rt1(&self, guests: &BTreeMap<u32, u32>) -> Vec<(u32, u64)> {
        self.recs
            .iter()
            .filter(|(tid, r)| {
                !r.fresh
                    && !r.kthread
                    && r.spans_rt
                    && matches!(r.class, TaskClass::Rt1 { .. })
                    && !guests.contains_key(tid)
            })
            .map(|(&tid, r)| (tid, r.start_time))
            .collect()
    }

    /// Tasks pinned to an RT CPU that are not guests but were created by a
    /// guest's process after its lend: its new threads and the processes it
    /// forked, which inherit the guest's RT-CPU pinning and SCHED_IDLE.
    /// `lent`: the processes that had a guest in this run (pid → the thread
    /// lent, and when, in clock ticks since boot like a task's start time).
    /// RT0 threads are the application's own (pinned on purpose), never
    /// children. Returns (tid, start time, the lent thread it came from).
    pub fn children_of_guests(
        &self,
        guests: &BTreeMap<u32, u32>,
        lent: &BTreeMap<u32, (u32, u64)>,
    ) -> Vec<(u32, u64, u32)> {
        self.recs
            .iter()
            .filter(|(tid, r)| {
                !r.fresh
                    && !r.kthread
                    && r.class != TaskClass::Rt0
                    && r.rt_pinned.is_some()
                    && !guests.contains_key(tid)
            })
            .filter_map(|(&tid, r)| {
                let &(from, since) = lent.get(&r.pid).or_else(|| lent.get(&r.ppid))?;
                (from != tid && r.start_time >= since).then_some((tid, r.start_time, from))
            })
            .collect()
    }

    /// The process (thread group) of a known task.
    pub fn process_of(&self, tid: u32) -> Option<u32> {
        self.recs.get(&tid).map(|r| r.pid)
    }

    /// Start time of a known task (to recognise a reused tid).
    pub fn start_time(&self, tid: u32) -> Option<u64> {
        self.recs.get(&tid).map(|r| r.start_time)
    }

    pub fn known_tasks(&self) -> usize {
        self.recs.len()
    }
}
