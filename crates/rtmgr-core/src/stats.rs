//! Latency statistics (docs/architecture.md "Measuring"; McKenney §3: average, 99.999 % and
//! maximum): a signed HDR histogram at nanosecond resolution with no upper bound,
//! nearest-rank percentiles, and summaries that report a percentile only when the
//! sample count supports it.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Significant figures kept by the histograms: values within 0.1 % share a bucket.
pub const SIGFIG: u8 = 3;

/// A percentile is reported only when at least this many samples lie at or
/// beyond it (p99.9 needs n ≥ 10 000, p99.999 needs n ≥ 1 000 000).
pub const MIN_TAIL_SAMPLES: u64 = 10;

/// The percentiles rtmgr reports, in parts per million.
pub const PERCENTILES_PPM: [u32; 6] = [500_000, 900_000, 990_000, 999_000, 999_900, 999_990];

/// Does a run of `n` samples support percentile `ppm`?
pub fn supports(n: u64, ppm: u32) -> bool {
    let tail_ppm = 1_000_000u128 - u128::from(ppm.min(1_000_000));
    u128::from(n) * tail_ppm >= u128::from(MIN_TAIL_SAMPLES) * 1_000_000
}

/// Nearest rank (1-based) of percentile `ppm` among `n` samples: ⌈ppm·n/10⁶⌉, at least 1.
pub fn nearest_rank(n: u64, ppm: u32) -> u64 {
    let r = (u128::from(n) * u128::from(ppm.min(1_000_000))).div_ceil(1_000_000);
    (r as u64).clamp(1, n.max(1))
}

/// Human label of a percentile: 990000 → "p99", 999900 → "p99.99".
pub fn label(ppm: u32) -> String {
    let whole = ppm / 10_000;
    let mut frac = format!("{:04}", ppm % 10_000);
    while frac.ends_with('0') {
        frac.pop();
    }
    if frac.is_empty() {
        format!("p{whole}")
    } else {
        format!("p{whole}.{frac}")
    }
}

/// A histogram of signed nanosecond values (latency is ≥ 0; relative-mode jitter
/// may be negative). Min, max and sum are kept exactly beside the buckets.
#[derive(Debug, Clone)]
pub struct Hist {
    pos: Histogram<u64>,
    /// Magnitudes of negative values.
    neg: Histogram<u64>,
    n: u64,
    min: i64,
    max: i64,
    sum: i128,
}

impl Default for Hist {
    fn default() -> Self {
        Self::new()
    }
}

fn empty_histogram() -> Histogram<u64> {
    Histogram::new(SIGFIG).expect("sigfig 3 is valid")
}

impl Hist {
    pub fn new() -> Self {
        Hist {
            pos: empty_histogram(),
            neg: empty_histogram(),
            n: 0,
            min: i64::MAX,
            max: i64::MIN,
            sum: 0,
        }
    }

    pub fn record(&mut self, v: i64) {
        self.record_n(v, 1);
    }

    pub fn record_n(&mut self, v: i64, count: u64) {
        if count == 0 {
            return;
        }
        if v >= 0 {
            put(&mut self.pos, v as u64, count);
        } else {
            put(&mut self.neg, v.unsigned_abs(), count);
        }
        self.n += count;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
        self.sum += i128::from(v) * i128::from(count);
    }

    /// Forget all samples but keep the allocated buckets (so a probe can size its
    /// histogram before the measurement and never allocate during it).
    pub fn clear(&mut self) {
        self.pos.reset();
        self.neg.reset();
        self.n = 0;
        self.min = i64::MAX;
        self.max = i64::MIN;
        self.sum = 0;
    }

    pub fn merge(&mut self, other: &Hist) {
        if other.n == 0 {
            return;
        }
        self.pos
            .add(&other.pos)
            .expect("auto-resizing histograms add");
        self.neg
            .add(&other.neg)
            .expect("auto-resizing histograms add");
        self.n += other.n;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
        self.sum += other.sum;
    }

    pub fn len(&self) -> u64 {
        self.n
    }

    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    pub fn min(&self) -> Option<i64> {
        (self.n > 0).then_some(self.min)
    }

    pub fn max(&self) -> Option<i64> {
        (self.n > 0).then_some(self.max)
    }

    pub fn mean(&self) -> Option<f64> {
        (self.n > 0).then(|| self.sum as f64 / self.n as f64)
    }

    /// Values are equal at the histogram's resolution (same bucket).
    pub fn equivalent(&self, a: i64, b: i64) -> bool {
        if (a < 0) != (b < 0) {
            return false;
        }
        let h = if a < 0 { &self.neg } else { &self.pos };
        h.equivalent(a.unsigned_abs(), b.unsigned_abs())
    }

    /// The value of the sample of 1-based rank `rank` in ascending order, at bucket
    /// resolution and clamped into [min, max] (rank 1 and rank n are exact).
    pub fn value_at_rank(&self, rank: u64) -> Option<i64> {
        if self.n == 0 || rank == 0 || rank > self.n {
            return None;
        }
        if rank == 1 {
            return Some(self.min);
        }
        if rank == self.n {
            return Some(self.max);
        }
        let neg_n = self.neg.len();
        let v = if rank <= neg_n {
            // The negatives in ascending order are the magnitudes in descending order.
            -(rank_in(&self.neg, neg_n - rank + 1) as i64)
        } else {
            rank_in(&self.pos, rank - neg_n) as i64
        };
        Some(v.clamp(self.min, self.max))
    }

    /// Nearest-rank percentile (parts per million), or None when empty.
    pub fn percentile(&self, ppm: u32) -> Option<i64> {
        self.value_at_rank(nearest_rank(self.n, ppm))
    }

    /// Number of samples strictly greater than `v`, at bucket resolution.
    pub fn count_above(&self, v: i64) -> u64 {
        self.buckets()
            .iter()
            .filter(|(b, _)| *b > v && !self.equivalent(*b, v))
            .map(|(_, c)| c)
            .sum()
    }

    /// Number of samples at or above `v`, at bucket resolution.
    pub fn count_at_or_above(&self, v: i64) -> u64 {
        self.buckets()
            .iter()
            .filter(|(b, _)| *b >= v || self.equivalent(*b, v))
            .map(|(_, c)| c)
            .sum()
    }

    /// Recorded buckets in ascending order of value: (representative value, count).
    /// Negative buckets are represented by their most negative value, positive ones
    /// by their highest equivalent value.
    pub fn buckets(&self) -> Vec<(i64, u64)> {
        let mut out: Vec<(i64, u64)> = self
            .neg
            .iter_recorded()
            .map(|it| (-(it.value_iterated_to() as i64), it.count_at_value()))
            .collect();
        out.reverse();
        out.extend(
            self.pos
                .iter_recorded()
                .map(|it| (it.value_iterated_to() as i64, it.count_at_value())),
        );
        out
    }

    pub fn summary(&self, missed: u64) -> Summary {
        Summary {
            n: self.n,
            min_ns: self.min(),
            mean_ns: self.mean(),
            percentiles: PERCENTILES_PPM
                .iter()
                .filter(|&&p| supports(self.n, p))
                .map(|&p| PercentileValue {
                    ppm: p,
                    value_ns: self.percentile(p).expect("non-empty when supported"),
                })
                .collect(),
            max_ns: self.max(),
            missed,
        }
    }

    pub fn to_data(&self) -> HistData {
        HistData {
            sigfig: SIGFIG,
            n: self.n,
            min_ns: self.min(),
            max_ns: self.max(),
            sum_ns: self.sum.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64,
            buckets: self.buckets(),
        }
    }

    /// Rebuild from serialised buckets; fails when the counts do not add up.
    pub fn from_data(d: &HistData) -> Result<Hist, String> {
        let mut h = Hist::new();
        for &(v, c) in &d.buckets {
            if v >= 0 {
                put(&mut h.pos, v as u64, c);
            } else {
                put(&mut h.neg, v.unsigned_abs(), c);
            }
            h.n += c;
        }
        if h.n != d.n {
            return Err(format!("bucket counts add up to {}, n is {}", h.n, d.n));
        }
        if h.n > 0 {
            match (d.min_ns, d.max_ns) {
                (Some(lo), Some(hi)) if lo <= hi => {
                    h.min = lo;
                    h.max = hi;
                }
                _ => return Err("non-empty histogram without a valid min/max".into()),
            }
        }
        h.sum = i128::from(d.sum_ns);
        Ok(h)
    }
}

/// Record, growing the histogram as needed (saturating only beyond what
/// hdrhistogram can represent, about 2^62 ns).
fn put(h: &mut Histogram<u64>, v: u64, count: u64) {
    if h.record_n(v, count).is_err() {
        h.saturating_record_n(v, count);
    }
}

fn rank_in(h: &Histogram<u64>, rank: u64) -> u64 {
    let mut seen = 0u64;
    for it in h.iter_recorded() {
        seen += it.count_at_value();
        if seen >= rank {
            return it.value_iterated_to();
        }
    }
    h.max()
}

/// One reported percentile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PercentileValue {
    /// Parts per million: 990000 is p99.
    pub ppm: u32,
    pub value_ns: i64,
}

/// What rtmgr reports for one set of samples (McKenney §3, docs/architecture.md "Measuring").
/// In JSON each reported percentile also appears under its own key beside the
/// list (`p99_ns`, `p99_9_ns`, …: see `percentile_key`), so `jq .summary.p99_ns`
/// picks it out; reading ignores those keys (the list is the data).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Summary {
    pub n: u64,
    pub min_ns: Option<i64>,
    pub mean_ns: Option<f64>,
    /// Only the percentiles that n supports (see `supports`).
    pub percentiles: Vec<PercentileValue>,
    pub max_ns: Option<i64>,
    /// Releases that came while the task was still late for an earlier one.
    pub missed: u64,
}

/// The JSON key of a percentile beside the list: 990000 → "p99_ns", 999900 → "p99_99_ns".
pub fn percentile_key(ppm: u32) -> String {
    format!("{}_ns", label(ppm).replace('.', "_"))
}

impl Serialize for Summary {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(None)?;
        m.serialize_entry("n", &self.n)?;
        m.serialize_entry("min_ns", &self.min_ns)?;
        m.serialize_entry("mean_ns", &self.mean_ns)?;
        for p in &self.percentiles {
            m.serialize_entry(&percentile_key(p.ppm), &p.value_ns)?;
        }
        m.serialize_entry("percentiles", &self.percentiles)?;
        m.serialize_entry("max_ns", &self.max_ns)?;
        m.serialize_entry("missed", &self.missed)?;
        m.end()
    }
}

impl Summary {
    pub fn get(&self, ppm: u32) -> Option<i64> {
        self.percentiles
            .iter()
            .find(|p| p.ppm == ppm)
            .map(|p| p.value_ns)
    }
}

/// A histogram as stored in reports: sparse buckets plus exact min/max/sum.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistData {
    pub sigfig: u8,
    pub n: u64,
    pub min_ns: Option<i64>,
    pub max_ns: Option<i64>,
    pub sum_ns: i64,
    /// (value in ns, count), ascending.
    pub buckets: Vec<(i64, u64)>,
}

/// Ratio a/b, None when b is zero or either is missing.
pub fn ratio(a: Option<i64>, b: Option<i64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0 => Some(a as f64 / b as f64),
        _ => None,
    }
}

pub mod bootstrap;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reference(sorted: &[i64], ppm: u32) -> i64 {
        sorted[(nearest_rank(sorted.len() as u64, ppm) - 1) as usize]
    }

    #[test]
    fn labels() {
        assert_eq!(label(500_000), "p50");
        assert_eq!(label(990_000), "p99");
        assert_eq!(label(999_000), "p99.9");
        assert_eq!(label(999_990), "p99.999");
    }

    #[test]
    fn support_thresholds() {
        assert!(!supports(999, 990_000));
        assert!(supports(1000, 990_000));
        assert!(!supports(9_999, 999_000));
        assert!(supports(10_000, 999_000));
        assert!(!supports(999_999, 999_990));
        assert!(supports(1_000_000, 999_990));
        let s = {
            let mut h = Hist::new();
            for v in 0..10_000 {
                h.record(v);
            }
            h.summary(0)
        };
        let labels: Vec<_> = s.percentiles.iter().map(|p| label(p.ppm)).collect();
        assert_eq!(labels, ["p50", "p90", "p99", "p99.9"]);
    }

    #[test]
    fn json_names_each_reported_percentile_beside_the_list() {
        let mut h = Hist::new();
        for v in 1..=10_000 {
            h.record(v);
        }
        let s = h.summary(2);
        let v = serde_json::to_value(&s).unwrap();
        for (key, ppm) in [
            ("p50_ns", 500_000),
            ("p99_ns", 990_000),
            ("p99_9_ns", 999_000),
        ] {
            assert_eq!(v[key], s.get(ppm).unwrap(), "{key}");
        }
        assert!(v.get("p99_99_ns").is_none(), "not supported by n: {v}");
        assert_eq!(v["percentiles"].as_array().unwrap().len(), 4);
        assert_eq!(v["missed"], 2);
        let back: Summary = serde_json::from_value(v).unwrap();
        assert_eq!(back, s);
        assert_eq!(percentile_key(999_990), "p99_999_ns");
    }

    #[test]
    fn empty_has_no_values() {
        let h = Hist::new();
        let s = h.summary(3);
        assert_eq!(s.n, 0);
        assert!(s.min_ns.is_none() && s.max_ns.is_none() && s.percentiles.is_empty());
        assert_eq!(s.missed, 3);
    }

    #[test]
    fn nanosecond_resolution_without_upper_bound() {
        let mut h = Hist::new();
        h.record(1);
        h.record(999);
        h.record(3_600_000_000_000); // an hour
        assert_eq!(h.min(), Some(1));
        assert_eq!(h.max(), Some(3_600_000_000_000));
        assert_eq!(h.value_at_rank(2), Some(999));
        h.clear();
        assert!(h.is_empty() && h.max().is_none());
        h.record(-3);
        assert_eq!(h.summary(0).min_ns, Some(-3));
    }

    proptest! {
        #[test]
        fn percentiles_match_sorted_reference(
            mut xs in prop::collection::vec(-2_000_000i64..50_000_000, 1..400),
            ppm in 0u32..=1_000_000,
        ) {
            let mut h = Hist::new();
            for &x in &xs { h.record(x); }
            xs.sort_unstable();
            let want = reference(&xs, ppm);
            let got = h.percentile(ppm).unwrap();
            prop_assert!(h.equivalent(got, want), "got {got} want {want}");
            prop_assert_eq!(h.min(), Some(xs[0]));
            prop_assert_eq!(h.max(), Some(*xs.last().unwrap()));
            let s = h.summary(0);
            for p in &s.percentiles {
                prop_assert!(h.equivalent(p.value_ns, reference(&xs, p.ppm)));
                prop_assert!(supports(xs.len() as u64, p.ppm));
            }
        }

        #[test]
        fn merge_equals_recording_all(
            a in prop::collection::vec(-1000i64..10_000_000, 0..200),
            b in prop::collection::vec(-1000i64..10_000_000, 0..200),
        ) {
            let (mut ha, mut hb, mut all) = (Hist::new(), Hist::new(), Hist::new());
            for &x in &a { ha.record(x); all.record(x); }
            for &x in &b { hb.record(x); all.record(x); }
            ha.merge(&hb);
            prop_assert_eq!(ha.to_data(), all.to_data());
        }

        #[test]
        fn data_round_trips(xs in prop::collection::vec(-5000i64..900_000_000, 0..300)) {
            let mut h = Hist::new();
            for &x in &xs { h.record(x); }
            let d = h.to_data();
            let json = serde_json::to_string(&d).unwrap();
            let back: HistData = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(&back, &d);
            let h2 = Hist::from_data(&back).unwrap();
            prop_assert_eq!(h2.to_data(), d);
            prop_assert_eq!(h2.summary(1), h.summary(1));
        }
    }

    #[test]
    fn from_data_rejects_inconsistent_counts() {
        let mut h = Hist::new();
        h.record(5);
        let mut d = h.to_data();
        d.n = 2;
        assert!(Hist::from_data(&d).is_err());
    }
}
