//! Per-CPU demand summary for admission in bounded time (ARTiS §4: EDF or RM
//! per RT CPU; issue 22: p99 ≤ 50 µs with 1 000 reservations): one RT CPU's
//! reservations grouped by period and kept up to date on every insert and
//! removal, so that the EDF processor demand, the SCHED_DEADLINE interference
//! and the SCHED_FIFO interference at any instant cost O(periods · log n)
//! instead of a pass over every reservation. All sums are exact integers.

use super::entry_demand::{entry_dbf, work};
use super::{Entry, Kind};

/// Exact Σ of utilisations: each entry's W/P·count (an f64) held as a
/// fixed-point integer, so that a sum kept across months of inserts and
/// removals never drifts and does not depend on their order.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct UtilSum(i128);

/// 2^80: every utilisation rtmgr accepts (≥ 10 µs / 10 s ≈ 2^-20, 53-bit
/// mantissa) is a whole multiple of 2^-80, so the conversion is exact.
const SCALE: f64 = (1u128 << 80) as f64;

impl UtilSum {
    fn of(e: &Entry) -> i128 {
        (e.utilisation() * SCALE) as i128
    }

    pub(super) fn add(&mut self, e: &Entry) {
        self.0 += Self::of(e);
    }

    pub(super) fn sub(&mut self, e: &Entry) {
        self.0 -= Self::of(e);
    }

    /// The sum as f64 (+0.0 when empty).
    pub(super) fn get(self) -> f64 {
        self.0 as f64 / SCALE
    }
}

/// Weights under sorted keys (equal keys merged), with prefix sums: Σ of the
/// weights whose key is below x in O(log n).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Sorted {
    keys: Vec<u64>,
    weights: Vec<u128>,
    /// prefix[i] = Σ weights[..i]; one longer than `keys`.
    prefix: Vec<u128>,
}

impl Sorted {
    fn change(&mut self, key: u64, weight: u128, add: bool) {
        let i = self.keys.partition_point(|&k| k < key);
        let present = self.keys.get(i) == Some(&key);
        match (present, add) {
            (true, true) => self.weights[i] += weight,
            (false, true) => {
                self.keys.insert(i, key);
                self.weights.insert(i, weight);
            }
            (true, false) => {
                self.weights[i] -= weight;
                if self.weights[i] == 0 {
                    self.keys.remove(i);
                    self.weights.remove(i);
                }
            }
            (false, false) => debug_assert!(false, "removing a key never added"),
        }
        self.prefix.clear();
        self.prefix.push(0);
        let mut sum = 0;
        for w in &self.weights {
            sum += w;
            self.prefix.push(sum);
        }
    }

    fn total(&self) -> u128 {
        self.prefix.last().copied().unwrap_or(0)
    }

    /// Σ weights with key < x.
    fn below(&self, x: u64) -> u128 {
        self.prefix
            .get(self.keys.partition_point(|&k| k < x))
            .copied()
            .unwrap_or(0)
    }

    /// The largest key ≤ x.
    fn max_at_most(&self, x: u64) -> Option<u64> {
        let i = self.keys.partition_point(|&k| k <= x);
        i.checked_sub(1).map(|i| self.keys[i])
    }

    fn max(&self) -> Option<u64> {
        self.keys.last().copied()
    }

    fn min(&self) -> Option<u64> {
        self.keys.first().copied()
    }
}

/// SCHED_DEADLINE reservations of one period.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct HardGroup {
    period: u64,
    /// W·count under W (for the jitter term of the response-time analysis).
    by_budget: Sorted,
    /// W·count under D (for the EDF processor demand).
    by_deadline: Sorted,
    /// Σ D·W·count (for Σ (P − D)·U).
    deadline_work: u128,
}

/// SCHED_FIFO reservations of one period.
#[derive(Debug, Clone, PartialEq, Eq)]
struct SoftGroup {
    period: u64,
    /// at_least[p] = Σ W·count of the reservations at priority ≥ p (every
    /// u8, so that a journal edited by hand cannot index past the end).
    at_least: [u128; 256],
    members: usize,
}

/// What one RT CPU holds, by period.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Summary {
    pub(super) util: UtilSum,
    pub(super) hard_util: UtilSum,
    /// Ascending period.
    hard: Vec<HardGroup>,
    soft: Vec<SoftGroup>,
    /// Hard reservations with D < P.
    constrained: usize,
}

fn group_at<T>(
    groups: &mut Vec<T>,
    period: u64,
    of: impl Fn(&T) -> u64,
    new: impl FnOnce() -> T,
) -> usize {
    let i = groups.partition_point(|g| of(g) < period);
    if groups.get(i).is_none_or(|g| of(g) != period) {
        groups.insert(i, new());
    }
    i
}

impl Summary {
    pub(super) fn add(&mut self, e: &Entry) {
        self.change(e, true);
    }

    pub(super) fn remove(&mut self, e: &Entry) {
        self.change(e, false);
    }

    fn change(&mut self, e: &Entry, add: bool) {
        let d = &e.demand;
        let w = work(e);
        if add {
            self.util.add(e);
        } else {
            self.util.sub(e);
        }
        match d.kind {
            Kind::Hard => {
                if add {
                    self.hard_util.add(e);
                } else {
                    self.hard_util.sub(e);
                }
                let constrained = usize::from(d.deadline_ns < d.period_ns);
                let i = group_at(
                    &mut self.hard,
                    d.period_ns,
                    |g| g.period,
                    || HardGroup {
                        period: d.period_ns,
                        ..HardGroup::default()
                    },
                );
                let g = &mut self.hard[i];
                g.by_budget.change(d.budget_ns, w, add);
                g.by_deadline.change(d.deadline_ns, w, add);
                let dw = u128::from(d.deadline_ns) * w;
                if add {
                    g.deadline_work += dw;
                    self.constrained += constrained;
                } else {
                    g.deadline_work -= dw;
                    self.constrained -= constrained;
                }
                if g.by_budget.keys.is_empty() {
                    self.hard.remove(i);
                }
            }
            Kind::Soft { priority } => {
                let i = group_at(
                    &mut self.soft,
                    d.period_ns,
                    |g| g.period,
                    || SoftGroup {
                        period: d.period_ns,
                        at_least: [0; 256],
                        members: 0,
                    },
                );
                let g = &mut self.soft[i];
                for s in &mut g.at_least[..=usize::from(priority)] {
                    if add {
                        *s += w;
                    } else {
                        *s -= w;
                    }
                }
                if add {
                    g.members += 1;
                } else {
                    g.members -= 1;
                    if g.members == 0 {
                        self.soft.remove(i);
                    }
                }
            }
        }
    }

    /// Σ over the SCHED_DEADLINE reservations of [`hard_interference`] at r.
    /// With r = aP + b (0 ≤ b < P) a reservation's term is
    /// W·(a + 1 + [b > W] − [b = 0 ∧ W = P]).
    pub(super) fn hard_interference(&self, r: u64) -> u128 {
        let mut sum = 0;
        for g in &self.hard {
            let (a, b) = (u128::from(r / g.period), r % g.period);
            let total = g.by_budget.total();
            sum += (a + 1) * total + g.by_budget.below(b);
            if b == 0 {
                sum -= total - g.by_budget.below(g.period);
            }
        }
        sum
    }

    /// Σ ⌈r/P⌉·W·count over the SCHED_FIFO reservations at priority ≥ `priority`.
    pub(super) fn soft_interference(&self, r: u64, priority: u8) -> u128 {
        let p = usize::from(priority);
        self.soft
            .iter()
            .map(|g| u128::from(r.div_ceil(g.period)) * g.at_least[p])
            .sum()
    }

    /// EDF processor demand of the hard reservations within [0, t): with
    /// t = aP + b a reservation's term is W·(a + [b ≥ D]).
    fn dbf(&self, t: u64) -> u128 {
        let mut sum = 0;
        for g in &self.hard {
            let (a, b) = (u128::from(t / g.period), t % g.period);
            sum += a * g.by_deadline.total() + g.by_deadline.below(b + 1);
        }
        sum
    }

    /// The largest absolute deadline of a hard reservation strictly before t.
    fn last_deadline_before(&self, t: u64) -> Option<u64> {
        let t1 = t.checked_sub(1)?;
        self.hard
            .iter()
            .filter_map(|g| {
                let (a, b) = (t1 / g.period, t1 % g.period);
                match g.by_deadline.max_at_most(b) {
                    Some(d) => Some(a * g.period + d),
                    None if a > 0 => g.by_deadline.max().map(|d| (a - 1) * g.period + d),
                    None => None,
                }
            })
            .max()
    }
}

/// The hard reservations of a CPU with a new one added, as the EDF test sees them.
pub(super) struct WithNew<'a> {
    pub(super) summary: &'a Summary,
    pub(super) new: &'a Entry,
}

impl super::edf::HardSet for WithNew<'_> {
    fn utilisation(&self) -> f64 {
        self.summary.hard_util.get() + self.new.utilisation()
    }

    fn all_implicit(&self) -> bool {
        self.summary.constrained == 0 && self.new.demand.deadline_ns == self.new.demand.period_ns
    }

    fn max_period(&self) -> u64 {
        let last = self.summary.hard.last().map_or(0, |g| g.period);
        last.max(self.new.demand.period_ns)
    }

    fn min_deadline(&self) -> u64 {
        let d = self.summary.hard.iter().filter_map(|g| g.by_deadline.min());
        d.chain([self.new.demand.deadline_ns]).min().unwrap_or(0)
    }

    fn max_deadline(&self) -> u64 {
        let d = self.summary.hard.iter().filter_map(|g| g.by_deadline.max());
        d.chain([self.new.demand.deadline_ns]).max().unwrap_or(0)
    }

    fn slack(&self) -> f64 {
        let d = &self.new.demand;
        let new = (d.period_ns - d.deadline_ns) as f64 * self.new.utilisation();
        let groups: f64 = self
            .summary
            .hard
            .iter()
            .map(|g| {
                let p = u128::from(g.period);
                (p * g.by_deadline.total() - g.deadline_work) as f64 / p as f64
            })
            .sum();
        groups + new
    }

    fn dbf(&self, t: u64) -> u64 {
        let sum = self.summary.dbf(t) + entry_dbf(self.new, t);
        u64::try_from(sum).unwrap_or(u64::MAX)
    }

    fn last_deadline_before(&self, t: u64) -> u64 {
        let d = &self.new.demand;
        let new = (t > d.deadline_ns)
            .then(|| (t - 1 - d.deadline_ns) / d.period_ns * d.period_ns + d.deadline_ns);
        self.summary.last_deadline_before(t).max(new).unwrap_or(0)
    }

    fn busy_step(&self, w: u64) -> u64 {
        let groups: u128 = self
            .summary
            .hard
            .iter()
            .map(|g| u128::from(w.div_ceil(g.period)) * g.by_budget.total())
            .sum();
        let sum = groups + u128::from(w.div_ceil(self.new.demand.period_ns)) * work(self.new);
        u64::try_from(sum).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::super::edf::{Entries, HardSet};
    use super::super::entry_demand::hard_interference;
    use super::super::{Demand, Entry, Kind};
    use super::*;

    /// Every formula of the grouped sums against the sum entry by entry, at
    /// release, deadline and budget boundary of two hyperperiods (and 1 ns
    /// either side), with budgets equal to the period and deadlines equal to
    /// it or shorter.
    #[test]
    fn grouped_sums_equal_the_sums_entry_by_entry() {
        let us = 1_000;
        let unit = 10 * us;
        let hard = |id, p: u64, w: u64, d: u64, count| {
            let demand = Demand::new(p * unit, w * unit, Some(d * unit), Kind::Hard);
            Entry::new(id, demand.unwrap(), count, 0)
        };
        let entries = [
            hard(1, 4, 4, 4, 1),
            hard(2, 4, 1, 2, 2),
            hard(3, 4, 2, 3, 1),
            hard(4, 6, 3, 6, 1),
            hard(5, 6, 1, 1, 1),
        ];
        let new = hard(9, 5, 2, 4, 1);
        let mut s = Summary::default();
        for e in &entries {
            s.add(e);
        }
        let grouped = WithNew {
            summary: &s,
            new: &new,
        };
        let each = Entries(entries.iter().chain([&new]));
        let instants =
            (0..=120).flat_map(|k| [k * unit, k * unit + 1, (k * unit).saturating_sub(1)]);
        for t in instants {
            let by_entry: u128 = entries.iter().map(|e| hard_interference(e, t)).sum();
            assert_eq!(s.hard_interference(t), by_entry, "interference at {t}");
            assert_eq!(grouped.dbf(t), each.dbf(t), "dbf at {t}");
            let last = (
                grouped.last_deadline_before(t),
                each.last_deadline_before(t),
            );
            assert_eq!(last.0, last.1, "last deadline before {t}");
            assert_eq!(grouped.busy_step(t), each.busy_step(t), "busy step at {t}");
        }
        assert!(!grouped.all_implicit());
        assert_eq!(grouped.min_deadline(), each.min_deadline());
        assert_eq!(grouped.max_deadline(), each.max_deadline());
        assert!((grouped.slack() - each.slack()).abs() < 1e-3);
        assert!((grouped.utilisation() - each.utilisation()).abs() < 1e-12);
        for e in &entries {
            s.remove(e);
        }
        assert_eq!(s, Summary::default(), "removal undoes insertion exactly");
    }
}
