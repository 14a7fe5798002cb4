//! What one sample of the observer reads (the cost side of ARTiS §2.3's
//! periodic balancing, on /proc): full scans every `scan_every` samples —
//! skipped when PSI shows no CPU pressure, listing /proc only after a new pid,
//! sweeping `stat` when loadavg counts runnable tasks the pulses missed —
//! and only the hot tasks in between.

use super::task::{Depth, Rec};
use super::{Observer, Scope};
use crate::balance::procfile::ProcFile;
use rtmgr_core::proctext::{irq_ticks, parse_loadavg, parse_pressure};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// Every task is read, and /proc listed, at least every this many full
/// scans, whatever the CPU pressure and the last pid say.
const LIST_EVERY_MAX: u64 = 10;

impl Observer {
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
        let tps = rtmgr_sys::time::clock_ticks_per_second().max(1);
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

    /// Every task through its pulse; list /proc first when a task was created
    /// since; read every `stat` when loadavg counts more runnable tasks than
    /// the pulses found (a runnable task can wait a whole window unseen).
    pub(super) fn full_scan(&mut self, now_ns: u64, guests: &BTreeMap<u32, u32>) {
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
    pub(super) fn refresh_hot(&mut self, guests: &BTreeMap<u32, u32>) {
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
}
