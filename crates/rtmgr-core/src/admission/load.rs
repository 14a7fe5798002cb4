//! What one RT CPU holds (ARTiS §4: admission per RT CPU): its admitted
//! reservations, hard and soft, and the summaries kept up to date with them
//! on every insert and removal — the per-period demand summary and, for each
//! SCHED_FIFO reservation, its processor demand at its own deadline — so
//! that a decision reads cached sums instead of walking every reservation.

use super::entry_demand;
use super::summary::Summary;
use super::{Demand, Id, Kind};

/// One admitted reservation on a CPU: `count` threads with the same demand.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub id: Id,
    pub demand: Demand,
    pub count: u32,
    /// Soft only: worst-case response time found at admission (ns). A lower
    /// bound of the current one: admissions since then can only have raised
    /// it, and a removal that could lower it resets it to 0.
    pub response_ns: u64,
    /// Soft only: what one of its threads may be kept busy with in the
    /// window [0, D) from a critical instant — its own budget, its peers'
    /// and every interfering release (see `rta`) — kept exact on every
    /// insert and removal.
    pub(super) deadline_demand: u128,
}

impl Entry {
    pub(super) fn new(id: Id, demand: Demand, count: u32, response_ns: u64) -> Self {
        Entry {
            id,
            demand,
            count,
            response_ns,
            deadline_demand: 0,
        }
    }

    /// W / P · count.
    pub fn utilisation(&self) -> f64 {
        self.demand.utilisation() * f64::from(self.count)
    }

    /// Can `other` delay this soft reservation? (SCHED_DEADLINE runs above
    /// every FIFO task; a FIFO one of the same or a higher priority too.)
    pub(super) fn disturbed_by(&self, other: &Demand) -> bool {
        match (self.demand.kind, other.kind) {
            (Kind::Hard, _) => false,
            (Kind::Soft { .. }, Kind::Hard) => true,
            (Kind::Soft { priority: me }, Kind::Soft { priority }) => priority >= me,
        }
    }
}

/// What `other` brings into a window of length t of a soft reservation it disturbs.
pub(super) fn interference(other: &Entry, t: u64) -> u128 {
    match other.demand.kind {
        Kind::Hard => entry_demand::hard_interference(other, t),
        Kind::Soft { .. } => entry_demand::soft_interference(other, t),
    }
}

/// What one RT CPU holds. The lists are read-only outside this module: the
/// summaries follow them through [`CpuLoad::insert`] and [`CpuLoad::remove`].
#[derive(Debug, Clone, PartialEq)]
pub struct CpuLoad {
    pub cpu: u32,
    pub online: bool,
    /// SCHED_DEADLINE reservations.
    pub hard: Vec<Entry>,
    /// SCHED_FIFO reservations, highest priority first (ties: oldest first).
    pub soft: Vec<Entry>,
    pub(super) summary: Summary,
}

impl CpuLoad {
    pub(super) fn new(cpu: u32) -> Self {
        CpuLoad {
            cpu,
            online: true,
            hard: Vec::new(),
            soft: Vec::new(),
            summary: Summary::default(),
        }
    }

    /// Total utilisation, hard and soft (+0.0 when empty). O(1).
    pub fn utilisation(&self) -> f64 {
        self.summary.util.get()
    }

    /// SCHED_DEADLINE utilisation. O(1).
    pub fn hard_utilisation(&self) -> f64 {
        self.summary.hard_util.get()
    }

    pub fn reservations(&self) -> usize {
        self.hard.len() + self.soft.len()
    }

    /// Demand of one thread of `me` in [0, t) from a critical instant: its
    /// budget, its peers' releases, every hard reservation, the soft ones at
    /// its priority or above, and `extra` (a reservation being added, which
    /// disturbs `me`). `me` may be in the lists or not (`listed`).
    pub(super) fn demand_at(
        &self,
        me: &Entry,
        listed: bool,
        extra: Option<&Entry>,
        t: u64,
    ) -> u128 {
        let priority = me.demand.priority().unwrap_or(0);
        let own = u128::from(t.div_ceil(me.demand.period_ns)) * u128::from(me.demand.budget_ns);
        let mut sum = u128::from(me.demand.budget_ns)
            + own * u128::from(me.count.saturating_sub(1))
            + self.summary.hard_interference(t)
            + self.summary.soft_interference(t, priority)
            + extra.map_or(0, |x| interference(x, t));
        if listed {
            // The soft sums count all of `me`'s threads: take them out.
            sum -= own * u128::from(me.count);
        }
        sum
    }

    /// Record an entry (its response time already set); keep the summaries.
    pub(super) fn insert(&mut self, mut e: Entry) {
        for x in &mut self.soft {
            if x.disturbed_by(&e.demand) {
                x.deadline_demand += interference(&e, x.demand.deadline_ns);
            }
        }
        self.summary.add(&e);
        match e.demand.kind {
            Kind::Hard => self.hard.push(e),
            Kind::Soft { priority } => {
                e.deadline_demand = self.demand_at(&e, true, None, e.demand.deadline_ns);
                // After every entry of the same or a higher priority.
                let at = self
                    .soft
                    .partition_point(|x| x.demand.priority().unwrap_or(0) >= priority);
                self.soft.insert(at, e);
            }
        }
    }

    /// Take an entry out; keep the summaries. The response times it could
    /// have raised are reset (a start above the least fixed point could
    /// overestimate; the recurrence restarts from below).
    pub(super) fn remove(&mut self, id: Id) -> bool {
        let e = if let Some(i) = self.hard.iter().position(|e| e.id == id) {
            self.hard.remove(i)
        } else if let Some(i) = self.soft.iter().position(|e| e.id == id) {
            self.soft.remove(i)
        } else {
            return false;
        };
        self.summary.remove(&e);
        for x in &mut self.soft {
            if x.disturbed_by(&e.demand) {
                x.deadline_demand -= interference(&e, x.demand.deadline_ns);
                x.response_ns = 0;
            }
        }
        true
    }
}
