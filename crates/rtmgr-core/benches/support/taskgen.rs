//! Random reservations for the admission benchmark and the placement
//! example (ARTiS §4: periodicity and capacity per RT task): a seeded
//! xorshift generator (runs repeat exactly), UUniFast utilisations (Bini &
//! Buttazzo 2005) and periods from a harmonic-ish menu, so that an exact
//! schedule over the hyperperiod stays short.

use rtmgr_core::admission::{Demand, Kind, MIN_BUDGET_NS};

pub const MS: u64 = 1_000_000;

/// xorshift64*: small, fast, good enough to draw task sets.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }
}

/// `n` utilisations summing to `total` (UUniFast).
#[allow(dead_code)] // the placement example uses it, the benchmark does not
pub fn uunifast(rng: &mut Rng, n: usize, total: f64) -> Vec<f64> {
    let mut left = total;
    let mut out = Vec::with_capacity(n);
    for i in 1..n {
        let next = left * rng.unit().powf(1.0 / (n - i) as f64);
        out.push(left - next);
        left = next;
    }
    out.push(left);
    out
}

/// A demand of about utilisation `u` with a period from `periods_ms`, its
/// budget rounded to `unit_ns` (at least the 10 µs minimum), deadline D = P
/// or, with `constrained`, a random D in [W, P]; hard, or soft at `priority`.
pub fn demand(
    rng: &mut Rng,
    u: f64,
    periods_ms: &[u64],
    unit_ns: u64,
    constrained: bool,
    priority: Option<u8>,
) -> Demand {
    let p = rng.pick(periods_ms) * MS;
    let min = MIN_BUDGET_NS.div_ceil(unit_ns) * unit_ns;
    let w = ((u * p as f64 / unit_ns as f64).round() as u64 * unit_ns).clamp(min, p);
    let d = if constrained {
        let steps = (p - w) / unit_ns;
        w + rng.below(steps + 1) * unit_ns
    } else {
        p
    };
    let kind = match priority {
        None => Kind::Hard,
        Some(priority) => Kind::Soft { priority },
    };
    Demand::new(p, w, Some(d), kind).expect("generated demands are valid")
}
