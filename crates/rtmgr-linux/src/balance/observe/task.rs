//! One task as the observer keeps it (ARTiS §2.3: what the policy weighs and
//! moves): its open /proc files and counters, and one refresh — schedstat
//! first, `stat` only when it ran or waited, `status` only when its switches
//! need splitting — that turns counters into the last window's figures.

use super::Observer;
use crate::balance::procfile::{FdBudget, KeptFile};
use rtmgr_core::class::TaskClass;
use rtmgr_core::proctext::{class_of_policy, parse_io, parse_schedstat, parse_status, TaskStat};
use rtmgr_core::CpuSet;
use std::io;
use std::path::PathBuf;

const PF_KTHREAD: u64 = 0x0020_0000;
/// Fewest clock ticks in a window for its user/kernel split to count.
const MIN_TICKS: u64 = 3;
/// A task found quiet at successive full scans is checked every 2, 4, then
/// at most this many full scans (a busy one is found sooner by the sweep
/// as soon as it has to wait for a CPU).
const CHECK_EVERY_MAX: u64 = 8;

#[derive(Debug, Default)]
struct TaskFiles {
    schedstat: KeptFile,
    stat: KeptFile,
    status: KeptFile,
    io: KeptFile,
}

pub(super) struct Rec {
    pub(super) pid: u32,
    pub(super) dir: PathBuf,
    files: TaskFiles,
    /// Not read yet.
    pub(super) fresh: bool,
    pub(super) start_time: u64,
    pub(super) class: TaskClass,
    pub(super) kthread: bool,
    /// Its affinity is exactly the NRT set (the policy may move it).
    pub(super) nrt_only: bool,
    pub(super) has_affinity: bool,
    pub(super) cpu: u32,
    pub(super) runnable: bool,
    pub(super) ticks_user: u64,
    pub(super) ticks_sys: u64,
    /// CPU time and run-queue wait so far (schedstat), ns.
    pub(super) run_ns: u64,
    pub(super) delay_ns: u64,
    /// Times switched in so far (schedstat; u64::MAX without it).
    pub(super) slices: u64,
    /// When `slices` (and `stat`) were last read.
    pub(super) read_ns: u64,
    pub(super) vol: u64,
    pub(super) invol: u64,
    /// Kernel share of the CPU time over the last windows with tick data.
    pub(super) kernel_ratio: f64,
    pub(super) hot: bool,
    /// Checked at full scans every this many (doubles while quiet).
    pub(super) check_every: u64,
    /// Next full scan that checks it.
    pub(super) next_check_scan: u64,
    // last window
    pub(super) w_user: u64,
    pub(super) w_kernel: u64,
    pub(super) w_vol: u64,
    pub(super) w_invol: u64,
    /// Its affinity reaches into the RT CPUs and the NRT CPUs both (an RT1+
    /// task started across both sets). A task whose CPUs are all RT CPUs was
    /// placed there on purpose, by `rtmgr serve`'s grant (issue 30: a grant
    /// re-adopted after a crash was taken for one) or by its program.
    pub(super) spans_rt: bool,
    /// Its affinity is this one RT CPU (a guest, or a task forked by one).
    pub(super) rt_pinned: Option<u32>,
    /// Its parent process (from `status`).
    pub(super) ppid: u32,
    /// Read and write system calls so far (/proc/…/io), and in the last window.
    pub(super) entries: Option<u64>,
    pub(super) w_entries: Option<u64>,
}

impl Rec {
    pub(super) fn new(pid: u32, dir: PathBuf) -> Self {
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
            spans_rt: false,
            rt_pinned: None,
            ppid: 0,
            entries: None,
            w_entries: None,
        }
    }

    pub(super) fn idle_window(&mut self) {
        self.runnable = false;
        self.hot = false;
        self.w_user = 0;
        self.w_kernel = 0;
        self.w_vol = 0;
        self.w_invol = 0;
        self.w_entries = None;
    }

    pub(super) fn close_all(&mut self, budget: &mut FdBudget) {
        self.files.schedstat.close(budget);
        self.files.stat.close(budget);
        self.files.status.close(budget);
        self.files.io.close(budget);
    }
}

/// Which reads one refresh of a task may skip.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Depth {
    /// A full scan: read `stat` only when schedstat moved by 1 % of the time
    /// since the task's last check; a quiet task is checked less often.
    Scan,
    /// Between full scans: read `stat` only when schedstat moved at all.
    Pulse,
    /// Read `stat` whatever schedstat says (a runnable task may wait a whole
    /// window without schedstat moving: run_delay grows when it runs).
    Stat,
}

/// The observer's buffer, file budget and read counter, lent to one task's reads.
struct ProcReads<'a> {
    buf: &'a mut Vec<u8>,
    budget: &'a mut FdBudget,
    reads: &'a mut usize,
}

impl Rec {
    /// Take what `stat` says (policy, CPU, state, the user/kernel split of
    /// its ticks); returns whether the task was new.
    fn take_stat(&mut self, stat: &TaskStat) -> bool {
        let fresh = self.fresh;
        self.fresh = false;
        self.check_every = 1;
        self.next_check_scan = 0;
        self.start_time = stat.starttime;
        self.kthread = stat.flags & PF_KTHREAD != 0;
        self.class = class_of_policy(stat.policy.unwrap_or(0), stat.rt_priority.unwrap_or(0));
        self.cpu = stat.processor.unwrap_or(0);
        self.runnable = stat.state == 'R';
        let (du, ds) = (
            stat.utime.saturating_sub(self.ticks_user),
            stat.stime.saturating_sub(self.ticks_sys),
        );
        self.ticks_user = stat.utime;
        self.ticks_sys = stat.stime;
        // Ticks are 10 ms: a window with fewer than MIN_TICKS says nothing
        // about the user/kernel split; otherwise smooth it.
        if !fresh && du + ds >= MIN_TICKS {
            let r = ds as f64 / (du + ds) as f64;
            self.kernel_ratio = (self.kernel_ratio + r) / 2.0;
        } else if fresh && stat.utime + stat.stime >= MIN_TICKS {
            self.kernel_ratio = stat.stime as f64 / (stat.utime + stat.stime) as f64;
        }
        fresh
    }

    /// Affinity, parent and context switches from `status` (`rt`, `nrt`:
    /// the partition's CPU sets).
    fn read_status(
        &mut self,
        io: &mut ProcReads,
        fresh: bool,
        switched: u64,
        sets: (&CpuSet, &CpuSet),
    ) {
        let (rt, nrt) = sets;
        let st = self
            .files
            .status
            .read(&self.dir, "status", io.buf, true, io.budget)
            .ok()
            .map(|()| parse_status(io.buf));
        let Some(st) = st else { return };
        *io.reads += 1;
        if let Some(aff) = st.affinity {
            self.nrt_only = aff == *nrt;
            self.spans_rt = !aff.is_disjoint(rt) && !aff.is_disjoint(nrt);
            self.rt_pinned = aff.first().filter(|&c| aff.len() == 1 && rt.contains(c));
            self.has_affinity = true;
        }
        self.ppid = st.ppid;
        let (v, n) = (st.voluntary, st.involuntary);
        // Not read for a while: no more switches than switch-ins.
        self.w_vol = if fresh {
            0
        } else {
            v.saturating_sub(self.vol).min(switched)
        };
        self.w_invol = if fresh {
            0
        } else {
            n.saturating_sub(self.invol)
        };
        self.vol = v;
        self.invol = n;
    }

    /// Kernel entries of a lending candidate (runnable, used CPU): the
    /// read/write calls of /proc/…/io; the policy lends only to tasks
    /// predicted to stay in user mode.
    fn read_entries(&mut self, io: &mut ProcReads, ran: u64) {
        self.w_entries = None;
        if !(self.runnable && ran > 0 && !self.kthread && self.class != TaskClass::Rt0) {
            return;
        }
        let counts = self
            .files
            .io
            .read(&self.dir, "io", io.buf, true, io.budget)
            .ok()
            .and_then(|()| parse_io(io.buf));
        if let Some((r, w)) = counts {
            *io.reads += 1;
            let now = r + w;
            self.w_entries = self.entries.map(|before| now.saturating_sub(before));
            self.entries = Some(now);
        }
    }
}

impl Observer {
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
        let Some(stat) = TaskStat::parse(&self.buf) else {
            return false;
        };
        if !rec.fresh && stat.starttime != rec.start_time {
            // The tid was reused by a new task: start over.
            rec.close_all(&mut self.budget);
            let (pid, dir) = (rec.pid, rec.dir.clone());
            *rec = Rec::new(pid, dir);
            return self.refresh(tid, depth);
        }
        let fresh = rec.take_stat(&stat);
        let (run_ns, delay_ns, slices) = pulse.unwrap_or_else(|| {
            let tps = rtmgr_sys::time::clock_ticks_per_second().max(1);
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
        let mut io = ProcReads {
            buf: &mut self.buf,
            budget: &mut self.budget,
            reads: &mut self.last.reads,
        };
        if !rec.kthread && (split || !rec.has_affinity) {
            rec.read_status(&mut io, fresh, switched, (&self.rt, &self.nrt));
        } else {
            rec.w_vol = if fresh { 0 } else { switched };
            rec.w_invol = 0;
        }
        rec.read_entries(&mut io, ran);
        true
    }

    /// Refresh these tasks, forgetting the ones that are gone; returns how
    /// many were runnable.
    pub(super) fn refresh_all(&mut self, tids: &[u32], depth: Depth) -> u64 {
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
}
