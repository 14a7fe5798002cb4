//! The verdict rule on synthetic per-round figures: identical twins say no
//! difference, a consistent 3× shift says higher, a shift inside the A/A
//! floor is not claimed.

use super::*;
use crate::report::{CpuResult, Disturbance};

/// Round `r`'s noise factor for a configuration: a deterministic spread in
/// 0.75–1.25 (`salt` tells configurations apart).
fn noise(r: u32, salt: u32) -> f64 {
    let x = (r
        .wrapping_mul(2_654_435_761)
        .wrapping_add(salt.wrapping_mul(40_503)))
        % 1000;
    0.75 + x as f64 / 2000.0
}

/// One round: 4 000 samples around `lat` ns, 60 of them in a tail (so the
/// p99 and p99.9 sit in the body and the tail), and `ops` ops/s; with a
/// `stall`, 20 more at 50× (a host stall's releases).
fn round(r: u32, lat: f64, ops: f64, stall: bool) -> RoundFigures {
    let mut h = Hist::new();
    h.record_n(lat as i64, 3_940);
    h.record_n((lat * 1.5) as i64, 50);
    h.record_n((lat * 20.0) as i64, 10);
    if stall {
        h.record_n((lat * 50.0) as i64, 20);
    }
    let m = vec![ComponentMetrics {
        component: "cpu".into(),
        ops: 1,
        ops_per_s: ops,
        op: "bogo-op".into(),
    }];
    RoundFigures::of(r, &h, 0, Some((&h, 0)), m)
}

/// A configuration of `rounds` rounds: latency `lat(r)` and throughput `ops(r)` per round.
fn config(
    name: &str,
    rounds: u32,
    lat: impl Fn(u32) -> f64,
    ops: impl Fn(u32) -> f64,
) -> ConfigResult {
    stalled(name, rounds, lat, ops, &[])
}

/// The same, with a host stall in the rounds `stalls`.
fn stalled(
    name: &str,
    rounds: u32,
    lat: impl Fn(u32) -> f64,
    ops: impl Fn(u32) -> f64,
    stalls: &[u32],
) -> ConfigResult {
    let rs: Vec<RoundFigures> = (1..=rounds)
        .map(|r| round(r, lat(r), ops(r), stalls.contains(&r)))
        .collect();
    let mut all = Hist::new();
    for x in &rs {
        all.merge(&Hist::from_data(&x.hist).unwrap());
    }
    ConfigResult {
        name: name.into(),
        description: String::new(),
        result: CpuResult {
            cpu: 1,
            summary: all.summary(0),
            hist: all.to_data(),
            guest_summary: Some(all.summary(0)),
            host_stalled_samples: 0,
            host_stalled_ns: 0,
        },
        throughput: rs[0].throughput.clone(),
        segments: rounds,
        disturbance: Disturbance::default(),
        tail_causes: None,
        balancer: None,
        rounds: rs,
    }
}

/// A run in which the shield's latency and throughput vary by round, stock
/// is 4× the shield's latency, and `balanced` and the twin are given.
fn run(rounds: u32, balanced: ConfigResult, twin: Option<ConfigResult>) -> EvaluateRun {
    let sh = |r| 10_000.0 * noise(r, 1);
    let mut configs = vec![
        config("idle", rounds, |r| 5_000.0 * noise(r, 2), |_| 0.0),
        config("stock", rounds, |r| 4.0 * sh(r), |r| 100.0 * noise(r, 3)),
        config("shield", rounds, sh, |r| 50.0 * noise(r, 4)),
        config("idle-guests", rounds, sh, |r| 50.0 * noise(r, 4)),
        balanced,
    ];
    configs.extend(twin);
    let mut e = EvaluateRun {
        rt_cpus: "1".parse().unwrap(),
        nrt_cpus: "0".parse().unwrap(),
        load: "all".into(),
        load_engine: crate::load::LoadEngine::Builtin,
        interval_ns: 250_000,
        rounds_planned: rounds,
        rounds_done: rounds,
        segment_ns: 1_000_000_000,
        latency_bound_us: 300,
        configs,
        verdicts: vec![],
        rt_choice: None,
        skipped: vec![],
        host_preemption: None,
        intervals: None,
    };
    e.intervals = evaluate_intervals(&e);
    e.verdicts = crate::report::evaluate_verdicts(&e);
    e
}

fn shield_like(name: &str, rounds: u32, factor: f64) -> ConfigResult {
    config(
        name,
        rounds,
        |r| factor * 10_000.0 * noise(r, 1),
        |r| 50.0 * noise(r, 4),
    )
}

fn metric<'a>(e: &'a EvaluateRun, config: &str, base: &str, m: Metric) -> &'a MetricInterval {
    let iv = e.intervals.as_ref().expect("intervals");
    iv.control
        .iter()
        .chain(&iv.comparisons)
        .find(|c| c.config == config && c.base == base)
        .and_then(|c| c.get(m))
        .unwrap_or_else(|| panic!("{config} vs {base} {m:?}"))
}

#[test]
fn identical_twins_and_an_unchanged_balancer_say_no_difference() {
    let e = run(
        8,
        shield_like("balanced", 8, 1.0),
        Some(shield_like(CONTROL, 8, 1.0)),
    );
    for m in [Metric::P99, Metric::P999, Metric::Max, Metric::Throughput] {
        let c = metric(&e, CONTROL, "shield", m);
        let i = c.interval.unwrap();
        assert_eq!(i.estimate, 1.0, "{m:?}");
        assert!(i.contains(1.0), "{m:?} {i:?}");
        let b = metric(&e, "balanced", "shield", m);
        assert_eq!(b.direction, Some(Direction::NoDifference), "{m:?}");
    }
    // Zero missed periods in both: no ratio, and the reason given.
    let missed = metric(&e, "balanced", "shield", Metric::Missed);
    assert!(missed.interval.is_none() && missed.none.is_some());
    assert!(
        e.verdicts[0].starts_with("A/A control (shield-twin vs shield"),
        "{:?}",
        e.verdicts
    );
    let line = e
        .verdicts
        .iter()
        .find(|l| l.starts_with("balanced vs shield:"))
        .unwrap();
    assert!(
        line.contains("p99.9 1.00x [1.00, 1.00] — no difference at this machine's noise"),
        "{line}"
    );
}

#[test]
fn a_consistent_threefold_shift_is_higher_with_an_interval_excluding_one() {
    let twin = config(
        CONTROL,
        8,
        |r| 10_000.0 * noise(r, 7),
        |r| 50.0 * noise(r, 8),
    );
    let e = run(8, shield_like("balanced", 8, 3.0), Some(twin));
    for m in [Metric::P99, Metric::P999, Metric::Max, Metric::GuestP99] {
        let b = metric(&e, "balanced", "shield", m);
        let i = b.interval.unwrap();
        assert!(i.low > 1.0 && (i.estimate - 3.0).abs() < 0.1, "{m:?} {i:?}");
        assert_eq!(b.direction, Some(Direction::Higher), "{m:?}");
    }
    // Stock's 4× latency: the shield is lower.
    let s = metric(&e, "shield", "stock", Metric::P99);
    assert_eq!(s.direction, Some(Direction::Lower));
    let line = e
        .verdicts
        .iter()
        .find(|l| l.starts_with("balanced vs shield:"))
        .unwrap();
    assert!(
        line.contains("p99 3.0") && line.contains("— higher"),
        "{line}"
    );
}

#[test]
fn a_shift_inside_the_a_a_floor_is_not_claimed() {
    // Host stalls hit the shield in rounds 2 and 5, its twin in rounds 3 and
    // 7: the twins' p99.9 swings with which rounds a resample draws.
    // Balanced is the shield 1.15× slower, stalls and all: a steady ratio.
    let lat = |r| 10_000.0 * noise(r, 1);
    let ops = |r| 50.0 * noise(r, 4);
    let make = |name: &str, f: f64, stalls: &[u32]| stalled(name, 8, |r| f * lat(r), ops, stalls);
    let mut with = run(
        8,
        make("balanced", 1.15, &[2, 5]),
        Some(make(CONTROL, 1.0, &[3, 7])),
    );
    // The shield of `run` has no stalls: give it its own.
    with.configs[2] = make("shield", 1.0, &[2, 5]);
    with.intervals = evaluate_intervals(&with);
    let control = metric(&with, CONTROL, "shield", Metric::P999)
        .interval
        .unwrap();
    assert!(Floor::of(&control).high > 1.15, "{control:?}");
    let b = metric(&with, "balanced", "shield", Metric::P999);
    assert!(b.interval.unwrap().low > 1.0, "{b:?}");
    assert_eq!(b.direction, Some(Direction::NoDifference));
    // Without the control the same data are called higher, and the run says it had no floor.
    let mut without = with.clone();
    without.configs.retain(|c| c.name != CONTROL);
    without.intervals = evaluate_intervals(&without);
    without.verdicts = crate::report::evaluate_verdicts(&without);
    let b = metric(&without, "balanced", "shield", Metric::P999);
    assert_eq!(b.direction, Some(Direction::Higher));
    assert!(
        without.verdicts[0].starts_with("no A/A control"),
        "{:?}",
        without.verdicts
    );
}

#[test]
fn too_few_rounds_give_no_interval_and_say_so() {
    let e = run(
        2,
        shield_like("balanced", 2, 3.0),
        Some(shield_like(CONTROL, 2, 1.0)),
    );
    let b = metric(&e, "balanced", "shield", Metric::P99);
    assert!(b.interval.is_none());
    assert!(
        b.none
            .as_deref()
            .unwrap()
            .starts_with("not enough rounds (2"),
        "{b:?}"
    );
    let line = e
        .verdicts
        .iter()
        .find(|l| l.starts_with("balanced vs shield:"))
        .unwrap();
    assert!(line.contains("not enough rounds"), "{line}");
    assert!(
        !e.verdicts
            .iter()
            .any(|l| l.contains("higher") || l.contains("lower")),
        "{:?}",
        e.verdicts
    );
}

#[test]
fn intervals_survive_json_and_show_in_the_table_and_html() {
    let e = run(
        5,
        shield_like("balanced", 5, 3.0),
        Some(shield_like(CONTROL, 5, 1.0)),
    );
    let json = serde_json::to_string(&e).unwrap();
    let back: EvaluateRun = serde_json::from_str(&json).unwrap();
    assert_eq!(back, e);
    // The intervals are a function of the per-round figures: recomputed, the same.
    assert_eq!(evaluate_intervals(&back), e.intervals);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["configs"][2]["rounds"].as_array().unwrap().len(), 5);
    assert!(v["configs"][2]["rounds"][0]["p99_9_ns"].is_i64());
    assert_eq!(
        v["intervals"]["comparisons"][3]["metrics"][0]["metric"],
        "p99"
    );
    let t = intervals_table(e.intervals.as_ref().unwrap());
    assert!(
        t.contains("balanced/shield") && t.contains("shield-twin/shield"),
        "{t}"
    );
    assert!(t.contains("higher"), "{t}");
    let mut rep = crate::report::tests::sample_latency_report();
    rep.body = crate::report::Body::Evaluate(e.clone());
    let html = crate::report::evaluate_html(&rep, &e, "<svg/>", "<svg/>");
    assert!(
        html.contains("balanced/shield") && html.contains("A/A control"),
        "{html}"
    );
}

#[test]
fn round_histograms_are_written_compactly_and_read_back() {
    let mut all = Hist::new();
    all.record_n(12_000, 990);
    all.record_n(3_000_000, 10);
    let mut guest = Hist::new();
    guest.record_n(12_000, 990);
    // The guest's own round: the host's stall left out.
    let r = RoundFigures::of(3, &all, 5, Some((&guest, 0)), vec![]);
    assert!(r.guest_hist.is_some() && r.guest_max_ns == Some(12_000));
    let v = serde_json::to_value(&r).unwrap();
    let b = all.to_data().buckets;
    let expect = format!("{}:990 {}:10", b[0].0, b[1].0);
    assert_eq!(v["hist"]["buckets"], expect.as_str());
    assert_eq!(serde_json::from_value::<RoundFigures>(v).unwrap(), r);
    // A round the host did not touch keeps its histogram once.
    let same = RoundFigures::of(4, &all, 5, Some((&all, 5)), vec![]);
    assert!(same.guest_hist.is_none() && same.guest_max_ns.is_some());
    let bad = serde_json::json!({"sigfig": 3, "n": 1, "min_ns": 1, "max_ns": 1, "sum_ns": 1, "buckets": "1-1"});
    let mut v = serde_json::to_value(&same).unwrap();
    v["hist"] = bad;
    assert!(serde_json::from_value::<RoundFigures>(v).is_err());
}
