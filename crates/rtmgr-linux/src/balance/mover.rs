//! Applying the policy's pushes (ARTiS §2.2–2.3 from user space) and undoing
//! them: a guest goes into a cpuset that holds its RT CPU, is pinned to it
//! and — a Linux task — runs there at SCHED_IDLE, the lowest claim on the CPU
//! (§2.1: it runs only while nothing real-time wants the CPU). RT1+ tasks
//! started across both sets are adopted: held on the NRT CPUs unless lent.
//! Every change is remembered and undone (also on drop); the `Evictor` sends
//! a guest to the NRT CPUs at once from any thread (kernel entry, late sample).

use crate::cgroup::{self, Layout};
use crate::host::{Host, HostError};
use crate::partition::Applied;
use crate::sched::Policy;
use crate::tasks;
use rtmgr_core::class::TaskClass;
use rtmgr_core::CpuSet;
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Clone)]
struct Changed {
    start_time: u64,
    affinity: CpuSet,
    /// The CPUs its cpuset allowed then (`cgroup::mask_to_give_back`).
    cpuset_cpus: Option<CpuSet>,
    cgroup: Option<PathBuf>,
    /// The policy it had, when the guest's was changed (Linux guests).
    policy: Option<Policy>,
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
}

impl Mover {
    pub fn new(host: &Host, applied: &Applied) -> Self {
        Mover {
            host: host.clone(),
            layout: applied.layout.clone(),
            nrt: applied.plan.nrt.clone(),
            changed: BTreeMap::new(),
            origins: BTreeMap::new(),
        }
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

    fn remember(&mut self, tid: u32, start_time: u64, adopted: bool) -> Result<(), HostError> {
        if self.changed.contains_key(&tid) {
            return Ok(());
        }
        let affinity = self.host.get_affinity(tid)?;
        let cpuset_cpus = cgroup::task_cpuset_cpus(&self.host, &self.layout, tid);
        let cgroup =
            cgroup::task_cgroup(&self.host, &self.layout, tid).map(|rel| self.layout.dir(&rel));
        self.changed.insert(
            tid,
            Changed {
                start_time,
                affinity,
                cpuset_cpus,
                cgroup,
                policy: None,
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
        self.remember(tid, start_time, true)?;
        let r = self.evictor().evict(tid);
        if r.is_err() && new {
            // Nothing changed: nothing to give back at the end of the run.
            self.changed.remove(&tid);
        }
        r
    }

    /// Make `tid` a guest on RT CPU `cpu`: into a cpuset that contains the
    /// CPU (v1: the root cpuset), pinned to it, and a Linux task at
    /// SCHED_IDLE. Recorded before changing.
    pub fn to_rt(
        &mut self,
        tid: u32,
        cpu: u32,
        start_time: u64,
        class: TaskClass,
    ) -> Result<(), HostError> {
        self.remember(tid, start_time, false)?;
        let r = (|| {
            if let Layout::V1(mount) = &self.layout {
                cgroup::attach(&self.host, &self.layout, mount, tid)?;
            }
            self.host.set_affinity(tid, &CpuSet::single(cpu))?;
            if class == TaskClass::Linux {
                let c = self.changed.get_mut(&tid).expect("remembered");
                if c.policy.is_none() {
                    c.policy = self.host.get_policy(tid).ok();
                }
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
    /// lend. Returns its CPU, or None when it is not pinned to one RT CPU
    /// (any more) or `from` was never lent.
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
        self.changed.insert(
            tid,
            Changed {
                start_time,
                cpu: Some(cpu),
                ..origin.clone()
            },
        );
        Ok(Some(cpu))
    }

    /// Back to the NRT CPUs: an adopted task stays held there; any other
    /// gets its affinity, cpuset and policy back.
    pub fn restore(&mut self, tid: u32) -> Result<(), HostError> {
        match self.changed.get(&tid) {
            None => Ok(()),
            Some(c) if c.adopted => {
                let policy = c.policy;
                let r = self.evictor().evict(tid).and(match policy {
                    Some(p) => self.host.set_policy(tid, p),
                    None => Ok(()),
                });
                if let Some(c) = self.changed.get_mut(&tid) {
                    c.cpu = None;
                    c.policy = None;
                }
                ignore_gone(r)
            }
            Some(_) => self.give_back(tid),
        }
    }

    /// Undo everything done to `tid`.
    fn give_back(&mut self, tid: u32) -> Result<(), HostError> {
        let Some(c) = self.changed.remove(&tid) else {
            return Ok(());
        };
        if !tasks::same_task(&self.host, tid, c.start_time) {
            return Ok(()); // exited: nothing to give back
        }
        let policy = match c.policy {
            Some(p) => self.host.set_policy(tid, p),
            None => Ok(()),
        };
        let mask = cgroup::mask_to_give_back(&self.host, &c.affinity, c.cpuset_cpus.as_ref());
        let aff = self.host.set_affinity(tid, &mask);
        let cg = match &c.cgroup {
            Some(dir) => cgroup::attach(&self.host, &self.layout, dir, tid),
            None => Ok(()),
        };
        ignore_gone(policy.and(aff).and(cg))
    }

    /// Undo every change; returns how many and the failures.
    pub fn restore_all(&mut self) -> (usize, Vec<String>) {
        let tids: Vec<u32> = self.changed.keys().copied().collect();
        let mut fails = Vec::new();
        for &tid in &tids {
            if let Err(e) = self.give_back(tid) {
                fails.push(format!("task {tid}: {e}"));
            }
        }
        (tids.len(), fails)
    }
}

fn ignore_gone(r: Result<(), HostError>) -> Result<(), HostError> {
    match r {
        Err(e) if !e.is_gone() => Err(e),
        _ => Ok(()),
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
