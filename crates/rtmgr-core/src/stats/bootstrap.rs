//! Uncertainty of a comparison made in one interleaved run (docs/architecture.md
//! "Measuring"; McKenney "Real Time vs Real Fast" §3: compare configurations in
//! one run, as ratios): a paired bootstrap over rounds — resample whole rounds
//! with replacement, the same draw for every configuration since they share a
//! round —, the percentile interval of a ratio, tail percentiles recomputed from
//! the resampled rounds' merged histograms, and the verdict rule against an A/A
//! noise floor (docs/evaluate.md "Intervals"). Pure: a fixed-seed generator.

use serde::{Deserialize, Serialize};

/// Resamples drawn for an interval (the percentile interval's ends rest on
/// the 50 most extreme of them on each side).
pub const RESAMPLES: usize = 2000;
/// The generator's seed: an interval is a function of the per-round data.
pub const SEED: u64 = 0x2028_0e5e_d5a7_b00f;
/// The interval's coverage.
pub const LEVEL: f64 = 0.95;
/// Fewer rounds than this give no interval: with 3 rounds there are only 10
/// distinct resamples, too few for a 95 % percentile interval to mean much.
pub const MIN_ROUNDS: usize = 4;

/// Why a comparison has no interval.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoInterval {
    #[error("not enough rounds ({rounds}; an interval needs {MIN_ROUNDS})")]
    NotEnoughRounds { rounds: usize },
    #[error("undefined (a figure is missing or the base is zero)")]
    Undefined,
}

/// The paired resampling of `rounds` rounds: for each resample, how many
/// times each round was drawn. Shared by every configuration of a run, so any
/// two configurations' figures of one resample are paired.
#[derive(Debug, Clone)]
pub struct Resampling {
    rounds: usize,
    weights: Vec<Vec<u32>>,
}

/// splitmix64: small, fast and good enough to draw round indices.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Resampling {
    /// `resamples` draws of `rounds` rounds with replacement, from `seed`.
    pub fn new(rounds: usize, resamples: usize, seed: u64) -> Result<Resampling, NoInterval> {
        if rounds < MIN_ROUNDS {
            return Err(NoInterval::NotEnoughRounds { rounds });
        }
        let mut state = seed;
        let weights = (0..resamples.max(1))
            .map(|_| {
                let mut w = vec![0u32; rounds];
                for _ in 0..rounds {
                    // Lemire's multiply-shift: an index in 0..rounds.
                    let i = ((u128::from(next(&mut state)) * rounds as u128) >> 64) as usize;
                    w[i] += 1;
                }
                w
            })
            .collect();
        Ok(Resampling { rounds, weights })
    }

    /// The default: [`RESAMPLES`] draws from [`SEED`].
    pub fn standard(rounds: usize) -> Result<Resampling, NoInterval> {
        Resampling::new(rounds, RESAMPLES, SEED)
    }

    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// Each resample's multiplicity of every round.
    pub fn draws(&self) -> impl Iterator<Item = &[u32]> {
        self.weights.iter().map(|w| w.as_slice())
    }

    /// The weights of the data as measured (every round once): the point estimate.
    pub fn all(&self) -> Vec<u32> {
        vec![1; self.rounds]
    }

    /// A statistic of the data as measured and of every resample.
    pub fn replicate<T>(&self, stat: impl Fn(&[u32]) -> T) -> Replicates<T> {
        Replicates {
            estimate: stat(&self.all()),
            draws: self.draws().map(stat).collect(),
        }
    }
}

/// A statistic's value on the data as measured and on each resample.
#[derive(Debug, Clone)]
pub struct Replicates<T> {
    pub estimate: T,
    pub draws: Vec<T>,
}

/// A ratio with its 95 % interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// The ratio of the figures as measured (all rounds).
    pub estimate: f64,
    pub low: f64,
    pub high: f64,
}

impl Interval {
    pub fn contains(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }
}

/// Ratio a/b; None when either is missing, b is zero or the ratio is not finite.
pub fn ratio_of(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    let r = a? / b?;
    (b? != 0.0 && r.is_finite()).then_some(r)
}

/// The percentile interval of the ratio a/b over paired replicates. A
/// resample where the ratio is undefined (a zero base) makes the interval
/// undefined when more than 2.5 % of them are: the interval would no longer
/// cover 95 % of the resampling distribution.
pub fn ratio_interval(
    a: &Replicates<Option<f64>>,
    b: &Replicates<Option<f64>>,
) -> Result<Interval, NoInterval> {
    let estimate = ratio_of(a.estimate, b.estimate).ok_or(NoInterval::Undefined)?;
    let total = a.draws.len().min(b.draws.len());
    let mut rs: Vec<f64> = a
        .draws
        .iter()
        .zip(&b.draws)
        .filter_map(|(x, y)| ratio_of(*x, *y))
        .collect();
    let tail = (1.0 - LEVEL) / 2.0;
    if total == 0 || (total - rs.len()) as f64 > tail * total as f64 {
        return Err(NoInterval::Undefined);
    }
    rs.sort_by(f64::total_cmp);
    // Nearest rank of the lower and upper percentiles among all draws; the
    // undefined ones counted as beyond both ends (conservative).
    let at = |q: f64| {
        let rank = ((q * total as f64).ceil() as usize).clamp(1, total);
        rs[(rank - 1).min(rs.len() - 1)]
    };
    let low = at(tail).min(estimate);
    let high = at(1.0 - tail).max(estimate);
    Ok(Interval {
        estimate,
        low,
        high,
    })
}

/// Σ weight × value over rounds (a count such as missed periods).
pub fn weighted_sum(values: &[f64], w: &[u32]) -> f64 {
    values.iter().zip(w).map(|(v, &k)| v * f64::from(k)).sum()
}

/// The weighted mean over rounds; None when no round with a value was drawn.
pub fn weighted_mean(values: &[Option<f64>], w: &[u32]) -> Option<f64> {
    let (mut s, mut k) = (0.0, 0u32);
    for (v, &n) in values.iter().zip(w) {
        if let (Some(v), true) = (v, n > 0) {
            s += v * f64::from(n);
            k += n;
        }
    }
    (k > 0).then(|| s / f64::from(k))
}

/// One round's histogram as `RoundHists` takes it: its buckets (`(value,
/// count)` ascending, as `HistData::buckets`) and its exact maximum.
pub type RoundBuckets<'a> = (&'a [(i64, u64)], Option<i64>);

/// Per-round histograms of one configuration on a common value grid, so a
/// resample's merged histogram is a weighted sum of count vectors and its
/// percentile a scan: the tail of the merged samples, not a mean of per-round
/// tails (a 1-second round's p99.9 rests on 4 samples).
#[derive(Debug, Clone)]
pub struct RoundHists {
    /// Every bucket value any round has, ascending.
    grid: Vec<i64>,
    /// Per round, the count at each grid value.
    counts: Vec<Vec<u64>>,
    /// Per round, its exact maximum.
    max: Vec<Option<i64>>,
}

impl RoundHists {
    /// From each round's buckets and exact maximum.
    pub fn new(rounds: &[RoundBuckets<'_>]) -> RoundHists {
        let mut grid: Vec<i64> = rounds
            .iter()
            .flat_map(|(b, _)| b.iter().map(|(v, _)| *v))
            .collect();
        grid.sort_unstable();
        grid.dedup();
        let counts = rounds
            .iter()
            .map(|(b, _)| {
                let mut c = vec![0u64; grid.len()];
                for (v, n) in b.iter() {
                    let i = grid.binary_search(v).expect("on the grid");
                    c[i] += n;
                }
                c
            })
            .collect();
        RoundHists {
            grid,
            counts,
            max: rounds.iter().map(|(_, m)| *m).collect(),
        }
    }

    /// The nearest-rank percentiles `ppms` (and the maximum, last) of the
    /// rounds drawn with weights `w`. A percentile the merged sample count
    /// does not support (`super::supports`) is None, as in a report's summary.
    pub fn quantiles(&self, ppms: &[u32], w: &[u32]) -> Vec<Option<f64>> {
        let mut merged = vec![0u64; self.grid.len()];
        let mut max: Option<i64> = None;
        for ((c, m), &k) in self.counts.iter().zip(&self.max).zip(w) {
            if k == 0 {
                continue;
            }
            for (s, x) in merged.iter_mut().zip(c) {
                *s += x * u64::from(k);
            }
            max = max.max(*m);
        }
        let n: u64 = merged.iter().sum();
        let mut out: Vec<Option<f64>> = ppms
            .iter()
            .map(|&p| {
                if n == 0 || !super::supports(n, p) {
                    return None;
                }
                let rank = super::nearest_rank(n, p);
                let mut seen = 0;
                merged.iter().zip(&self.grid).find_map(|(c, v)| {
                    seen += c;
                    (seen >= rank).then_some(*v as f64)
                })
            })
            .collect();
        out.push(max.filter(|_| n > 0).map(|m| m as f64));
        out
    }
}

/// Which way a comparison goes, at this run's noise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Lower,
    Higher,
    /// The interval reaches 1 or into the A/A floor.
    NoDifference,
}

impl Direction {
    pub fn words(self) -> &'static str {
        match self {
            Direction::Lower => "lower",
            Direction::Higher => "higher",
            Direction::NoDifference => "no difference at this machine's noise",
        }
    }
}

/// The band of ratios the A/A control (a configuration against its own twin)
/// cannot tell from 1: its interval, made symmetric in log scale (which twin
/// is the base is arbitrary), and always containing 1.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Floor {
    pub low: f64,
    pub high: f64,
}

impl Floor {
    pub fn of(control: &Interval) -> Floor {
        let inv = |x: f64| if x > 0.0 { 1.0 / x } else { f64::INFINITY };
        Floor {
            low: control.low.min(inv(control.high)).min(1.0),
            high: control.high.max(inv(control.low)).max(1.0),
        }
    }
}

/// The verdict rule: "higher" only when the whole interval lies above 1 and
/// above the floor's band, "lower" only when it lies below both; anything
/// else is no difference at this machine's noise. Without a floor (no
/// control run, or the control's interval undefined) the band is {1}.
pub fn direction(i: &Interval, floor: Option<&Floor>) -> Direction {
    let (lo, hi) = floor.map_or((1.0, 1.0), |f| (f.low.min(1.0), f.high.max(1.0)));
    if i.low > hi {
        Direction::Higher
    } else if i.high < lo {
        Direction::Lower
    } else {
        Direction::NoDifference
    }
}

#[cfg(test)]
mod tests;
