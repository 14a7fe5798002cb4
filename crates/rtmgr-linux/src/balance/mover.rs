//! Applying the policy's pushes (ARTiS §2.2–2.3 from user space) and undoing
//! them: a guest goes into a cpuset that holds its RT CPU, is pinned to it
//! and — a Linux task — runs there at SCHED_IDLE, the lowest claim on the CPU
//! (§2.1: it runs only while nothing real-time wants the CPU). RT1+ tasks
//! started across both sets are adopted: held on the NRT CPUs unless lent.
//! Every change is journalled first (`lends`: undone by `partition reset`
//! after a `kill -9`), remembered and undone (also on drop); the `Evictor`
//! sends a guest to the NRT CPUs at once from any thread (kernel entry, late
//! sample).

use super::lends::{self, ignore_gone, LendJournal};
use crate::cgroup::{self, Layout};
use crate::host::{Host, HostError};
use crate::journal::Lent;
use crate::partition::Applied;
use crate::sched::Policy;
use rtmgr_core::class::TaskClass;
use rtmgr_core::CpuSet;
use std::collections::BTreeMap;

#[derive(Clone)]
struct Changed {
    /// What it had before (its policy once the guest's was changed: Linux
    /// guests), as journalled.
    lent: Lent,
    /// Its RT CPU while a guest; None while held on the NRT CPUs.
    cpu: Option<u32>,
    /// Adopted (an RT1+ task across both sets): between lends it stays on
    /// the NRT CPUs; only the end of the run gives it its affinity back.
    adopted: bool,
}

/// Sends guests to the NRT CPUs at once, from any thread: every guest sits
/// in a cpuset that holds the NRT CPUs too (v1: the root; v2: the RT
/// partition is a member while lending), so one affinity change does it.
#[derive(Clone)]
pub struct Evictor {
    host: Host,
    nrt: CpuSet,
}

impl Evictor {
    pub fn evict(&self, tid: u32) -> Result<(), HostError> {
        match self.host.set_affinity(tid, &self.nrt) {
            Err(e) if !e.is_gone() => Err(e),
            _ => Ok(()),
        }
    }
}

/// Applies pushes and remembers how to undo them. Dropping it restores all.
pub struct Mover {
    host: Host,
    layout: Layout,
    nrt: CpuSet,
    changed: BTreeMap<u32, Changed>,
    /// What each task lent in this run had before its first lend (kept after
    /// it left): the state its forked children and new threads go back to.
    origins: BTreeMap<u32, Changed>,
    /// The partition journal: each task's `Lend` before it is changed.
    journal: LendJournal,
}

impl Mover {
    /// A mover that journals in `applied`'s partition journal.
    pub fn new(host: &Host, applied: &Applied) -> Result<Self, HostError> {
        Ok(Mover {
            host: host.clone(),
            layout: applied.layout.clone(),
            nrt: applied.plan.nrt.clone(),
            changed: BTreeMap::new(),
            origins: BTreeMap::new(),
            journal: LendJournal::open(host, &applied.journal)?,
        })
    }

    pub fn evictor(&self) -> Evictor {
        Evictor {
            host: self.host.clone(),
            nrt: self.nrt.clone(),
        }
    }

    /// tid → RT CPU of the current guests.
    pub fn guests(&self) -> BTreeMap<u32, u32> {
        self.changed
            .iter()
            .filter_map(|(&t, c)| Some((t, c.cpu?)))
            .collect()
    }

    /// Remember and journal what `tid` has before it is changed (its policy
    /// too when `policy` says it will change); nothing to do when that is
    /// remembered already.
    fn remember(
        &mut self,
        tid: u32,
        start_time: u64,
        adopted: bool,
        policy: bool,
    ) -> Result<(), HostError> {
        if let Some(c) = self.changed.get_mut(&tid) {
            if policy && c.lent.policy.is_none() {
                let lent = Lent {
                    policy: Some(self.host.get_policy(tid)?),
                    ..c.lent.clone()
                };
                self.journal.lend(&lent)?;
                c.lent = lent;
            }
            return Ok(());
        }
        let lent = Lent {
            tid,
            start_time,
            affinity: self.host.get_affinity(tid)?,
            cpuset_cpus: cgroup::task_cpuset_cpus(&self.host, &self.layout, tid),
            cgroup: cgroup::task_cgroup(&self.host, &self.layout, tid)
                .map(|rel| self.layout.dir(&rel)),
            policy: match policy {
                true => Some(self.host.get_policy(tid)?),
                false => None,
            },
        };
        self.journal.lend(&lent)?;
        self.changed.insert(
            tid,
            Changed {
                lent,
                cpu: None,
                adopted,
            },
        );
        Ok(())
    }

    /// Take an RT1+ task whose affinity reaches into the RT CPUs under the
    /// policy: held on the NRT CPUs until lent (ARTiS §2.1), its affinity
    /// given back when the run ends.
    pub fn adopt(&mut self, tid: u32, start_time: u64) -> Result<(), HostError> {
        let new = !self.changed.contains_key(&tid);
        self.remember(tid, start_time, true, false)?;
        let r = self.evictor().evict(tid);
        if r.is_err() && new {
            // Nothing changed: nothing to give back at the end of the run
            // (its journalled `Lend` is settled then).
            self.changed.remove(&tid);
        }
        r
    }

    /// Make `tid` a guest on RT CPU `cpu`: into a cpuset that contains the
    /// CPU (v1: the root cpuset), pinned to it, and a Linux task at
    /// SCHED_IDLE. Recorded and journalled before changing.
    pub fn to_rt(
        &mut self,
        tid: u32,
        cpu: u32,
        start_time: u64,
        class: TaskClass,
    ) -> Result<(), HostError> {
        let linux = class == TaskClass::Linux;
        self.remember(tid, start_time, false, linux)?;
        let r = (|| {
            if let Layout::V1(mount) = &self.layout {
                cgroup::attach(&self.host, &self.layout, mount, tid)?;
            }
            self.host.set_affinity(tid, &CpuSet::single(cpu))?;
            if linux {
                self.host.set_policy(tid, Policy::Idle)?;
            }
            Ok(())
        })();
        match r {
            Ok(()) => {
                if let Some(c) = self.changed.get_mut(&tid) {
                    c.cpu = Some(cpu);
                    if !c.adopted {
                        self.origins.entry(tid).or_insert_with(|| c.clone());
                    }
                }
                Ok(())
            }
            Err(e) => {
                let _ = self.restore(tid);
                Err(e)
            }
        }
    }

    /// A task created by the guest `from` (a forked process or a new thread)
    /// that inherited its RT-CPU pinning: made a guest of the same CPU under
    /// the same rules, to be given back what `from` had before its first
    /// lend (journalled as its own lend). Returns its CPU, or None when it is
    /// not pinned to one RT CPU (any more) or `from` was never lent; an error
    /// when it could not be journalled (it is given back at the end of the
    /// run all the same).
    pub fn adopt_child(
        &mut self,
        tid: u32,
        start_time: u64,
        from: u32,
        rt: &CpuSet,
    ) -> Result<Option<u32>, HostError> {
        if self.changed.contains_key(&tid) {
            return Ok(None);
        }
        let Some(origin) = self.origins.get(&from) else {
            return Ok(None);
        };
        let aff = self.host.get_affinity(tid)?;
        let Some(cpu) = aff.first().filter(|&c| aff.len() == 1 && rt.contains(c)) else {
            return Ok(None);
        };
        let c = Changed {
            lent: Lent {
                tid,
                start_time,
                ..origin.lent.clone()
            },
            cpu: Some(cpu),
            ..origin.clone()
        };
        let journalled = self.journal.lend(&c.lent);
        self.changed.insert(tid, c);
        journalled.map(|()| Some(cpu))
    }

    /// Back to the NRT CPUs: an adopted task stays held there; any other
    /// gets its affinity, cpuset and policy back.
    pub fn restore(&mut self, tid: u32) -> Result<(), HostError> {
        match self.changed.get(&tid) {
            None => Ok(()),
            Some(c) if c.adopted => {
                let policy = c.lent.policy;
                let r = self.evictor().evict(tid).and(match policy {
                    Some(p) => self.host.set_policy(tid, p),
                    None => Ok(()),
                });
                if let Some(c) = self.changed.get_mut(&tid) {
                    c.cpu = None;
                    c.lent.policy = None;
                }
                ignore_gone(r)
            }
            Some(_) => self.give_back(tid),
        }
    }

    /// Undo everything done to `tid`; a task found gone is settled in the
    /// journal at once, one given back at the end of the run (`LendJournal`).
    fn give_back(&mut self, tid: u32) -> Result<(), HostError> {
        let Some(c) = self.changed.remove(&tid) else {
            return Ok(());
        };
        if !lends::give_back(&self.host, &self.layout, &c.lent)? {
            self.journal.given_back(tid);
        }
        Ok(())
    }

    /// Undo every change and journal the run's tasks given back (a task
    /// that could not be is left to `partition reset`); returns how many
    /// and the failures.
    pub fn restore_all(&mut self) -> (usize, Vec<String>) {
        let tids: Vec<u32> = self.changed.keys().copied().collect();
        let mut fails = Vec::new();
        let mut kept = Vec::new();
        for &tid in &tids {
            if let Err(e) = self.give_back(tid) {
                fails.push(format!("task {tid}: {e}"));
                kept.push(tid);
            }
        }
        self.journal.given_back_all_but(&kept);
        (tids.len(), fails)
    }
}

impl Drop for Mover {
    fn drop(&mut self) {
        let (_, fails) = self.restore_all();
        for f in fails {
            tracing::error!("balance: could not restore {f}");
            eprintln!("rtmgr: balance: could not restore {f}");
        }
    }
}
