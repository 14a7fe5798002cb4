//! The fast admission path (per-CPU summaries, sufficient tests first,
//! re-analysis of what a new reservation disturbs) gives the verdicts of the
//! exact tests computed from scratch (`reference`), on random reservation
//! sets with admissions, re-adoptions and removals; and the cached sums stay
//! equal to sums rebuilt from the lists.

use super::*;
use proptest::prelude::*;

const US: u64 = 1_000;
/// Harmonic and not: 2.5 ms to 120 ms.
const PERIODS_US: [u64; 9] = [
    2_500, 5_000, 7_000, 10_000, 12_000, 20_000, 40_000, 50_000, 120_000,
];

#[derive(Debug, Clone)]
enum Op {
    Admit {
        demand: Demand,
        count: u32,
        cpu: Option<u32>,
    },
    Force {
        demand: Demand,
        cpu: u32,
    },
    Remove(usize),
}

fn demand() -> impl Strategy<Value = Demand> {
    (
        0..PERIODS_US.len(),
        1u64..=300,
        30u64..=100,
        any::<bool>(),
        0usize..4,
    )
        .prop_map(|(pi, w_permille, d_pct, is_hard, prio)| {
            let p = PERIODS_US[pi] * US;
            let d = (p * d_pct / 100).max(MIN_BUDGET_NS);
            let w = (p * w_permille / 1000).clamp(MIN_BUDGET_NS, d);
            let kind = if is_hard {
                Kind::Hard
            } else {
                Kind::Soft {
                    priority: [1, 20, 50, 98][prio],
                }
            };
            Demand::new(p, w, Some(d), kind).unwrap()
        })
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (demand(), 1u32..=3, prop::option::weighted(0.2, 0u32..4)).prop_map(|(demand, count, cpu)| Op::Admit { demand, count, cpu }),
        1 => (demand(), 0u32..3).prop_map(|(demand, cpu)| Op::Force { demand, cpu }),
        2 => (0usize..64).prop_map(Op::Remove),
    ]
}

/// Same CPU refused with the same check (and the same task for RTA).
fn same_refusal(fast: &CpuRefusal, slow: &CpuRefusal) -> bool {
    use CpuRefusal::*;
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    match (fast, slow) {
        (
            Utilisation {
                cpu: a, would: x, ..
            },
            Utilisation {
                cpu: b, would: y, ..
            },
        )
        | (
            DeadlineShare {
                cpu: a, would: x, ..
            },
            DeadlineShare {
                cpu: b, would: y, ..
            },
        ) => a == b && close(*x, *y),
        (
            ResponseTime {
                cpu: a, task: x, ..
            },
            ResponseTime {
                cpu: b, task: y, ..
            },
        ) => a == b && x == y,
        _ => fast == slow,
    }
}

/// The summaries of every CPU equal those rebuilt from its lists, and every
/// cached response time is at most the exact one.
fn consistent(a: &Admission) -> Result<(), TestCaseError> {
    for load in a.cpus() {
        let mut rebuilt = CpuLoad::new(load.cpu);
        for e in load.hard.iter().chain(&load.soft) {
            rebuilt.insert(e.clone());
        }
        prop_assert_eq!(&load.summary, &rebuilt.summary, "CPU {}", load.cpu);
        for (i, e) in load.soft.iter().enumerate() {
            let d = e.demand.deadline_ns;
            prop_assert_eq!(e.deadline_demand, load.demand_at(e, true, None, d));
            if let Ok(r) = reference::response(load, e, Some(i), None) {
                prop_assert!(
                    e.response_ns <= r,
                    "τ{} cached {} > {}",
                    e.id,
                    e.response_ns,
                    r
                );
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn fast_decisions_equal_the_exact_ones(
        ops in proptest::collection::vec(op(), 1..60),
        cap in 0.6f64..=1.0,
        dl_share in 0.8f64..=1.0,
        worst in any::<bool>(),
    ) {
        let cfg = AdmissionConfig {
            cap,
            dl_share,
            placement: if worst { Placement::WorstFit } else { Placement::FirstFit },
        };
        let mut a = Admission::new(cfg, &CpuSet::parse_list("0-2").unwrap());
        let mut ids: Vec<Id> = Vec::new();
        for (next, op) in ops.into_iter().enumerate() {
            let id = next as Id;
            match op {
                Op::Admit { demand, count, cpu } => {
                    let slow = reference::check(&a, &demand, count, cpu);
                    match (a.admit(id, demand, count, cpu), slow) {
                        (Ok(p), Ok((cpu, r))) => {
                            prop_assert_eq!((p.cpu, p.response_ns), (cpu, r));
                            ids.push(id);
                        }
                        (Err(fast), Err(slow)) => {
                            prop_assert_eq!(fast.cpus.len(), slow.len(), "{:?} vs {:?}", fast, slow);
                            for (f, s) in fast.cpus.iter().zip(&slow) {
                                prop_assert!(same_refusal(f, s), "{:?} vs {:?}", f, s);
                            }
                        }
                        (fast, slow) => prop_assert!(false, "fast {:?}, exact {:?}", fast, slow),
                    }
                }
                Op::Force { demand, cpu } => {
                    prop_assert!(a.force(id, demand, 1, cpu));
                    ids.push(id);
                }
                Op::Remove(i) if !ids.is_empty() => {
                    let id = ids.remove(i % ids.len());
                    prop_assert!(a.remove(id));
                }
                Op::Remove(_) => {}
            }
            consistent(&a)?;
        }
    }
}
