//! What `rtmgr balance` sees of the machine (ARTiS §2.3 on an unpatched
//! kernel): tasks from /proc — class, CPU, runnable, CPU time split
//! user/kernel, voluntary/involuntary switches — and the load that the policy
//! cannot move on each CPU. To stay cheap with hundreds of tasks it keeps each
//! task's files open (re-read with pread), checks every task only every
//! `scan_every` samples through its tiny `schedstat` and reads `stat`/`status`
//! only of tasks that ran or waited; in between it reads only the "hot" ones
//! (guests, tasks that used CPU or were runnable). It lists /proc again only
//! when a task was created since (the last pid in /proc/loadavg moved).

use super::procfile::{FdBudget, KeptFile, ProcFile};
use procfs::process::Stat;
use procfs::FromRead;
use rtmgr_core::balance::{CpuObs, Observation, Place, TaskId, TaskObs};
use rtmgr_core::class::{TaskClass, RT0_PRIORITY};
use rtmgr_core::CpuSet;
use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::path::{Path, PathBuf};

const PF_KTHREAD: u32 = 0x0020_0000;
/// Fewest clock ticks in a window for its user/kernel split to count.
const MIN_TICKS: u64 = 3;
/// Every task is read, and /proc listed, at least every this many full
/// scans, whatever the CPU pressure and the last pid say.
const LIST_EVERY_MAX: u64 = 10;
/// A task found quiet at successive full scans is checked every 2, 4, then
/// at most this many full scans (a busy one is found sooner by the sweep
/// as soon as it has to wait for a CPU).
const CHECK_EVERY_MAX: u64 = 8;
/// Default switch rate (per second) under which a task's switch-ins stand
/// for its voluntary switches and `status` is not read: a quarter of the
/// policy's default `switch_rate_max` (2000/s).
const SWITCH_FLOOR_PER_S: f64 = 500.0;

/// Which tasks the balancer may consider.
#[derive(Debug, Clone)]
pub enum Scope {
    /// Every task of the machine except this process's own threads.
    All,
    /// Only these thread ids (lbµ: the fake tasks).
    Tids(BTreeSet<u32>),
}

#[derive(Debug, Default)]
struct TaskFiles {
    schedstat: KeptFile,
    stat: KeptFile,
    status: KeptFile,
}

struct Rec {
    pid: u32,
    dir: PathBuf,
    files: TaskFiles,
    /// Not read yet.
    fresh: bool,
    start_time: u64,
    class: TaskClass,
    kthread: bool,
    /// Its affinity is exactly the NRT set (the policy may move it).
    nrt_only: bool,
    has_affinity: bool,
    cpu: u32,
    runnable: bool,
    ticks_user: u64,
    ticks_sys: u64,
    /// CPU time and run-queue wait so far (schedstat), ns.
    run_ns: u64,
    delay_ns: u64,
    /// Times switched in so far (schedstat; u64::MAX without it).
    slices: u64,
    /// When `slices` (and `stat`) were last read.
    read_ns: u64,
    vol: u64,
    invol: u64,
    /// Kernel share of the CPU time over the last windows with tick data.
    kernel_ratio: f64,
    hot: bool,
    /// Checked at full scans every this many (doubles while quiet).
    check_every: u64,
    /// Next full scan that checks it.
    next_check_scan: u64,
    // last window
    w_user: u64,
    w_kernel: u64,
    w_vol: u64,
    w_invol: u64,
}

impl Rec {
    fn new(pid: u32, dir: PathBuf) -> Self {
        Rec {
            pid,
            dir,
            files: TaskFiles::default(),
            fresh: true,
            start_time: 0,
            class: TaskClass::Linux,
            kthread: false,
            nrt_only: false,
            has_affinity: false,
            cpu: 0,
            runnable: false,
            ticks_user: 0,
            ticks_sys: 0,
            run_ns: 0,
            delay_ns: 0,
            slices: 0,
            read_ns: 0,
            vol: 0,
            invol: 0,
            kernel_ratio: 0.0,
            hot: false,
            check_every: 1,
            next_check_scan: 0,
            w_user: 0,
            w_kernel: 0,
            w_vol: 0,
            w_invol: 0,
        }
    }

    fn idle_window(&mut self) {
        self.runnable = false;
        self.hot = false;
        self.w_user = 0;
        self.w_kernel = 0;
        self.w_vol = 0;
        self.w_invol = 0;
    }

    fn close_all(&mut self, budget: &mut FdBudget) {
        self.files.schedstat.close(budget);
        self.files.stat.close(budget);
        self.files.status.close(budget);
    }
}

/// Which reads one refresh of a task may skip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Depth {
    /// A full scan: read `stat` only when schedstat moved by 1 % of the time
    /// since the task's last check; a quiet task is checked less often.
    Scan,
    /// Between full scans: read `stat` only when schedstat moved at all.
    Pulse,
    /// Read `stat` whatever schedstat says (a runnable task may wait a whole
    /// window without schedstat moving: run_delay grows when it runs).
    Stat,
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

/// The three lines of /proc/…/status the balancer needs: affinity and
/// voluntary/involuntary context switches (procfs's full parser allocates
/// a map of every line, too much at every sample).
#[derive(Debug, Default, PartialEq)]
struct StatusLines {
    affinity: Option<CpuSet>,
    voluntary: u64,
    involuntary: u64,
}

fn parse_status(text: &[u8]) -> StatusLines {
    let mut out = StatusLines::default();
    for line in String::from_utf8_lossy(text).lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Cpus_allowed_list" => out.affinity = CpuSet::parse_list(value).ok(),
            "voluntary_ctxt_switches" => out.voluntary = value.parse().unwrap_or(0),
            "nonvoluntary_ctxt_switches" => out.involuntary = value.parse().unwrap_or(0),
            _ => {}
        }
    }
    out
}

/// "run_ns delay_ns timeslices" of /proc/…/schedstat.
fn parse_schedstat(text: &[u8]) -> Option<(u64, u64, u64)> {
    let s = std::str::from_utf8(text).ok()?;
    let mut f = s.split_whitespace().map(|x| x.parse::<u64>());
    Some((f.next()?.ok()?, f.next()?.ok()?, f.next()?.ok()?))
}

/// Total time (µs) some task waited for a CPU, from /proc/pressure/cpu
/// ("some avg10=0.00 avg60=0.00 avg300=0.00 total=12345").
fn parse_pressure(text: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(text).ok()?;
    let line = s.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

/// Running tasks and the last pid handed out, from /proc/loadavg
/// ("0.10 0.20 0.30 2/650 12345").
fn parse_loadavg(text: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(text).ok()?;
    let mut f = s.split_whitespace().skip(3);
    let running = f.next()?.split('/').next()?.parse().ok()?;
    let last_pid = f.next()?.parse().ok()?;
    Some((running, last_pid))
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

    /// Limit the descriptors kept open (default: ¾ of RLIMIT_NOFILE).
    pub fn set_fd_budget(&mut self, max: usize) {
        for r in self.recs.values_mut() {
            r.close_all(&mut self.budget);
        }
        self.budget = FdBudget::new(max);
    }

    /// Descriptors the observer keeps open now.
    pub fn open_files(&self) -> usize {
        self.budget.open()
    }

    fn in_scope(&self, pid: u32, tid: u32) -> bool {
        match &self.scope {
            Scope::All => pid != self.own_pid,
            Scope::Tids(t) => t.contains(&tid),
        }
    }

    /// Read a small /proc file kept in `slot` (opened on first use).
    fn read_kept(slot: &mut Option<ProcFile>, path: PathBuf, buf: &mut Vec<u8>) -> bool {
        if slot.is_none() {
            *slot = ProcFile::open(&path).ok();
        }
        slot.as_ref().is_some_and(|f| f.read_into(buf).is_ok())
    }

    /// (running tasks, last pid) from /proc/loadavg.
    fn loadavg(&mut self) -> Option<(u64, u64)> {
        let path = self.proc_root.join("loadavg");
        if !Self::read_kept(&mut self.loadavg, path, &mut self.buf) {
            return None;
        }
        parse_loadavg(&self.buf)
    }

    /// CPU pressure so far (PSI "some" total, µs); None without PSI.
    fn pressure_us(&mut self) -> Option<u64> {
        let path = self.proc_root.join("pressure").join("cpu");
        if !Self::read_kept(&mut self.pressure, path, &mut self.buf) {
            return None;
        }
        parse_pressure(&self.buf)
    }

    /// Does this kernel report CPU pressure (PSI)? Known after the first sample.
    pub fn has_psi(&self) -> bool {
        self.pressure.is_some() && self.last_pressure.is_some()
    }

    /// Does this kernel have per-task schedstat? Known after the first sample.
    pub fn has_schedstat(&self) -> bool {
        self.schedstat == Some(true)
    }

    /// Add the tasks /proc lists that are not known yet; forget the ones it
    /// no longer lists.
    fn list_tasks(&mut self) {
        let pids: Vec<u32> = match &self.scope {
            Scope::All => std::fs::read_dir(&self.proc_root)
                .map(|d| {
                    d.flatten()
                        .filter_map(|e| e.file_name().to_str()?.parse().ok())
                        .collect()
                })
                .unwrap_or_default(),
            Scope::Tids(_) => vec![self.own_pid],
        };
        let mut listed = BTreeSet::new();
        for pid in pids {
            let tdir = self.proc_root.join(pid.to_string()).join("task");
            let Ok(d) = std::fs::read_dir(&tdir) else {
                continue;
            };
            for e in d.flatten() {
                let Some(tid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                    continue;
                };
                if !self.in_scope(pid, tid) {
                    continue;
                }
                listed.insert(tid);
                if let std::collections::btree_map::Entry::Vacant(v) = self.recs.entry(tid) {
                    v.insert(Rec::new(pid, e.path()));
                    self.active.insert(tid);
                }
            }
        }
        let budget = &mut self.budget;
        self.active.retain(|tid| listed.contains(tid));
        self.recs.retain(|tid, r| {
            let keep = listed.contains(tid);
            if !keep {
                r.close_all(budget);
            }
            keep
        });
    }

    /// Interrupt share of each CPU since the last call, from /proc/stat.
    fn update_irq(&mut self, now_ns: u64) {
        let path = self.proc_root.join("stat");
        if !Self::read_kept(&mut self.proc_stat, path, &mut self.buf) {
            return;
        }
        let now = irq_ticks(&String::from_utf8_lossy(&self.buf));
        let tps = procfs::ticks_per_second().max(1);
        let elapsed = self.irq_at_ns.map(|t| now_ns.saturating_sub(t));
        self.irq_share = now
            .iter()
            .enumerate()
            .map(|(c, &v)| {
                let prev = self.irq_ticks.get(c).copied().unwrap_or(v);
                match elapsed {
                    Some(e) if e > 0 => {
                        (v.saturating_sub(prev) as f64 * 1e9 / tps as f64 / e as f64).min(1.0)
                    }
                    _ => 0.0,
                }
            })
            .collect();
        self.irq_ticks = now;
        self.irq_at_ns = Some(now_ns);
    }

    /// CPU time and run-queue wait of a task so far, ns (None: no schedstat
    /// on this kernel). Err: the task is gone.
    fn pulse(&mut self, tid: u32) -> io::Result<Option<(u64, u64, u64)>> {
        if self.schedstat == Some(false) {
            return Ok(None);
        }
        let rec = self.recs.get_mut(&tid).expect("known task");
        match rec
            .files
            .schedstat
            .read(&rec.dir, "schedstat", &mut self.buf, true, &mut self.budget)
        {
            Ok(()) => {
                self.last.reads += 1;
                self.schedstat = Some(true);
                Ok(parse_schedstat(&self.buf))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && self.schedstat.is_none() => {
                if rec.dir.join("stat").exists() {
                    self.schedstat = Some(false); // the kernel has no schedstat
                    Ok(None)
                } else {
                    Err(e)
                }
            }
            Err(e) => Err(e),
        }
    }

    /// Read one task; returns false when it is gone.
    fn refresh(&mut self, tid: u32, depth: Depth) -> bool {
        let pulse = match self.pulse(tid) {
            Ok(p) => p,
            Err(_) => return false,
        };
        let rec = self.recs.get_mut(&tid).expect("known task");
        // Ran and waited less than `quiet_ns` since the last read, and was not
        // runnable then: asleep nearly all along, nothing the policy could
        // use; its bit of CPU time counts where it last ran.
        let quiet_ns = match depth {
            Depth::Scan => self.hot_ns * self.scan_every * rec.check_every,
            Depth::Pulse => 1,
            Depth::Stat => 0,
        };
        // Runnable at the last read and not run since (a task has to run to
        // block or exit): still waiting on its run queue, nothing else moved.
        if let (Some((run, delay, slices)), false, true) = (pulse, rec.fresh, rec.runnable) {
            if run == rec.run_ns && delay == rec.delay_ns && slices == rec.slices {
                rec.w_user = 0;
                rec.w_kernel = 0;
                rec.w_vol = 0;
                rec.w_invol = 0;
                return true;
            }
        }
        let was_waiting = rec.fresh || rec.runnable;
        if let (Some((run, delay, _)), false) = (pulse, was_waiting) {
            let ran = run.saturating_sub(rec.run_ns);
            if ran < quiet_ns && delay.saturating_sub(rec.delay_ns) < quiet_ns {
                if depth == Depth::Scan {
                    rec.check_every = (rec.check_every * 2).min(CHECK_EVERY_MAX);
                    rec.next_check_scan = self.full_scans + rec.check_every;
                }
                rec.idle_window();
                rec.run_ns = run;
                rec.delay_ns = delay;
                rec.w_kernel = (ran as f64 * rec.kernel_ratio) as u64;
                rec.w_user = ran - rec.w_kernel;
                if depth == Depth::Scan {
                    // Quiet since the last full scan: its status can go.
                    rec.files.status.close(&mut self.budget);
                }
                return true;
            }
        }
        match rec
            .files
            .stat
            .read(&rec.dir, "stat", &mut self.buf, true, &mut self.budget)
        {
            Ok(()) => self.last.reads += 1,
            Err(_) => return false,
        }
        let Ok(stat) = Stat::from_read(&self.buf[..]) else {
            return false;
        };
        if !rec.fresh && stat.starttime != rec.start_time {
            // The tid was reused by a new task: start over.
            rec.close_all(&mut self.budget);
            let (pid, dir) = (rec.pid, rec.dir.clone());
            *rec = Rec::new(pid, dir);
            return self.refresh(tid, depth);
        }
        let fresh = rec.fresh;
        rec.fresh = false;
        rec.check_every = 1;
        rec.next_check_scan = 0;
        rec.start_time = stat.starttime;
        rec.kthread = stat.flags & PF_KTHREAD != 0;
        rec.class = class_of(stat.policy.unwrap_or(0), stat.rt_priority.unwrap_or(0));
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
        if !fresh && du + ds >= MIN_TICKS {
            let r = ds as f64 / (du + ds) as f64;
            rec.kernel_ratio = (rec.kernel_ratio + r) / 2.0;
        } else if fresh && stat.utime + stat.stime >= MIN_TICKS {
            rec.kernel_ratio = stat.stime as f64 / (stat.utime + stat.stime) as f64;
        }
        let (run_ns, delay_ns, slices) = pulse.unwrap_or_else(|| {
            let tps = procfs::ticks_per_second().max(1);
            ((stat.utime + stat.stime) * 1_000_000_000 / tps, 0, u64::MAX)
        });
        // Times it was switched in since: an upper bound of its switches.
        let switched = slices.saturating_sub(rec.slices);
        rec.slices = slices;
        let since_ns = self.now_ns.saturating_sub(rec.read_ns).max(1);
        rec.read_ns = self.now_ns;
        let ran = run_ns.saturating_sub(rec.run_ns);
        rec.run_ns = run_ns;
        rec.delay_ns = delay_ns;
        if fresh {
            rec.w_user = 0;
            rec.w_kernel = 0;
        } else {
            rec.w_kernel = (ran as f64 * rec.kernel_ratio) as u64;
            rec.w_user = ran - rec.w_kernel;
        }
        rec.hot = rec.runnable || (!fresh && ran >= self.hot_ns);
        // Status (affinity, context switches) only for tasks that matter and
        // switched in often enough since for the split to matter; below
        // that, the switch-ins stand for the voluntary switches.
        let often = switched as f64 * 1e9 >= self.switch_floor_per_s * since_ns as f64;
        let split = rec.hot && ran > 0 && (often || slices == u64::MAX);
        if !rec.kthread && (split || !rec.has_affinity) {
            let st = rec
                .files
                .status
                .read(&rec.dir, "status", &mut self.buf, true, &mut self.budget)
                .ok()
                .map(|()| parse_status(&self.buf));
            if let Some(st) = st {
                self.last.reads += 1;
                if let Some(aff) = st.affinity {
                    rec.nrt_only = aff == self.nrt;
                    rec.has_affinity = true;
                }
                let (v, n) = (st.voluntary, st.involuntary);
                // Not read for a while: no more switches than switch-ins.
                rec.w_vol = if fresh {
                    0
                } else {
                    v.saturating_sub(rec.vol).min(switched)
                };
                rec.w_invol = if fresh {
                    0
                } else {
                    n.saturating_sub(rec.invol)
                };
                rec.vol = v;
                rec.invol = n;
            }
        } else {
            rec.w_vol = if fresh { 0 } else { switched };
            rec.w_invol = 0;
        }
        true
    }

    /// Refresh these tasks, forgetting the ones that are gone; returns how
    /// many were runnable.
    fn refresh_all(&mut self, tids: &[u32], depth: Depth) -> u64 {
        let mut runnable = 0;
        for &tid in tids {
            if self.refresh(tid, depth) {
                let r = &self.recs[&tid];
                runnable += u64::from(r.runnable);
                if r.hot || r.runnable || r.w_user + r.w_kernel > 0 {
                    self.active.insert(tid);
                } else {
                    self.active.remove(&tid);
                }
            } else if let Some(mut r) = self.recs.remove(&tid) {
                r.close_all(&mut self.budget);
                self.active.remove(&tid);
            }
        }
        runnable
    }

    /// Every task through its pulse; list /proc first when a task was created
    /// since; read every `stat` when loadavg counts more runnable tasks than
    /// the pulses found (a runnable task can wait a whole window unseen).
    fn full_scan(&mut self, now_ns: u64, guests: &BTreeMap<u32, u32>) {
        self.update_irq(now_ns);
        // Tasks waited for a CPU less than 1 % of the time since the last
        // full scan: nobody to lend an RT CPU to, so read only the hot tasks.
        let pressure = self.pressure_us();
        let calm = match (pressure, self.last_pressure) {
            (Some(p), Some((p0, t0))) => {
                p.saturating_sub(p0).saturating_mul(1000) * 100 < now_ns.saturating_sub(t0)
            }
            _ => false,
        };
        if calm
            && !self.recs.is_empty()
            && self.full_scans < self.last_read_all_scan + LIST_EVERY_MAX
        {
            self.full_scans += 1;
            self.last.skipped = true;
            self.refresh_hot(guests);
            return;
        }
        self.last_pressure = pressure.map(|p| (p, now_ns));
        self.last_read_all_scan = self.full_scans;
        let load = self.loadavg();
        let new_pid = match (load, self.last_pid) {
            (Some((_, p)), Some(last)) => p != last,
            _ => true,
        };
        if self.recs.is_empty()
            || new_pid
            || self.full_scans >= self.last_listed_scan + LIST_EVERY_MAX
        {
            self.list_tasks();
            self.last.listed = true;
            self.last_listed_scan = self.full_scans;
            self.last_pid = load.map(|(_, p)| p);
        }
        self.full_scans += 1;
        let scan = self.full_scans;
        let mut tids = Vec::with_capacity(self.recs.len());
        for (&tid, r) in self.recs.iter_mut() {
            if r.next_check_scan <= scan || r.hot || r.fresh || guests.contains_key(&tid) {
                tids.push(tid);
            } else {
                r.idle_window();
                self.active.remove(&tid);
            }
        }
        let seen = self.refresh_all(&tids, Depth::Scan);
        // loadavg counts this sampler too. A waker caught running makes one
        // scan see "more running than found"; a task starving on a run queue
        // makes every scan see it: sweep at the second scan in a row.
        let unseen = load.is_some_and(|(running, _)| running > seen + 1);
        self.unseen_scans = if unseen { self.unseen_scans + 1 } else { 0 };
        if self.unseen_scans >= 2 {
            self.unseen_scans = 0;
            let cold: Vec<u32> = self
                .recs
                .iter()
                .filter(|(_, r)| !r.runnable && !r.hot && !r.kthread)
                .map(|(&t, _)| t)
                .collect();
            self.refresh_all(&cold, Depth::Stat);
            self.last.swept = true;
        }
    }

    /// Read the guests, the hot and the fresh tasks; the others slept.
    fn refresh_hot(&mut self, guests: &BTreeMap<u32, u32>) {
        let mut hot: Vec<u32> = Vec::new();
        for tid in std::mem::take(&mut self.active) {
            match self.recs.get_mut(&tid) {
                Some(r) if r.hot || r.fresh || guests.contains_key(&tid) => hot.push(tid),
                Some(r) => r.idle_window(),
                None => {}
            }
        }
        hot.extend(guests.keys().filter(|t| self.recs.contains_key(t)));
        hot.sort_unstable();
        hot.dedup();
        self.refresh_all(&hot, Depth::Pulse);
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

    #[test]
    fn parsers() {
        assert_eq!(parse_schedstat(b"123 456 7\n"), Some((123, 456, 7)));
        assert_eq!(parse_schedstat(b"x"), None);
        assert_eq!(
            parse_loadavg(b"0.52 0.58 0.59 3/612 40123\n"),
            Some((3, 40123))
        );
        assert_eq!(
            parse_pressure(
                b"some avg10=1.00 avg60=0.50 avg300=0.10 total=987\nfull avg10=0 total=5\n"
            ),
            Some(987)
        );
        assert_eq!(parse_pressure(b""), None);
        let st = parse_status(b"Name:\tx\nCpus_allowed_list:\t0-2,5\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n");
        assert_eq!(st.affinity, Some([0, 1, 2, 5].into_iter().collect()));
        assert_eq!((st.voluntary, st.involuntary), (12, 3));
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
