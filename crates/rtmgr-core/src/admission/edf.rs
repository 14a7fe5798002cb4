//! The EDF test for the SCHED_DEADLINE reservations of one RT CPU (ARTiS §4:
//! EDF per RT CPU). With every deadline equal to its period, U ≤ 1 is exact
//! (Liu & Layland); with constrained deadlines (D < P) the processor-demand
//! criterion dbf(t) ≤ t is checked at the deadlines up to the synchronous
//! busy period with Quick convergence Processor-demand Analysis (QPA, Zhang &
//! Burns 2009), which visits few points. The kernel's own admission only
//! sums W/P, which is not enough when D < P.
//!
//! The walk reads the task set through [`HardSet`]: admission gives it the
//! CPU's per-period summary (`summary::WithNew`, O(periods · log n) a point),
//! [`Entries`] is the same set entry by entry (the reference of the tests).

use super::entry_demand::{entry_dbf, work};
use super::Entry;

/// What the EDF test needs to know of a set of SCHED_DEADLINE reservations.
pub trait HardSet {
    /// Σ W/P·count.
    fn utilisation(&self) -> f64;
    /// Every deadline equals its period.
    fn all_implicit(&self) -> bool;
    fn max_period(&self) -> u64;
    fn min_deadline(&self) -> u64;
    fn max_deadline(&self) -> u64;
    /// Σ (P − D)·W/P·count.
    fn slack(&self) -> f64;
    /// Processor demand of the jobs released and due within [0, t).
    fn dbf(&self, t: u64) -> u64;
    /// The largest absolute deadline strictly before t (0 if none).
    fn last_deadline_before(&self, t: u64) -> u64;
    /// Σ ⌈w/P⌉·W·count: one step of the busy-period recurrence.
    fn busy_step(&self, w: u64) -> u64;
}

/// Ok, or the first interval [0, t) found whose demand exceeds t: (t, demand).
pub fn check(set: &impl HardSet) -> Result<(), (u64, u64)> {
    let u = set.utilisation();
    if u > 1.0 + 1e-12 {
        // Over any hyperperiod the demand exceeds the time.
        let at = set.max_period();
        return Err((at, set.dbf(at)));
    }
    if set.all_implicit() {
        return Ok(());
    }
    let d_min = set.min_deadline();
    let limit = horizon(set, u);
    // QPA: walk down from the last deadline before the horizon.
    let mut t = set.last_deadline_before(limit.saturating_add(1));
    while t > 0 {
        let h = set.dbf(t);
        if h > t {
            return Err((t, h));
        }
        if h <= d_min {
            return Ok(());
        }
        t = if h < t {
            h
        } else {
            set.last_deadline_before(t)
        };
    }
    Ok(())
}

/// Where a violation must show up if there is one: the smaller of the
/// synchronous busy period and the bound of Baruah et al. (U < 1).
fn horizon(set: &impl HardSet, u: f64) -> u64 {
    let busy = busy_period(set);
    if u < 1.0 - 1e-9 {
        let la = set
            .max_deadline()
            .max((set.slack() / (1.0 - u)).ceil() as u64);
        busy.min(la)
    } else {
        busy
    }
}

/// Length of the synchronous busy period: w = Σ ⌈w/P⌉·W to a fixed point,
/// from w = Σ W (one job of each).
fn busy_period(set: &impl HardSet) -> u64 {
    let mut w = set.busy_step(1);
    for _ in 0..100_000 {
        let next = set.busy_step(w);
        if next == w {
            return w;
        }
        w = next;
    }
    w
}

/// A set of reservations read entry by entry: O(n) a point.
#[derive(Clone)]
pub struct Entries<I>(pub I);

impl<'a, I: Iterator<Item = &'a Entry> + Clone> HardSet for Entries<I> {
    fn utilisation(&self) -> f64 {
        self.0.clone().map(Entry::utilisation).sum()
    }

    fn all_implicit(&self) -> bool {
        self.0
            .clone()
            .all(|e| e.demand.deadline_ns == e.demand.period_ns)
    }

    fn max_period(&self) -> u64 {
        self.0
            .clone()
            .map(|e| e.demand.period_ns)
            .max()
            .unwrap_or(0)
    }

    fn min_deadline(&self) -> u64 {
        self.0
            .clone()
            .map(|e| e.demand.deadline_ns)
            .min()
            .unwrap_or(0)
    }

    fn max_deadline(&self) -> u64 {
        self.0
            .clone()
            .map(|e| e.demand.deadline_ns)
            .max()
            .unwrap_or(0)
    }

    fn slack(&self) -> f64 {
        self.0
            .clone()
            .map(|e| (e.demand.period_ns - e.demand.deadline_ns) as f64 * e.utilisation())
            .sum()
    }

    fn dbf(&self, t: u64) -> u64 {
        let sum: u128 = self.0.clone().map(|e| entry_dbf(e, t)).sum();
        u64::try_from(sum).unwrap_or(u64::MAX)
    }

    fn last_deadline_before(&self, t: u64) -> u64 {
        self.0
            .clone()
            .filter(|e| t > e.demand.deadline_ns)
            .map(|e| {
                let d = &e.demand;
                (t - 1 - d.deadline_ns) / d.period_ns * d.period_ns + d.deadline_ns
            })
            .max()
            .unwrap_or(0)
    }

    fn busy_step(&self, w: u64) -> u64 {
        let sum: u128 = self
            .0
            .clone()
            .map(|e| u128::from(w.div_ceil(e.demand.period_ns)) * work(e))
            .sum();
        u64::try_from(sum).unwrap_or(u64::MAX)
    }
}
