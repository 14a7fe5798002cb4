use super::*;

/// Paired per-round figures of two configurations: the interval of the ratio of their means.
fn mean_ratio(a: &[f64], b: &[f64]) -> Result<Interval, NoInterval> {
    let r = Resampling::standard(a.len())?;
    let opt = |v: &[f64]| v.iter().map(|x| Some(*x)).collect::<Vec<_>>();
    let (oa, ob) = (opt(a), opt(b));
    ratio_interval(
        &r.replicate(|w| weighted_mean(&oa, w)),
        &r.replicate(|w| weighted_mean(&ob, w)),
    )
}

/// A deterministic spread of per-round figures around 100 (±30 %).
fn noisy(rounds: usize, salt: u64) -> Vec<f64> {
    let mut s = salt;
    (0..rounds)
        .map(|_| 70.0 + (next(&mut s) % 600) as f64 / 10.0)
        .collect()
}

#[test]
fn identical_samples_give_an_interval_containing_one() {
    let a = noisy(10, 1);
    let i = mean_ratio(&a, &a).unwrap();
    assert_eq!(i.estimate, 1.0);
    assert!(i.contains(1.0), "{i:?}");
    assert_eq!(direction(&i, None), Direction::NoDifference);
}

#[test]
fn two_draws_of_the_same_noise_are_no_difference() {
    let i = mean_ratio(&noisy(10, 1), &noisy(10, 2)).unwrap();
    assert!(i.contains(1.0), "{i:?}");
    assert!(i.low < i.estimate && i.estimate < i.high, "{i:?}");
}

#[test]
fn a_clear_doubling_excludes_one() {
    let b = noisy(8, 3);
    let a: Vec<f64> = b
        .iter()
        .zip(noisy(8, 4))
        .map(|(x, y)| 2.0 * x * y / 100.0)
        .collect();
    let i = mean_ratio(&a, &b).unwrap();
    assert!(i.low > 1.0, "{i:?}");
    assert_eq!(direction(&i, None), Direction::Higher);
    let back = mean_ratio(&b, &a).unwrap();
    assert!(back.high < 1.0, "{back:?}");
    assert_eq!(direction(&back, None), Direction::Lower);
}

#[test]
fn degenerate_inputs_say_why_and_do_not_panic() {
    assert_eq!(
        mean_ratio(&[1.0], &[2.0]),
        Err(NoInterval::NotEnoughRounds { rounds: 1 })
    );
    assert_eq!(
        mean_ratio(&[], &[]),
        Err(NoInterval::NotEnoughRounds { rounds: 0 })
    );
    let zeros = [0.0; 6];
    assert_eq!(mean_ratio(&zeros, &zeros), Err(NoInterval::Undefined));
    assert_eq!(mean_ratio(&noisy(6, 5), &zeros), Err(NoInterval::Undefined));
    // A zero numerator is a ratio of 0, not an error.
    let i = mean_ratio(&zeros, &noisy(6, 5)).unwrap();
    assert_eq!((i.low, i.estimate, i.high), (0.0, 0.0, 0.0));
    // Missed periods in only one round of six: a third of the resamples
    // leave that round out, and the ratio with them.
    let a = [3.0; 6];
    let b = [0.0, 0.0, 0.0, 0.0, 0.0, 5.0];
    let r = Resampling::standard(6).unwrap();
    assert_eq!(
        ratio_interval(
            &r.replicate(|w| Some(weighted_sum(&a, w))),
            &r.replicate(|w| Some(weighted_sum(&b, w)))
        ),
        Err(NoInterval::Undefined)
    );
}

#[test]
fn resampling_is_reproducible_and_draws_every_round_count() {
    let a = Resampling::standard(7).unwrap();
    let b = Resampling::standard(7).unwrap();
    assert!(a.draws().eq(b.draws()));
    assert!(a.draws().all(|w| w.iter().sum::<u32>() == 7));
    assert_eq!(a.draws().count(), RESAMPLES);
    let c = Resampling::new(7, RESAMPLES, SEED + 1).unwrap();
    assert!(!a.draws().eq(c.draws()));
}

#[test]
fn merged_histogram_percentiles_match_the_pooled_samples() {
    // Round 0: 990 samples at 10, 10 at 1000; round 1: 1000 at 20.
    let r0 = [(10, 990), (1000, 10)];
    let r1 = [(20, 1000)];
    let h = RoundHists::new(&[(&r0, Some(1000)), (&r1, Some(20))]);
    // Pooled 2000: 990 at 10, then 1000 at 20: p50 (rank 1000) and p99 (rank 1980) are 20.
    assert_eq!(
        h.quantiles(&[500_000, 990_000], &[1, 1]),
        vec![Some(20.0), Some(20.0), Some(1000.0)]
    );
    // Round 0 twice: p99 at rank 1980 of 2000 → 10; the 20 samples at 1000 beyond it.
    assert_eq!(
        h.quantiles(&[990_000], &[2, 0]),
        vec![Some(10.0), Some(1000.0)]
    );
    // p99.9 needs 10 000 samples: not supported here.
    assert_eq!(h.quantiles(&[999_000], &[1, 1])[0], None);
    // Nothing drawn: nothing to say.
    assert_eq!(h.quantiles(&[990_000], &[0, 0]), vec![None, None]);
}

#[test]
fn the_floor_is_symmetric_and_holds_back_small_shifts() {
    let control = Interval {
        estimate: 1.1,
        low: 0.8,
        high: 1.5,
    };
    let f = Floor::of(&control);
    assert!((f.low - 1.0 / 1.5).abs() < 1e-12, "{f:?}");
    assert_eq!(f.high, 1.5);
    let small = Interval {
        estimate: 1.4,
        low: 1.2,
        high: 1.6,
    };
    assert_eq!(direction(&small, None), Direction::Higher);
    assert_eq!(direction(&small, Some(&f)), Direction::NoDifference);
    let big = Interval {
        estimate: 3.0,
        low: 2.0,
        high: 4.0,
    };
    assert_eq!(direction(&big, Some(&f)), Direction::Higher);
    let down = Interval {
        estimate: 0.3,
        low: 0.2,
        high: 0.5,
    };
    assert_eq!(direction(&down, Some(&f)), Direction::Lower);
    let down_small = Interval {
        estimate: 0.75,
        low: 0.7,
        high: 0.8,
    };
    assert_eq!(direction(&down_small, Some(&f)), Direction::NoDifference);
    // A control interval that excludes 1 still leaves 1 in the band.
    let odd = Floor::of(&Interval {
        estimate: 1.3,
        low: 1.2,
        high: 1.4,
    });
    assert!(odd.low < 1.0 && odd.high >= 1.4);
}
