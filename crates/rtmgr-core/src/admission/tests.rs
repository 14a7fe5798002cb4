//! Admission: the refusals name their numbers, and (property tests) what is
//! admitted never misses a deadline in an exact schedule, and a refusal
//! changes nothing.

use super::sim::first_miss;
use super::*;
use proptest::prelude::*;

const MS: u64 = 1_000_000;

fn hard(p: u64, w: u64) -> Demand {
    Demand::new(p * MS, w * MS, None, Kind::Hard).unwrap()
}

fn soft(p: u64, w: u64, d: u64, priority: u8) -> Demand {
    Demand::new(p * MS, w * MS, Some(d * MS), Kind::Soft { priority }).unwrap()
}

fn cpus(list: &str) -> CpuSet {
    CpuSet::parse_list(list).unwrap()
}

#[test]
fn demands_are_validated() {
    assert!(Demand::new(0, 1, None, Kind::Hard).is_err());
    assert!(Demand::new(4 * MS, 5 * MS, None, Kind::Hard).is_err());
    assert!(Demand::new(4 * MS, MS, Some(5 * MS), Kind::Hard).is_err());
    assert!(Demand::new(4 * MS, MS, None, Kind::Soft { priority: 99 }).is_err());
    assert!(
        Demand::new(4 * MS, 1000, None, Kind::Hard).is_err(),
        "10 µs minimum"
    );
}

#[test]
fn refusal_names_the_numbers_of_each_cpu() {
    let cfg = AdmissionConfig {
        cap: 0.9,
        dl_share: 0.95,
        placement: Placement::FirstFit,
    };
    let mut a = Admission::new(cfg, &cpus("2-3"));
    a.admit(1, hard(20, 17), 1, Some(3)).unwrap();
    // τ2 on CPU 2: 10 ms deadline, priority 10.
    a.admit(2, soft(20, 6, 10, 10), 1, Some(2)).unwrap();
    a.admit(3, hard(10, 2), 1, Some(2)).unwrap();
    let r = a.check(&soft(10, 1, 10, 50), 1, None).unwrap_err();
    let text = r.to_string();
    assert!(
        text.contains("CPU 2: response time of τ2 11 ms > deadline 10 ms"),
        "{text}"
    );
    assert!(text.contains("CPU 3: U would be 0.95 > cap 0.90"), "{text}");
    let r = a.check(&hard(10, 2), 1, Some(3)).unwrap_err();
    assert_eq!(r.to_string(), "CPU 3: U would be 1.05 > cap 0.90");
    assert!(a
        .check(&hard(1, 1), 1, Some(7))
        .is_err_and(|r| r.to_string() == "CPU 7: not an RT CPU"));
}

#[test]
fn edf_with_short_deadlines_uses_the_demand_test() {
    let cfg = AdmissionConfig {
        cap: 1.0,
        dl_share: 1.0,
        placement: Placement::FirstFit,
    };
    let mut a = Admission::new(cfg, &cpus("1"));
    // U = 0.5 + 0.4, but both due within 5 ms of a common release: 9 ms of work.
    a.admit(
        1,
        Demand::new(10 * MS, 5 * MS, Some(5 * MS), Kind::Hard).unwrap(),
        1,
        None,
    )
    .unwrap();
    let r = a
        .check(
            &Demand::new(10 * MS, 4 * MS, Some(5 * MS), Kind::Hard).unwrap(),
            1,
            None,
        )
        .unwrap_err();
    assert!(r.to_string().contains("EDF demand 9 ms within 5 ms"), "{r}");
}

#[test]
fn worst_fit_spreads_first_fit_packs() {
    for (placement, expect) in [(Placement::FirstFit, [1, 1]), (Placement::WorstFit, [1, 2])] {
        let cfg = AdmissionConfig {
            placement,
            ..AdmissionConfig::default()
        };
        let mut a = Admission::new(cfg, &cpus("1-2"));
        let got: Vec<u32> = (0..2)
            .map(|i| a.admit(i, hard(10, 2), 1, None).unwrap().cpu)
            .collect();
        assert_eq!(got, expect, "{placement:?}");
    }
}

#[test]
fn offline_cpus_take_nothing_and_removal_frees() {
    let mut a = Admission::new(AdmissionConfig::default(), &cpus("1"));
    a.set_online(1, false);
    assert_eq!(
        a.check(&hard(10, 1), 1, None).unwrap_err().to_string(),
        "CPU 1: offline"
    );
    a.set_online(1, true);
    a.admit(5, hard(10, 8), 1, None).unwrap();
    assert!(a.check(&hard(10, 2), 1, None).is_err());
    assert!(a.remove(5) && !a.remove(5));
    assert!(a.check(&hard(10, 2), 1, None).is_ok());
}

#[test]
fn set_admission_places_big_tasks_first() {
    let tasks: Vec<SetTask> = [(4, 1), (10, 6), (10, 6), (10, 2)]
        .iter()
        .enumerate()
        .map(|(i, &(p, w))| SetTask {
            name: format!("t{i}"),
            demand: hard(p, w),
            count: 1,
            cpu: None,
        })
        .collect();
    let cfg = AdmissionConfig {
        placement: Placement::FirstFit,
        ..AdmissionConfig::default()
    };
    let (v, _) = admit_set(cfg, &cpus("0-1"), &tasks);
    assert!(v.all_admitted(), "{v:?}");
    assert_eq!(v.placed[0].0, "t1", "decreasing utilisation");
}

/// Periods in 10 µs steps whose hyperperiod stays at 120 steps.
const UNIT: u64 = 10_000;
const PERIODS: [u64; 8] = [4, 5, 6, 8, 10, 12, 15, 20];

fn demand() -> impl Strategy<Value = (Demand, u32)> {
    (
        0..PERIODS.len(),
        1u64..=100,
        50u64..=100,
        any::<bool>(),
        1u8..=4,
        1u32..=2,
    )
        .prop_map(|(pi, wpct, dpct, is_hard, prio, count)| {
            let p = PERIODS[pi];
            let d = (p * dpct / 100).max(1);
            let w = (d * wpct / 100).max(1);
            let kind = if is_hard {
                Kind::Hard
            } else {
                Kind::Soft {
                    priority: prio * 10,
                }
            };
            (
                Demand::new(p * UNIT, w * UNIT, Some(d * UNIT), kind).unwrap(),
                count,
            )
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    /// Whatever admission accepts on a CPU runs without a deadline miss in
    /// an exact schedule, and a refused request leaves the state unchanged.
    #[test]
    fn admitted_sets_never_miss_and_refusals_change_nothing(
        reqs in proptest::collection::vec(demand(), 1..8),
        cap in 0.5f64..=1.0,
        worst in any::<bool>(),
    ) {
        let cfg = AdmissionConfig {
            cap,
            dl_share: 1.0,
            placement: if worst { Placement::WorstFit } else { Placement::FirstFit },
        };
        let mut a = Admission::new(cfg, &cpus("0-1"));
        for (i, (d, n)) in reqs.iter().enumerate() {
            let before = a.clone();
            if a.admit(i as Id, *d, *n, None).is_err() {
                prop_assert_eq!(&a, &before);
            }
        }
        for load in a.cpus() {
            let mut tasks = Vec::new();
            for e in load.hard.iter().chain(load.soft.iter()) {
                tasks.extend(std::iter::repeat_n(e.demand, e.count as usize));
            }
            prop_assert_eq!(first_miss(&tasks, UNIT), None, "CPU {} {:?}", load.cpu, load);
        }
    }
}

#[test]
fn the_simulator_sees_a_miss_when_there_is_one() {
    // Two soft tasks, U = 1.2: the lower one misses.
    let t = [soft(4, 2, 4, 20), soft(5, 3, 5, 10)];
    let scaled: Vec<Demand> = t.to_vec();
    assert!(first_miss(&scaled, MS).is_some());
    // EDF at U = 1 with D = P: no miss.
    assert_eq!(first_miss(&[hard(4, 2), hard(6, 3)], MS), None);
}

#[test]
fn an_empty_cpu_has_utilisation_plus_zero() {
    // `rtmgr admit` printed "U -0.000" for an empty CPU (f64's Sum starts at -0.0).
    let a = Admission::new(AdmissionConfig::default(), &cpus("1-2"));
    let (v, _) = admit_set(AdmissionConfig::default(), &cpus("1-2"), &[]);
    for c in a.cpus() {
        assert!(c.utilisation().is_sign_positive() && c.utilisation() == 0.0);
        assert!(c.hard_utilisation().is_sign_positive());
    }
    for (cpu, u, dl) in v.cpus {
        assert_eq!(format!("{u:.3} {dl:.3}"), "0.000 0.000", "CPU {cpu}");
    }
}
