//! What `rtmgr balance` sees of the machine (ARTiS §2.3 on an unpatched
//! kernel): tasks from /proc through the procfs crate — class, CPU, runnable,
//! CPU time split user/kernel, voluntary/involuntary switches — and the load
//! that the policy cannot move on each CPU. To stay cheap with hundreds of
//! tasks it reads every task only every `scan_every` samples and, in between,
//! only the "hot" ones: guests and tasks that used CPU or were runnable.

use procfs::process::{Process, Task};
use rtmgr_core::balance::{CpuObs, Observation, Place, TaskId, TaskObs};
use rtmgr_core::class::{TaskClass, RT0_PRIORITY};
use rtmgr_core::CpuSet;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

const PF_KTHREAD: u32 = 0x0020_0000;
/// Fewest clock ticks in a window for its user/kernel split to count.
const MIN_TICKS: u64 = 3;

/// Which tasks the balancer may consider.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Every task of the machine except this process's own threads.
    All,
    /// Only these thread ids (lbµ: the fake tasks).
    Tids(BTreeSet<u32>),
}

struct Rec {
    pid: u32,
    start_time: u64,
    task: Option<Task>,
    class: TaskClass,
    kthread: bool,
    affinity: Option<CpuSet>,
    cpu: u32,
    runnable: bool,
    ticks_user: u64,
    ticks_sys: u64,
    run_ns: u64,
    vol: u64,
    invol: u64,
    /// Kernel share of the CPU time over the last windows with tick data.
    kernel_ratio: f64,
    hot: bool,
    // last window
    w_user: u64,
    w_kernel: u64,
    w_vol: u64,
    w_invol: u64,
    seen: bool,
}

/// The sampler. Keeps per-task counters between samples.
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
    recs: BTreeMap<u32, Rec>,
    irq_ticks: Vec<u64>,
    /// Task files read in the last sample (for the overhead report).
    pub last_reads: usize,
}

fn class_of(policy: u32, prio: u32) -> TaskClass {
    let rt = policy == libc::SCHED_FIFO as u32 || policy == libc::SCHED_RR as u32;
    match (rt, prio) {
        (false, _) => TaskClass::Linux,
        (true, p) if p >= u32::from(RT0_PRIORITY) => TaskClass::Rt0,
        (true, p) => TaskClass::Rt1 {
            priority: p.clamp(1, 98) as u8,
        },
    }
}

fn list_to_set(v: &[(u32, u32)]) -> CpuSet {
    v.iter().flat_map(|&(a, b)| a..=b).collect()
}

impl Observer {
    pub fn new(host_root: &std::path::Path, rt: CpuSet, nrt: CpuSet, scope: Scope) -> Self {
        Observer {
            proc_root: host_root.join("proc"),
            rt,
            nrt,
            scope,
            own_pid: std::process::id(),
            scan_every: 20,
            hot_ns: 500_000,
            samples: 0,
            recs: BTreeMap::new(),
            irq_ticks: Vec::new(),
            last_reads: 0,
        }
    }

    /// Full scans every this many samples (default 20: once a second at T = 50 ms).
    pub fn set_scan_every(&mut self, n: u64) {
        self.scan_every = n.max(1);
    }

    /// Tasks that ran at least `ns` in a window (or are runnable) are "hot":
    /// read at every sample. Default 0.5 ms (1 % of T = 50 ms).
    pub fn set_hot_ns(&mut self, ns: u64) {
        self.hot_ns = ns;
    }

    fn in_scope(&self, pid: u32, tid: u32) -> bool {
        match &self.scope {
            Scope::All => pid != self.own_pid,
            Scope::Tids(t) => t.contains(&tid),
        }
    }

    /// Find tasks (all of them, or only those of the scope).
    fn scan(&mut self) {
        let pids: Vec<u32> = match &self.scope {
            Scope::All => procfs::process::all_processes_with_root(&self.proc_root)
                .map(|it| it.filter_map(|p| p.ok()).map(|p| p.pid as u32).collect())
                .unwrap_or_default(),
            Scope::Tids(_) => vec![self.own_pid],
        };
        for r in self.recs.values_mut() {
            r.seen = false;
        }
        for pid in pids {
            let Ok(p) = Process::new_with_root(self.proc_root.join(pid.to_string())) else {
                continue;
            };
            let Ok(tasks) = p.tasks() else { continue };
            for t in tasks.flatten() {
                let tid = t.tid as u32;
                if !self.in_scope(pid, tid) {
                    continue;
                }
                self.read_task(pid, tid, Some(t));
            }
        }
        self.recs.retain(|_, r| r.seen);
    }

    /// Read one task's counters; returns false when it is gone.
    fn read_task(&mut self, pid: u32, tid: u32, task: Option<Task>) -> bool {
        let rec_task = match task {
            Some(t) => Some(t),
            None => self.recs.get_mut(&tid).and_then(|r| r.task.take()),
        };
        let Some(task) = rec_task else { return false };
        let Ok(stat) = task.stat() else { return false };
        self.last_reads += 1;
        let start_time = stat.starttime;
        let kthread = stat.flags & PF_KTHREAD != 0;
        let class = class_of(stat.policy.unwrap_or(0), stat.rt_priority.unwrap_or(0));
        let fresh = self
            .recs
            .get(&tid)
            .is_none_or(|r| r.start_time != start_time);
        // A task that was cold, is not runnable and gained no tick since the
        // last read is not read further (the cheap path of a full scan);
        // kernel threads are accounted in ticks only.
        let idle = !fresh
            && stat.state != 'R'
            && self
                .recs
                .get(&tid)
                .is_some_and(|r| !r.hot && r.ticks_user == stat.utime && r.ticks_sys == stat.stime);
        let run_ns = if idle {
            self.recs.get(&tid).map(|r| r.run_ns)
        } else if kthread {
            None
        } else {
            let v = task.schedstat().map(|s| s.sum_exec_runtime).ok();
            self.last_reads += usize::from(v.is_some());
            v
        };
        if fresh {
            self.recs.insert(
                tid,
                Rec {
                    pid,
                    start_time,
                    task: None,
                    class,
                    kthread,
                    affinity: None,
                    cpu: 0,
                    runnable: false,
                    ticks_user: stat.utime,
                    ticks_sys: stat.stime,
                    run_ns: run_ns.unwrap_or(0),
                    vol: 0,
                    invol: 0,
                    kernel_ratio: 0.0,
                    hot: true,
                    w_user: 0,
                    w_kernel: 0,
                    w_vol: 0,
                    w_invol: 0,
                    seen: true,
                },
            );
        }
        let rec = self.recs.get_mut(&tid).expect("inserted");
        rec.seen = true;
        rec.class = class;
        rec.cpu = stat.processor.unwrap_or(0).max(0) as u32;
        rec.runnable = stat.state == 'R';
        let (du, ds) = (
            stat.utime.saturating_sub(rec.ticks_user),
            stat.stime.saturating_sub(rec.ticks_sys),
        );
        rec.ticks_user = stat.utime;
        rec.ticks_sys = stat.stime;
        // Ticks are 10 ms: a window with fewer than MIN_TICKS says nothing
        // about the user/kernel split; otherwise smooth it.
        if du + ds >= MIN_TICKS {
            let r = ds as f64 / (du + ds) as f64;
            rec.kernel_ratio = if fresh {
                r
            } else {
                (rec.kernel_ratio + r) / 2.0
            };
        }
        let ran = match run_ns {
            Some(ns) => {
                let d = ns.saturating_sub(rec.run_ns);
                rec.run_ns = ns;
                d
            }
            None => (du + ds) * 1_000_000_000 / procfs::ticks_per_second().max(1),
        };
        if fresh {
            rec.w_user = 0;
            rec.w_kernel = 0;
        } else {
            rec.w_kernel = (ran as f64 * rec.kernel_ratio) as u64;
            rec.w_user = ran - rec.w_kernel;
        }
        // Status (affinity, context switches) only for tasks that matter.
        let hot_ns = self.hot_ns;
        let wants_status = !kthread && (rec.runnable || ran >= hot_ns || rec.affinity.is_none());
        if wants_status {
            if let Ok(st) = task.status() {
                self.last_reads += 1;
                let rec = self.recs.get_mut(&tid).expect("present");
                rec.affinity = st.cpus_allowed_list.as_deref().map(list_to_set);
                let (v, n) = (
                    st.voluntary_ctxt_switches.unwrap_or(0),
                    st.nonvoluntary_ctxt_switches.unwrap_or(0),
                );
                rec.w_vol = if fresh { 0 } else { v.saturating_sub(rec.vol) };
                rec.w_invol = if fresh {
                    0
                } else {
                    n.saturating_sub(rec.invol)
                };
                rec.vol = v;
                rec.invol = n;
            }
        }
        let rec = self.recs.get_mut(&tid).expect("present");
        rec.hot = rec.runnable || ran >= hot_ns;
        rec.task = if rec.hot { Some(task) } else { None };
        true
    }

    /// Interrupt time per CPU (ns) since the last call, from /proc/stat.
    fn irq_ns(&mut self) -> Vec<u64> {
        let text = std::fs::read_to_string(self.proc_root.join("stat")).unwrap_or_default();
        let tps = procfs::ticks_per_second().max(1);
        let now = irq_ticks(&text);
        let mut out = Vec::with_capacity(now.len());
        for (c, &v) in now.iter().enumerate() {
            let prev = self.irq_ticks.get(c).copied().unwrap_or(v);
            out.push(v.saturating_sub(prev) * 1_000_000_000 / tps);
        }
        self.irq_ticks = now;
        out
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
        self.last_reads = 0;
        if self.samples.is_multiple_of(self.scan_every) {
            self.scan();
        } else {
            let hot: Vec<(u32, u32)> = self
                .recs
                .iter()
                .filter(|(tid, r)| r.hot || guests.contains_key(tid))
                .map(|(&tid, r)| (r.pid, tid))
                .collect();
            for r in self.recs.values_mut() {
                if !r.hot {
                    r.w_user = 0;
                    r.w_kernel = 0;
                    r.w_vol = 0;
                    r.w_invol = 0;
                }
            }
            for (pid, tid) in hot {
                if self.recs.get(&tid).is_some_and(|r| r.task.is_none()) {
                    let t = Process::new_with_root(self.proc_root.join(pid.to_string()))
                        .and_then(|p| p.task_from_tid(tid as i32));
                    match t {
                        Ok(t) => {
                            self.read_task(pid, tid, Some(t));
                        }
                        Err(_) => {
                            self.recs.remove(&tid);
                        }
                    }
                } else if !self.read_task(pid, tid, None) {
                    self.recs.remove(&tid);
                }
            }
        }
        self.samples += 1;
        let irq = self.irq_ns();
        let w = window_ns.max(1) as f64;
        let mut fixed_ns: BTreeMap<u32, u64> = BTreeMap::new();
        let mut tasks = Vec::new();
        for (&tid, r) in &self.recs {
            let place = if let Some(&c) = guests.get(&tid) {
                Place::Rt(c)
            } else if !r.kthread
                && r.class != TaskClass::Rt0
                && r.affinity.as_ref() == Some(&self.nrt)
            {
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
            });
        }
        let cpus = self
            .rt
            .iter()
            .chain(self.nrt.iter())
            .map(|c| {
                let fixed = fixed_ns.get(&c).copied().unwrap_or(0)
                    + irq.get(c as usize).copied().unwrap_or(0);
                CpuObs {
                    cpu: c,
                    rt: self.rt.contains(c),
                    rt_load: (fixed as f64 / w).min(1.0),
                    latency_p99_ns: p99.get(&c).copied(),
                }
            })
            .collect();
        Observation {
            now_ns,
            window_ns,
            cpus,
            tasks,
        }
    }

    /// Start time of a known task (to recognise a reused tid).
    pub fn start_time(&self, tid: u32) -> Option<u64> {
        self.recs.get(&tid).map(|r| r.start_time)
    }

    pub fn known_tasks(&self) -> usize {
        self.recs.len()
    }
}

/// Interrupt + softirq ticks per CPU from /proc/stat (per-CPU lines only).
pub fn irq_ticks(text: &str) -> Vec<u64> {
    let mut now = Vec::new();
    for line in text.lines() {
        // "cpu3 user nice system idle iowait irq softirq …", not the aggregate "cpu  …".
        let mut f = line.split_whitespace();
        let Some(Ok(cpu)) = f
            .next()
            .and_then(|n| n.strip_prefix("cpu"))
            .map(|c| c.parse::<usize>())
        else {
            continue;
        };
        if cpu >= rtmgr_core::cpuset::MAX_CPUS as usize {
            continue;
        }
        let v: Vec<u64> = f.take(7).filter_map(|x| x.parse().ok()).collect();
        let irq = v.get(5).copied().unwrap_or(0) + v.get(6).copied().unwrap_or(0);
        if now.len() <= cpu {
            now.resize(cpu + 1, 0);
        }
        now[cpu] = irq;
    }
    now
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn irq_ticks_skip_the_aggregate_line() {
        let text = "cpu  9999999 0 5 100 0 40 60 0 0 0\ncpu0 10 0 5 50 0 4 6 0 0 0\ncpu1 10 0 5 50 0 36 54 0 0 0\nintr 123\nctxt 5\n";
        assert_eq!(irq_ticks(text), vec![10, 90]);
        assert!(irq_ticks("cpu99999999 1 2 3 4 5 6 7\n").is_empty());
    }

    #[test]
    fn classes_from_policy() {
        assert_eq!(class_of(0, 0), TaskClass::Linux);
        assert_eq!(class_of(libc::SCHED_FIFO as u32, 99), TaskClass::Rt0);
        assert_eq!(
            class_of(libc::SCHED_RR as u32, 10),
            TaskClass::Rt1 { priority: 10 }
        );
    }
}
