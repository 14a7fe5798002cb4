//! Admission control for reservations of W every P on the RT CPUs (ARTiS §4:
//! periodicity and capacity per RT0 task, EDF or RM per RT CPU instead of
//! leaving schedulability to the developer; McKenney §5 rule 2: cap each CPU's
//! utilisation; budget-based RTAI §3: W every P). Pure: the daemon, `rtmgr
//! admit` and the simulator call the same functions over the same data.
//!
//! Per RT CPU: hard reservations run under SCHED_DEADLINE and must pass the
//! EDF test ([`edf`]) within the kernel's `sched_rt_runtime_us` share; soft
//! ones run under SCHED_FIFO and must pass response-time analysis ([`rta`])
//! with the hard ones as the highest-priority interference; the total
//! utilisation stays under a configurable cap. [`place`] picks the CPU.
//!
//! A decision stays in tens of microseconds with a thousand reservations
//! admitted: each CPU keeps its sums up to date as reservations come and go
//! (`load`, `summary`: utilisation, per-period demand, each FIFO
//! reservation's demand at its deadline), cheap and sufficient tests come
//! before the exact ones, and only what the new reservation can disturb is
//! re-analysed. The verdicts are those of the exact tests (checked against
//! them by property tests).

mod demand;
pub mod edf;
mod entry_demand;
#[cfg(test)]
mod equivalence_tests;
mod fmt;
mod load;
pub mod memory;
pub mod place;
pub mod policy;
pub mod rate;
#[cfg(test)]
mod reference;
mod refusal;
pub mod rta;
pub mod sim;
mod summary;
pub mod taskset;
#[cfg(test)]
mod tests;

pub use demand::{Demand, DemandError, Kind, MAX_PERIOD_NS, MIN_BUDGET_NS};
pub use fmt::duration as fmt_duration;
pub use load::{CpuLoad, Entry};
pub use place::{admit_set, Placement, SetTask, SetVerdict};
pub use refusal::{CpuRefusal, Refusal};

use crate::cpuset::CpuSet;
use serde::{Deserialize, Serialize};

/// A reservation's identity (the daemon's reservation id; a task's index offline).
pub type Id = u64;

/// Which rule places a reservation on an RT CPU.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AdmissionConfig {
    /// Highest total utilisation (hard + soft) per RT CPU (McKenney §5 rule 2).
    pub cap: f64,
    /// The kernel's SCHED_DEADLINE share per CPU: sched_rt_runtime_us /
    /// sched_rt_period_us (1.0 when the limit is off, -1).
    pub dl_share: f64,
    pub placement: Placement,
}

/// Default utilisation cap per RT CPU: 10 % headroom.
pub const DEFAULT_CAP: f64 = 0.90;

impl Default for AdmissionConfig {
    fn default() -> Self {
        AdmissionConfig {
            cap: DEFAULT_CAP,
            dl_share: 0.95,
            placement: Placement::default(),
        }
    }
}

impl AdmissionConfig {
    /// The kernel's share from /proc/sys/kernel/sched_rt_{runtime,period}_us.
    pub fn dl_share_from(rt_runtime_us: i64, rt_period_us: i64) -> f64 {
        if rt_runtime_us < 0 || rt_period_us <= 0 {
            1.0
        } else {
            (rt_runtime_us as f64 / rt_period_us as f64).min(1.0)
        }
    }
}

/// Where a reservation fits, and the response times it would set.
#[derive(Debug, Clone, PartialEq)]
pub struct Placed {
    pub cpu: u32,
    /// The reservation's soft response time (0 for hard ones).
    pub response_ns: u64,
    /// New response times of the soft reservations already on the CPU.
    updated: Vec<(Id, u64)>,
}

/// The admission state: what every RT CPU holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Admission {
    pub cfg: AdmissionConfig,
    cpus: Vec<CpuLoad>,
}

impl Admission {
    pub fn new(cfg: AdmissionConfig, rt_cpus: &CpuSet) -> Self {
        Admission {
            cfg,
            cpus: rt_cpus.iter().map(CpuLoad::new).collect(),
        }
    }

    pub fn cpus(&self) -> &[CpuLoad] {
        &self.cpus
    }

    fn load(&self, cpu: u32) -> Option<&CpuLoad> {
        self.cpus.iter().find(|c| c.cpu == cpu)
    }

    /// Mark an RT CPU online or offline (an offline CPU takes nothing new).
    pub fn set_online(&mut self, cpu: u32, online: bool) {
        if let Some(c) = self.cpus.iter_mut().find(|c| c.cpu == cpu) {
            c.online = online;
        }
    }

    /// Where `count` threads with this demand would go, without changing
    /// anything: `cpu` None = any RT CPU, in the configured placement order.
    pub fn check(&self, demand: &Demand, count: u32, cpu: Option<u32>) -> Result<Placed, Refusal> {
        let order = match cpu {
            Some(c) if self.load(c).is_none() => {
                return Err(Refusal {
                    cpus: vec![CpuRefusal::NotRt { cpu: c }],
                })
            }
            Some(c) => vec![c],
            None => place::order(self.cfg.placement, &self.cpus),
        };
        let mut why = Vec::new();
        for c in order {
            let load = self.load(c).expect("candidates are RT CPUs");
            match self.fits(load, demand, count.max(1)) {
                Ok(p) => return Ok(p),
                Err(r) => why.push(r),
            }
        }
        Err(Refusal { cpus: why })
    }

    /// One CPU's verdict: cheap checks first.
    fn fits(&self, load: &CpuLoad, d: &Demand, count: u32) -> Result<Placed, CpuRefusal> {
        let cpu = load.cpu;
        if !load.online {
            return Err(CpuRefusal::Offline { cpu });
        }
        let add = d.utilisation() * f64::from(count);
        let would = load.utilisation() + add;
        if would > self.cfg.cap + 1e-12 {
            return Err(CpuRefusal::Utilisation {
                cpu,
                would,
                cap: self.cfg.cap,
            });
        }
        let new = Entry::new(Id::MAX, *d, count, 0);
        if d.is_hard() {
            let would = load.hard_utilisation() + add;
            if would > self.cfg.dl_share + 1e-12 {
                return Err(CpuRefusal::DeadlineShare {
                    cpu,
                    would,
                    share: self.cfg.dl_share,
                });
            }
            let set = summary::WithNew {
                summary: &load.summary,
                new: &new,
            };
            edf::check(&set).map_err(|(at_ns, demand_ns)| CpuRefusal::EdfDemand {
                cpu,
                at_ns,
                demand_ns,
            })?;
        }
        let (response_ns, updated) =
            rta::check(load, &new).map_err(|f| CpuRefusal::ResponseTime {
                cpu,
                task: f.task,
                response_ns: f.response_ns,
                deadline_ns: f.deadline_ns,
            })?;
        Ok(Placed {
            cpu,
            response_ns,
            updated,
        })
    }

    /// Record a reservation where `check` placed it.
    pub fn insert(&mut self, id: Id, demand: Demand, count: u32, placed: &Placed) {
        let Some(load) = self.cpus.iter_mut().find(|c| c.cpu == placed.cpu) else {
            return;
        };
        for (sid, r) in &placed.updated {
            if let Some(e) = load.soft.iter_mut().find(|e| e.id == *sid) {
                e.response_ns = *r;
            }
        }
        load.insert(Entry::new(id, demand, count.max(1), placed.response_ns));
    }

    /// Check and record in one step.
    pub fn admit(
        &mut self,
        id: Id,
        demand: Demand,
        count: u32,
        cpu: Option<u32>,
    ) -> Result<Placed, Refusal> {
        let placed = self.check(&demand, count, cpu)?;
        self.insert(id, demand, count, &placed);
        Ok(placed)
    }

    /// Record a reservation on a given CPU without checking (re-adopting the
    /// grants of an earlier daemon, which were admitted then).
    pub fn force(&mut self, id: Id, demand: Demand, count: u32, cpu: u32) -> bool {
        if self.load(cpu).is_none() {
            return false;
        }
        let placed = Placed {
            cpu,
            response_ns: 0,
            updated: Vec::new(),
        };
        self.insert(id, demand, count, &placed);
        true
    }

    /// Forget a reservation; false when unknown. Removing load never makes
    /// a set unschedulable, so nothing is re-checked; the cached response
    /// times it could have raised are dropped (the recurrence restarts from
    /// below, since a start above the least fixed point could overestimate).
    pub fn remove(&mut self, id: Id) -> bool {
        self.cpus.iter_mut().any(|load| load.remove(id))
    }

    /// Number of reservations admitted.
    pub fn len(&self) -> usize {
        self.cpus.iter().map(CpuLoad::reservations).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
