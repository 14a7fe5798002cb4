//! Cost of one admission decision (issue 12, item 3: p99 ≤ 50 µs with 1 000
//! reservations admitted; ARTiS §4 admission per RT CPU). For 2, 8 and 64 RT
//! CPUs, 1 000 reservations are admitted first (half SCHED_DEADLINE, a third
//! of those with D < P, half SCHED_FIFO at random priorities), then each kind
//! of decision is timed one by one into an HDR histogram: accepting (EDF
//! with D = P, EDF with D < P through QPA, RTA for a soft one) and refusing
//! (utilisation cap; RTA on every CPU tried), plus admit = check + record.
//!
//!   cargo bench -p rtmgr-core --bench admission_decision
//!
//! Without `--bench` (cargo test --benches) it runs a few rounds only.
//! Issue 22 holds every row to the same goal. With
//! `ADMISSION_BENCH_SPREAD_PERIODS=1` every admitted period gets 0–999 µs
//! added, so that hardly two share one: the shape where the per-period
//! summaries help least (not one of the goal's rows).

#[path = "support/taskgen.rs"]
mod taskgen;

use hdrhistogram::Histogram;
use rtmgr_core::admission::{Admission, AdmissionConfig, Demand, Kind, Placement, MIN_BUDGET_NS};
use rtmgr_core::cpuset::CpuSet;
use std::hint::black_box;
use std::time::Instant;
use taskgen::{Rng, MS};

const ADMITTED: usize = 1_000;
/// SCHED_DEADLINE periods; SCHED_FIFO ones are longer, so that the hard
/// reservations' interference leaves the soft ones schedulable.
const HARD_PERIODS_MS: [u64; 5] = [5, 10, 20, 40, 50];
const SOFT_PERIODS_MS: [u64; 3] = [500, 1000, 2000];

fn main() {
    let full = std::env::args().any(|a| a == "--bench");
    let spread = std::env::var_os("ADMISSION_BENCH_SPREAD_PERIODS").is_some_and(|v| v == "1");
    let started = Instant::now();
    let rounds = if full { 20_000 } else { 50 };
    println!(
        "one admission decision, {ADMITTED} reservations admitted, {rounds} decisions per row (ns){}",
        if spread { ", periods spread" } else { "" }
    );
    println!(
        "{:>5} {:<10} {:<34} {:>8} {:>8} {:>8} {:>9} {:>9}",
        "cpus", "placement", "decision", "result", "p50", "p99", "p99.9", "max"
    );
    for cpus in [2u32, 8, 64] {
        for placement in [Placement::WorstFit, Placement::FirstFit] {
            let adm = filled(cpus, placement, spread);
            eprintln!("{cpus} CPUs filled at {:?}", started.elapsed());
            for (name, demand) in probes(&adm) {
                time_check(cpus, placement, name, &adm, &demand, rounds);
            }
            time_admit(cpus, placement, &adm, rounds);
        }
    }
}

/// `cpus` RT CPUs holding exactly ADMITTED reservations, about 55 % loaded;
/// with `spread`, each period 0–999 µs longer than the menu's.
fn filled(cpus: u32, placement: Placement, spread: bool) -> Admission {
    let set = CpuSet::parse_list(&format!("0-{}", cpus - 1)).expect("cpu list");
    let cfg = AdmissionConfig {
        cap: 0.9,
        dl_share: 0.95,
        placement,
    };
    let mut adm = Admission::new(cfg, &set);
    let mut rng = Rng::new(u64::from(cpus));
    let mean = 0.55 * f64::from(cpus) / ADMITTED as f64;
    let mut id = 0;
    while adm.len() < ADMITTED {
        assert!(
            id < 4 * ADMITTED as u64,
            "{cpus} CPUs: cannot admit {ADMITTED}"
        );
        let u = mean * (0.5 + rng.unit());
        let d = match id % 6 {
            0 | 1 => taskgen::demand(&mut rng, u, &HARD_PERIODS_MS, 1_000, false, None),
            2 => taskgen::demand(&mut rng, u, &HARD_PERIODS_MS, 1_000, true, None),
            _ => {
                let prio = 1 + rng.below(97) as u8;
                taskgen::demand(&mut rng, u, &SOFT_PERIODS_MS, 1_000, false, Some(prio))
            }
        };
        let d = if spread {
            spread_period(&mut rng, d)
        } else {
            d
        };
        let _ = adm.admit(id, d, 1, None);
        id += 1;
    }
    adm
}

/// The same demand with its period (and an implicit deadline) 0–999 µs longer.
fn spread_period(rng: &mut Rng, d: Demand) -> Demand {
    let more = rng.below(1_000) * 1_000;
    let deadline = if d.deadline_ns == d.period_ns {
        d.deadline_ns + more
    } else {
        d.deadline_ns
    };
    Demand::new(d.period_ns + more, d.budget_ns, Some(deadline), d.kind).expect("demand")
}

/// The decisions timed: (name, demand), each a fixed outcome on `adm`.
fn probes(adm: &Admission) -> Vec<(&'static str, Demand)> {
    let d = |p: u64, w: u64, dl: u64, kind| Demand::new(p, w, Some(dl), kind).expect("demand");
    // A top-priority soft reservation of up to 30 % (what the fullest CPU's
    // cap leaves) delays every soft one below it: RTA re-checks them all,
    // refused where one of them would then miss. The `result` column
    // says what each decision came to on the set drawn.
    let headroom = adm
        .cpus()
        .iter()
        .map(|c| adm.cfg.cap - c.utilisation())
        .fold(f64::INFINITY, f64::min);
    let big = (((headroom * 0.9).min(0.3) * 100.0 * MS as f64) as u64).max(MIN_BUDGET_NS);
    vec![
        (
            "hard 0.2 %, D=P (EDF U test)",
            d(10 * MS, 20_000, 10 * MS, Kind::Hard),
        ),
        (
            "hard 0.2 %, D=P/2 (EDF QPA)",
            d(10 * MS, 20_000, 5 * MS, Kind::Hard),
        ),
        (
            "soft prio 50, 0.001 % (RTA)",
            d(100 * MS, 20_000, 100 * MS, Kind::Soft { priority: 50 }),
        ),
        ("hard 50 % (cap)", d(10 * MS, 5 * MS, 10 * MS, Kind::Hard)),
        (
            "soft prio 98, up to 30 % (RTA)",
            d(100 * MS, big, 100 * MS, Kind::Soft { priority: 98 }),
        ),
    ]
}

fn time_check(cpus: u32, pl: Placement, name: &str, adm: &Admission, d: &Demand, rounds: usize) {
    let mut h = histogram();
    let mut accepted = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        let r = black_box(adm.check(black_box(d), 1, None));
        let ns = t.elapsed().as_nanos() as u64;
        accepted += usize::from(r.is_ok());
        h.record(ns.max(1)).expect("in range");
    }
    let result = match accepted {
        0 => "refused",
        n if n == rounds => "accepted",
        _ => "mixed",
    };
    row(cpus, pl, name, result, &h);
}

/// admit (check + record) then remove, untimed, to keep 1 000 admitted.
fn time_admit(cpus: u32, pl: Placement, adm: &Admission, rounds: usize) {
    let mut adm = adm.clone();
    let mut rng = Rng::new(7);
    let mut h = histogram();
    let mut accepted = 0;
    for i in 0..rounds {
        let d = match i % 3 {
            0 => taskgen::demand(&mut rng, 0.002, &HARD_PERIODS_MS, 1_000, false, None),
            1 => taskgen::demand(&mut rng, 0.002, &HARD_PERIODS_MS, 1_000, true, None),
            _ => taskgen::demand(&mut rng, 0.002, &SOFT_PERIODS_MS, 1_000, false, Some(40)),
        };
        let id = u64::MAX - 1;
        let t = Instant::now();
        let r = black_box(adm.admit(id, d, 1, None));
        let ns = t.elapsed().as_nanos() as u64;
        h.record(ns.max(1)).expect("in range");
        if r.is_ok() {
            accepted += 1;
            adm.remove(id);
        }
    }
    let result = format!("{}/{rounds}", accepted);
    row(cpus, pl, "admit = check + record (mix)", &result, &h);
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds")
}

fn row(cpus: u32, pl: Placement, name: &str, result: &str, h: &Histogram<u64>) {
    let pl = match pl {
        Placement::WorstFit => "worst-fit",
        Placement::FirstFit => "first-fit",
    };
    println!(
        "{cpus:>5} {pl:<10} {name:<34} {result:>8} {:>8} {:>8} {:>9} {:>9}",
        h.value_at_quantile(0.5),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max()
    );
}
