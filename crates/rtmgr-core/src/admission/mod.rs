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

pub mod edf;
mod fmt;
pub mod memory;
pub mod place;
pub mod policy;
pub mod rate;
pub mod rta;
pub mod sim;
pub mod taskset;
#[cfg(test)]
mod tests;

pub use fmt::{duration as fmt_duration, parse_duration};
pub use place::{admit_set, Placement, SetTask, SetVerdict};

use crate::cpuset::CpuSet;
use serde::{Deserialize, Serialize};

/// A reservation's identity (the daemon's reservation id; a task's index offline).
pub type Id = u64;

/// How a reservation is enforced: hard = SCHED_DEADLINE (EDF), soft =
/// SCHED_FIFO at a priority plus the rtmgr-rt soft budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Kind {
    Hard,
    Soft { priority: u8 },
}

/// What one thread of a reservation needs: budget W every period P, done
/// within D ≤ P of each release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Demand {
    pub period_ns: u64,
    pub budget_ns: u64,
    pub deadline_ns: u64,
    pub kind: Kind,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DemandError {
    #[error("period must be > 0")]
    ZeroPeriod,
    #[error("budget must be > 0")]
    ZeroBudget,
    #[error("budget {budget} exceeds the deadline {deadline}")]
    BudgetOverDeadline { budget: String, deadline: String },
    #[error("deadline {deadline} exceeds the period {period} (D ≤ P)")]
    DeadlineOverPeriod { deadline: String, period: String },
    #[error("period {0} is longer than the 10 s rtmgr accepts")]
    PeriodTooLong(String),
    #[error("budget {0} is shorter than the 10 µs rtmgr accepts (the kernel's SCHED_DEADLINE resolution is about 1 µs; bookkeeping costs more)")]
    BudgetTooShort(String),
    #[error("priority {0} out of range 1..98 (99 belongs to RT0 probes)")]
    Priority(u8),
}

/// Longest period accepted (keeps every sum and hyperperiod in range).
pub const MAX_PERIOD_NS: u64 = 10_000_000_000;
/// Shortest budget accepted.
pub const MIN_BUDGET_NS: u64 = 10_000;

impl Demand {
    /// Check 0 < W ≤ D ≤ P ≤ 10 s (D defaults to P).
    pub fn new(
        period_ns: u64,
        budget_ns: u64,
        deadline_ns: Option<u64>,
        kind: Kind,
    ) -> Result<Self, DemandError> {
        let deadline_ns = deadline_ns.unwrap_or(period_ns);
        if period_ns == 0 {
            return Err(DemandError::ZeroPeriod);
        }
        if budget_ns == 0 {
            return Err(DemandError::ZeroBudget);
        }
        if period_ns > MAX_PERIOD_NS {
            return Err(DemandError::PeriodTooLong(fmt_duration(period_ns)));
        }
        if budget_ns < MIN_BUDGET_NS {
            return Err(DemandError::BudgetTooShort(fmt_duration(budget_ns)));
        }
        if deadline_ns > period_ns {
            return Err(DemandError::DeadlineOverPeriod {
                deadline: fmt_duration(deadline_ns),
                period: fmt_duration(period_ns),
            });
        }
        if budget_ns > deadline_ns {
            return Err(DemandError::BudgetOverDeadline {
                budget: fmt_duration(budget_ns),
                deadline: fmt_duration(deadline_ns),
            });
        }
        if let Kind::Soft { priority } = kind {
            if !(1..=crate::class::RT1_MAX_PRIORITY).contains(&priority) {
                return Err(DemandError::Priority(priority));
            }
        }
        Ok(Demand {
            period_ns,
            budget_ns,
            deadline_ns,
            kind,
        })
    }

    /// W / P.
    pub fn utilisation(&self) -> f64 {
        self.budget_ns as f64 / self.period_ns as f64
    }

    pub fn is_hard(&self) -> bool {
        self.kind == Kind::Hard
    }

    /// SCHED_FIFO priority of a soft reservation.
    pub fn priority(&self) -> Option<u8> {
        match self.kind {
            Kind::Hard => None,
            Kind::Soft { priority } => Some(priority),
        }
    }
}

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

/// One admitted reservation on a CPU: `count` threads with the same demand.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: Id,
    pub demand: Demand,
    pub count: u32,
    /// Soft only: worst-case response time found at admission (ns).
    pub response_ns: u64,
}

impl Entry {
    fn utilisation(&self) -> f64 {
        self.demand.utilisation() * f64::from(self.count)
    }
}

/// What one RT CPU holds.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuLoad {
    pub cpu: u32,
    pub online: bool,
    /// SCHED_DEADLINE reservations.
    pub hard: Vec<Entry>,
    /// SCHED_FIFO reservations, highest priority first (ties: oldest first).
    pub soft: Vec<Entry>,
}

impl CpuLoad {
    fn new(cpu: u32) -> Self {
        CpuLoad {
            cpu,
            online: true,
            hard: Vec::new(),
            soft: Vec::new(),
        }
    }

    pub fn utilisation(&self) -> f64 {
        self.hard_utilisation() + total(&self.soft)
    }

    pub fn hard_utilisation(&self) -> f64 {
        total(&self.hard)
    }

    pub fn reservations(&self) -> usize {
        self.hard.len() + self.soft.len()
    }
}

/// Σ utilisation from +0.0: `Sum for f64` starts at -0.0, which an empty
/// CPU would print as "U -0.000".
fn total(entries: &[Entry]) -> f64 {
    entries
        .iter()
        .map(Entry::utilisation)
        .fold(0.0, |a, b| a + b)
}

/// Why one CPU cannot take a reservation, with the numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum CpuRefusal {
    /// Total utilisation over the cap.
    Utilisation {
        cpu: u32,
        would: f64,
        cap: f64,
    },
    /// SCHED_DEADLINE utilisation over the kernel's share.
    DeadlineShare {
        cpu: u32,
        would: f64,
        share: f64,
    },
    /// EDF processor demand in [0, at) exceeds `at`.
    EdfDemand {
        cpu: u32,
        at_ns: u64,
        demand_ns: u64,
    },
    /// A soft reservation's response time exceeds its deadline (`task`
    /// None = the one asked for).
    ResponseTime {
        cpu: u32,
        task: Option<Id>,
        response_ns: u64,
        deadline_ns: u64,
    },
    Offline {
        cpu: u32,
    },
    NotRt {
        cpu: u32,
    },
}

impl std::fmt::Display for CpuRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use CpuRefusal::*;
        match self {
            Utilisation { cpu, would, cap } => {
                write!(f, "CPU {cpu}: U would be {would:.2} > cap {cap:.2}")
            }
            DeadlineShare { cpu, would, share } => write!(
                f,
                "CPU {cpu}: SCHED_DEADLINE U would be {would:.2} > the kernel's share {share:.2} (sched_rt_runtime_us / sched_rt_period_us)"
            ),
            EdfDemand {
                cpu,
                at_ns,
                demand_ns,
            } => write!(
                f,
                "CPU {cpu}: EDF demand {} within {} > {}",
                fmt_duration(*demand_ns),
                fmt_duration(*at_ns),
                fmt_duration(*at_ns)
            ),
            ResponseTime {
                cpu,
                task,
                response_ns,
                deadline_ns,
            } => {
                let who = match task {
                    Some(id) => format!("τ{id}"),
                    None => "the new reservation".into(),
                };
                let r = if *response_ns == u64::MAX {
                    "unbounded".into()
                } else {
                    fmt_duration(*response_ns)
                };
                write!(
                    f,
                    "CPU {cpu}: response time of {who} {r} > deadline {}",
                    fmt_duration(*deadline_ns)
                )
            }
            Offline { cpu } => write!(f, "CPU {cpu}: offline"),
            NotRt { cpu } => write!(f, "CPU {cpu}: not an RT CPU"),
        }
    }
}

/// A refusal: why each CPU tried could not take the reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refusal {
    pub cpus: Vec<CpuRefusal>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.cpus.is_empty() {
            return f.write_str("no RT CPU");
        }
        let parts: Vec<String> = self.cpus.iter().map(|c| c.to_string()).collect();
        f.write_str(&parts.join("; "))
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
        let new = Entry {
            id: Id::MAX,
            demand: *d,
            count,
            response_ns: 0,
        };
        if d.is_hard() {
            let would = load.hard_utilisation() + add;
            if would > self.cfg.dl_share + 1e-12 {
                return Err(CpuRefusal::DeadlineShare {
                    cpu,
                    would,
                    share: self.cfg.dl_share,
                });
            }
            edf::check(load.hard.iter().chain(std::iter::once(&new))).map_err(
                |(at_ns, demand_ns)| CpuRefusal::EdfDemand {
                    cpu,
                    at_ns,
                    demand_ns,
                },
            )?;
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
        let e = Entry {
            id,
            demand,
            count: count.max(1),
            response_ns: placed.response_ns,
        };
        match demand.kind {
            Kind::Hard => load.hard.push(e),
            Kind::Soft { priority } => {
                // After every entry of the same or a higher priority.
                let at = load
                    .soft
                    .iter()
                    .position(|x| x.demand.priority().unwrap_or(0) < priority)
                    .unwrap_or(load.soft.len());
                load.soft.insert(at, e);
            }
        }
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
    /// a set unschedulable, so nothing is re-checked; the CPU's cached
    /// response times are dropped (the recurrence restarts from W, since a
    /// start above the least fixed point could overestimate).
    pub fn remove(&mut self, id: Id) -> bool {
        for load in &mut self.cpus {
            let hard = load.hard.iter().position(|e| e.id == id);
            let soft = load.soft.iter().position(|e| e.id == id);
            match (hard, soft) {
                (Some(i), _) => drop(load.hard.remove(i)),
                (None, Some(i)) => drop(load.soft.remove(i)),
                (None, None) => continue,
            }
            for e in &mut load.soft {
                e.response_ns = 0;
            }
            return true;
        }
        false
    }

    /// Number of reservations admitted.
    pub fn len(&self) -> usize {
        self.cpus.iter().map(CpuLoad::reservations).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
