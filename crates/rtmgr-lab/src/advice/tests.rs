//! Fig. 9's flow, branch by branch.

use super::*;

const GIB: u64 = 1 << 30;

fn bare_metal() -> Facts {
    Facts {
        hypervisor: None,
        steal_share: Some(0.0),
        steal_window_ms: 1000,
        mem_available_bytes: Some(4 * GIB),
        swap_total_bytes: Some(0),
        swap_free_bytes: Some(0),
        online_cpus: 4,
        rt_cap: 0.9,
        tail: None,
        cost: None,
        steal: None,
        host_test: None,
    }
}

/// McKenney's example: 100 µs of work, 250 µs deadline.
fn tight() -> Workload {
    Workload {
        throughput_only: Some(false),
        work_us: Some(100.0),
        deadline_us: Some(250.0),
        utilization: Some(0.4),
        memory_mib: Some(64.0),
        kernel_share: Some(0.1),
        ..Workload::default()
    }
}

fn decided(a: &Advice) -> &Reason {
    &a.reasons[a.decided_by.expect("decided")]
}

#[test]
fn throughput_only_is_real_fast() {
    let w = Workload {
        throughput_only: Some(true),
        ..tight()
    };
    let a = advise(&w, &bare_metal());
    assert_eq!(a.answer, Answer::RealFast);
    assert_eq!(decided(&a).principle, 1);
    assert_eq!(a.setup, None);
}

#[test]
fn utilization_over_the_cap_is_real_fast_and_work_over_period_counts() {
    let w = Workload {
        utilization: Some(0.95),
        ..tight()
    };
    let a = advise(&w, &bare_metal());
    assert_eq!((a.answer, decided(&a).principle), (Answer::RealFast, 2));
    assert!(
        decided(&a).finding.contains("95%"),
        "{}",
        decided(&a).finding
    );
    // No --utilization: work / period.
    let w = Workload {
        utilization: None,
        work_us: Some(950.0),
        period_us: Some(1000.0),
        deadline_us: Some(1000.0),
        ..tight()
    };
    assert_eq!(decided(&advise(&w, &bare_metal())).principle, 2);
    // Under the cap but over 50 %: a caveat, not a decision.
    let w = Workload {
        utilization: Some(0.7),
        ..tight()
    };
    let a = advise(&w, &bare_metal());
    assert_eq!(a.reasons[1].leads_to, None);
    assert!(a.reasons[1].finding.contains("rule of thumb"));
}

#[test]
fn memory_that_cannot_be_locked_is_real_fast() {
    let w = Workload {
        memory_mib: Some(8192.0),
        ..tight()
    };
    let a = advise(&w, &bare_metal());
    assert_eq!((a.answer, decided(&a).principle), (Answer::RealFast, 3));
    assert!(matches!(decided(&a).source, Source::Measured(_)));
    let fits = advise(&tight(), &bare_metal());
    assert_eq!(fits.reasons[2].leads_to, None);
}

#[test]
fn a_hypervisor_that_steals_is_real_fast_one_that_does_not_is_a_caveat() {
    let mut f = bare_metal();
    f.hypervisor = Some("kvm".into());
    f.steal_share = Some(0.05);
    let a = advise(&tight(), &f);
    assert_eq!((a.answer, decided(&a).principle), (Answer::RealFast, 4));
    assert!(decided(&a).finding.contains("5.0% steal"));
    f.steal_share = Some(0.001);
    let a = advise(&tight(), &f);
    assert_eq!(a.reasons[3].leads_to, None);
    assert_eq!(a.answer, Answer::RealTime);
}

#[test]
fn long_work_items_are_real_fast_by_rule_without_measurements() {
    let w = Workload {
        work_us: Some(200_000.0),
        deadline_us: Some(1_000_000.0),
        ..tight()
    };
    let a = advise(&w, &bare_metal());
    assert_eq!((a.answer, decided(&a).principle), (Answer::RealFast, 6));
    assert!(matches!(decided(&a).source, Source::Rule(_)));
}

fn measured() -> Facts {
    let mut f = bare_metal();
    f.tail = Some(TailFact {
        source: "ev.json".into(),
        percentile: "p99.9".into(),
        latency_ns: vec![
            ("stock".into(), 400_000),
            ("shield".into(), 80_000),
            ("balanced".into(), 150_000),
        ],
    });
    f.cost = Some(CostFact {
        source: "cost.json".into(),
        configs: vec![
            ConfigCost {
                config: "stock".into(),
                user_slowdown: Some(1.0),
                kernel_slowdown: Some(1.0),
                build_slowdown: Some(1.0),
                throughput: Some(1.0),
            },
            ConfigCost {
                config: "shield".into(),
                user_slowdown: Some(1.1),
                kernel_slowdown: Some(2.0),
                build_slowdown: Some(2.0),
                throughput: Some(0.5),
            },
            ConfigCost {
                config: "balanced".into(),
                user_slowdown: Some(1.05),
                kernel_slowdown: Some(1.5),
                build_slowdown: Some(1.3),
                throughput: Some(0.8),
            },
        ],
    });
    f
}

#[test]
fn work_above_the_measured_crossover_is_real_fast() {
    // Shield work slowdown = 0.9 × 1.1 + 0.1 × 2 = 1.19; crossover = 320 µs / 0.19 ≈ 1684 µs.
    let w = Workload {
        work_us: Some(5_000.0),
        deadline_us: Some(10_000.0),
        ..tight()
    };
    let a = advise(&w, &measured());
    assert_eq!((a.answer, decided(&a).principle), (Answer::RealFast, 6));
    assert!(
        decided(&a).finding.contains("1684 µs"),
        "{}",
        decided(&a).finding
    );
    let short = advise(&tight(), &measured());
    assert_eq!(short.reasons[5].leads_to, None);
    assert!(short.reasons[5].finding.contains("below it the shield"));
}

#[test]
fn the_deadline_against_the_measured_tail_picks_the_set_up() {
    // Stock: 400 + 100 = 500 µs > 250; balanced: 150 + 100×1.095 ≈ 260 > 250; shield: 80 + 119 = 199.
    let a = advise(&tight(), &measured());
    assert_eq!(a.answer, Answer::RealTime);
    assert_eq!(decided(&a).principle, 0);
    assert_eq!(a.setup, Some(Setup::Shield));
    // A looser deadline: the balanced set-up meets it and keeps throughput.
    let w = Workload {
        deadline_us: Some(300.0),
        ..tight()
    };
    assert_eq!(advise(&w, &measured()).setup, Some(Setup::Balanced));
    // Looser still: stock meets it.
    let w = Workload {
        deadline_us: Some(600.0),
        ..tight()
    };
    let a = advise(&w, &measured());
    assert_eq!((a.answer, decided(&a).principle), (Answer::RealFast, 0));
    // Tighter than anything measured: real time, and said that nothing here meets it.
    let w = Workload {
        deadline_us: Some(150.0),
        ..tight()
    };
    let a = advise(&w, &measured());
    assert_eq!(
        (a.answer, a.setup.clone()),
        (Answer::RealTime, Some(Setup::Shield))
    );
    assert!(decided(&a).finding.contains("no measured set-up meets it"));
}

#[test]
fn without_measurements_tight_slack_is_real_time_else_benchmark() {
    let a = advise(&tight(), &bare_metal());
    assert_eq!(a.answer, Answer::RealTime);
    assert!(matches!(decided(&a).source, Source::Rule(_)));
    let w = Workload {
        deadline_us: Some(50_000.0),
        ..tight()
    };
    let a = advise(&w, &bare_metal());
    assert_eq!(
        (a.answer, a.decided_by, a.setup.clone()),
        (Answer::Benchmark, None, None)
    );
}

#[test]
fn periodic_work_gets_a_reservation_with_headroom() {
    let w = Workload {
        period_us: Some(1000.0),
        ..tight()
    };
    let a = advise(&w, &measured());
    // 100 µs × 1.19 × 1.2 = 142.8 → 143 µs.
    assert_eq!(
        a.setup,
        Some(Setup::Reservation {
            period_ns: 1_000_000,
            budget_ns: 143_000
        })
    );
    let text = advice_text(&a);
    assert!(
        text.contains("rtmgr reserve --period 1000us --budget 143us"),
        "{text}"
    );
}

#[test]
fn nothing_said_asks_for_everything_and_benchmarks() {
    let a = advise(&Workload::default(), &bare_metal());
    assert_eq!(a.answer, Answer::Benchmark);
    assert!(a.missing.len() >= 5, "{:?}", a.missing);
    assert!(a.missing.iter().any(|m| m.contains("--work")));
    let text = advice_text(&a);
    assert!(text.starts_with("BENCHMARK"), "{text}");
    assert!(text.contains("check: "), "{text}");
}

#[test]
fn advice_round_trips_through_json() {
    let a = advise(&tight(), &measured());
    let back: Advice = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
    assert_eq!(back, a);
    assert_eq!(back.schema, ADVICE_SCHEMA);
}

pub(crate) fn config(name: &str, samples: u64, base: i64) -> crate::report::ConfigResult {
    let mut h = rtmgr_core::stats::Hist::new();
    for i in 0..samples {
        h.record(base + i as i64);
    }
    crate::report::ConfigResult {
        name: name.into(),
        description: String::new(),
        result: crate::report::CpuResult {
            cpu: 1,
            summary: h.summary(0),
            hist: h.to_data(),
            guest_summary: None,
            host_stalled_samples: 0,
            host_stalled_ns: 0,
        },
        throughput: vec![],
        segments: 1,
        disturbance: Default::default(),
        tail_causes: None,
        balancer: None,
        rounds: vec![],
    }
}

pub(crate) fn evaluate(configs: Vec<crate::report::ConfigResult>) -> crate::report::EvaluateRun {
    crate::report::EvaluateRun {
        rt_cpus: "1".parse().unwrap(),
        nrt_cpus: "0".parse().unwrap(),
        load: "all".into(),
        load_engine: crate::load::LoadEngine::Builtin,
        interval_ns: 250_000,
        rounds_planned: 1,
        rounds_done: 1,
        segment_ns: 1,
        latency_bound_us: 300,
        configs,
        verdicts: vec![],
        rt_choice: None,
        skipped: vec![],
        host_preemption: None,
        intervals: None,
    }
}

#[test]
fn a_short_evaluate_run_falls_back_to_the_highest_supported_percentile() {
    let mut run = evaluate(vec![
        config("stock", 5_000, 1_000),
        config("shield", 20_000, 100),
        config("idle", 0, 0),
    ]);
    // 5 000 samples support p99 (50 beyond it) but not p99.9 (5 beyond it).
    let t = tail_from_evaluate(&run, 999_000, "ev.json");
    assert_eq!(t.percentile, "p99");
    assert_eq!(t.latency_ns.len(), 2);
    assert!(t.get("stock").unwrap() >= 5_900);
    run.configs[0] = config("stock", 20_000, 1_000);
    assert_eq!(
        tail_from_evaluate(&run, 999_000, "ev.json").percentile,
        "p99.9"
    );
}

/// The shield's cost, with its work `user` and kernel services `kernel` × stock's time.
fn with_shield_cost(mut f: Facts, user: f64, kernel: f64) -> Facts {
    let cost = f.cost.as_mut().expect("measured() has a cost");
    let shield = cost
        .configs
        .iter_mut()
        .find(|c| c.config == "shield")
        .expect("a shield row");
    shield.user_slowdown = Some(user);
    shield.kernel_slowdown = Some(kernel);
    f
}

#[test]
fn a_shield_with_the_lower_tail_and_faster_work_wins_at_every_duration() {
    // As measured on the 2-vCPU VM: the shield's work ran at 0.74x stock's time.
    let f = with_shield_cost(measured(), 0.9, 0.74);
    let a = advise(&tight(), &f);
    let r = &a.reasons[5];
    assert_eq!(r.leads_to, None, "{}", r.finding);
    assert!(
        r.finding.contains("finishes first at every duration"),
        "{}",
        r.finding
    );
    assert!(r.finding.contains("lower tail"), "{}", r.finding);
    assert!(
        a.reasons[4].finding.contains("stock's time"),
        "{}",
        a.reasons[4].finding
    );
}

#[test]
fn stock_with_the_lower_tail_and_faster_work_wins_at_every_duration() {
    let mut f = with_shield_cost(measured(), 1.2, 1.5);
    f.tail.as_mut().expect("a tail").latency_ns[1].1 = 500_000; // shield above stock's 400 µs
    let a = advise(&tight(), &f);
    let r = &a.reasons[5];
    assert_eq!(r.leads_to, Some(Answer::RealFast), "{}", r.finding);
    assert!(
        r.finding.contains("stock finishes first at every duration"),
        "{}",
        r.finding
    );
}

#[test]
fn stock_with_the_lower_tail_but_slower_work_wins_only_below_the_crossover() {
    // Stock 400 µs + w; shield 500 µs + 0.9 w: they cross at w = 1000 µs.
    let mut f = with_shield_cost(measured(), 0.9, 0.9);
    f.tail.as_mut().expect("a tail").latency_ns[1].1 = 500_000;
    let a = advise(&tight(), &f);
    let r = &a.reasons[5];
    assert!(r.finding.contains("cross at 1000 µs"), "{}", r.finding);
    assert_eq!(r.leads_to, Some(Answer::RealFast), "{}", r.finding);
    let long = Workload {
        work_us: Some(5_000.0),
        deadline_us: Some(10_000.0),
        ..tight()
    };
    let r = advise(&long, &f).reasons[5].clone();
    assert_eq!(r.leads_to, None, "{}", r.finding);
    assert!(r.finding.contains("above it the shield"), "{}", r.finding);
}

#[test]
fn steal_under_load_comes_from_stock_in_an_evaluate_report_and_is_cited() {
    let mut stock = config("stock", 100, 1_000);
    stock.segments = 4;
    stock.disturbance.steal = vec![crate::report::CpuSteal {
        cpu: 1,
        steal_ns: 1_250_000_000,
    }];
    let mut run = evaluate(vec![stock, config("shield", 100, 100)]);
    run.segment_ns = 2_400_000_000;
    let steal = steal_from_evaluate(&run, "ev.json").unwrap();
    assert!((steal.share - 1.25 / 9.6).abs() < 1e-9, "{steal:?}");
    assert_eq!(steal.source, Source::Report("ev.json".into()));
    let mut f = bare_metal();
    f.hypervisor = Some("kvm".into());
    f.steal_share = Some(steal.share);
    f.steal = Some(steal);
    let a = advise(&tight(), &f);
    let r = &a.reasons[3];
    assert_eq!((a.answer, decided(&a).principle), (Answer::RealFast, 4));
    assert!(
        r.finding
            .contains("13.0% steal time (CPU 1 lost 1250 ms to steal in 9.6 s of `stock`"),
        "{}",
        r.finding
    );
    assert_eq!(r.source, Source::Report("ev.json".into()));
    // No steal figures in the report: nothing taken from it.
    run.configs[0].disturbance.steal.clear();
    assert_eq!(steal_from_evaluate(&run, "ev.json"), None);
}

fn host_test(stall_ns: i64, steal_ticks: u64) -> rtmgr_core::host_preemption::HostPreemption {
    use rtmgr_core::host_preemption::{assess, Phase, TestSetup};
    use rtmgr_core::CpuSet;
    let stalls = u64::from(stall_ns > 0);
    let setup = TestSetup::new(CpuSet::single(0), CpuSet::single(1), "b", 1);
    let phases = [
        Phase::synthetic(0, false, 2, 0, 0, 0),
        Phase::synthetic(0, true, 2, stalls, stall_ns, steal_ticks),
    ];
    assess(setup, &phases)
}

#[test]
fn the_cached_host_test_gives_steal_under_load_and_stops_lending_where_the_host_preempts() {
    let (steal, fact) = from_host_test(&host_test(12_000_000, 2));
    let steal = steal.unwrap();
    // 2 ticks of 10 ms in 2 s.
    assert!((steal.share - 0.01).abs() < 1e-9, "{steal:?}");
    assert!(steal.how.contains("every CPU busy"), "{}", steal.how);
    assert!(fact.preempts);
    let mut f = measured();
    f.hypervisor = Some("kvm".into());
    f.steal_share = Some(steal.share);
    f.steal = Some(steal);
    f.host_test = Some(fact);
    // The deadline balanced meets (see the test above), on a host that preempts: the shield.
    let w = Workload {
        deadline_us: Some(300.0),
        ..tight()
    };
    let a = advise(&w, &f);
    assert_eq!(a.setup, Some(Setup::Shield));
    let r = &a.reasons[3];
    assert!(
        r.finding.contains("1.00% steal (CPU 0 with every CPU busy")
            && r.finding
                .contains("host test: this host preempts busy vCPUs"),
        "{}",
        r.finding
    );
    assert!(matches!(&r.source, Source::Measured(m) if m.contains("host-preemption.json")));
    // A host that lets busy vCPUs run keeps the balanced set-up.
    let (steal, fact) = from_host_test(&host_test(0, 0));
    f.steal = steal;
    f.host_test = Some(fact);
    assert_eq!(advise(&w, &f).setup, Some(Setup::Balanced));
}

#[test]
fn a_host_that_gives_one_cpu_for_two_keeps_the_shield_and_says_so() {
    use rtmgr_core::capacity::{assess_capacity, CapacityPhase};
    let phase = |k: usize| CapacityPhase {
        elapsed_ns: 1_000_000_000,
        work: vec![1000 / k as u64; k],
        steal_ticks: 0,
    };
    let mut hp = host_test(0, 0);
    hp.cpu_capacity = assess_capacity(&[1, 0], 1, &[phase(1), phase(2)]);
    let (steal, fact) = from_host_test(&hp);
    assert!(fact
        .capacity
        .as_ref()
        .is_some_and(|c| c.marginal.abs() < 1e-9));
    let mut f = measured();
    f.hypervisor = Some("kvm".into());
    f.steal = steal;
    f.host_test = Some(fact);
    let w = Workload {
        deadline_us: Some(300.0),
        ..tight()
    };
    let a = advise(&w, &f);
    // Balanced would meet the deadline, but lending buys nothing here.
    assert_eq!(a.setup, Some(Setup::Shield));
    let r = &a.reasons[3];
    assert!(
        r.finding.contains(
            "cpu_capacity: 2 busy vCPUs do 1.0× the work of one: the host gives this VM about one CPU now"
        ) && r.finding.contains("/run/rtmgr/host-preemption.json"),
        "{}",
        r.finding
    );
    // A second CPU that adds work keeps balanced.
    let full = |k: usize| CapacityPhase {
        work: vec![1000; k],
        ..phase(k)
    };
    hp.cpu_capacity = assess_capacity(&[1, 0], 1, &[full(1), full(2)]);
    f.host_test = Some(from_host_test(&hp).1);
    assert_eq!(advise(&w, &f).setup, Some(Setup::Balanced));
}
