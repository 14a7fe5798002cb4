use super::*;
use rtmgr_core::stats::Hist;

fn cpu_result(cpu: u32, vals: &[i64]) -> CpuResult {
    let mut h = Hist::new();
    for &v in vals {
        h.record(v);
    }
    CpuResult {
        cpu,
        summary: h.summary(1),
        hist: h.to_data(),
        guest_summary: None,
        host_stalled_samples: 0,
        host_stalled_ns: 0,
    }
}

pub(crate) fn sample_latency_report() -> Report {
    let r = cpu_result(1, &[1000, 2000, 3000, 50_000]);
    Report {
        header: Header {
            schema: SCHEMA.into(),
            rtmgr_version: "0.1.0".into(),
            command: vec!["rtmgr".into(), "measure".into(), "latency".into()],
            started_unix_s: 1_700_000_000,
            host: HostInfo {
                hostname: "h".into(),
                kernel: "6.18".into(),
                cpus_online: "0-1".parse().unwrap(),
                hypervisor: Some("kvm".into()),
            },
            partial: true,
            partial_reason: Some("interrupted".into()),
        },
        body: Body::Latency(LatencyRun {
            settings: ProbeSettings {
                probe: ProbeSpec {
                    mode: ProbeMode::Absolute,
                    cpus: "1".parse().unwrap(),
                    interval_ns: 1_000_000,
                    duration_ns: Some(1_000_000_000),
                    loops: None,
                    policy: PolicySpec::Fifo { priority: 99 },
                    parallel: 1,
                },
                mlocked: true,
                dma_latency_held: true,
            },
            load: Some(LoadResult {
                kind: "all".into(),
                engine: crate::load::LoadEngine::Builtin,
                cpus: "0".parse().unwrap(),
                guest_cpus: CpuSet::new(),
                metrics: vec![ComponentMetrics {
                    component: "cpu".into(),
                    ops: 10,
                    ops_per_s: 5.5,
                    op: "bogo-op".into(),
                }],
            }),
            elapsed_ns: 4_000_000,
            threads: vec![ThreadResult {
                cpu: 1,
                index: 0,
                summary: r.summary.clone(),
                hist: r.hist.clone(),
                voluntary_ctxt_switches: 4,
                involuntary_ctxt_switches: 0,
                cpu_time_ns: 12345,
            }],
            per_cpu: vec![r.clone()],
            overall: r,
            disturbance: Disturbance {
                steal: vec![CpuSteal {
                    cpu: 1,
                    steal_ns: 1000,
                }],
                interrupts: vec![CpuEvents {
                    cpu: 1,
                    total: 3,
                    top: vec![crate::procstat::SourceCount {
                        source: "LOC".into(),
                        count: 3,
                    }],
                }],
                softirqs: vec![],
            },
            tail_causes: None,
        }),
    }
}

#[test]
fn json_round_trip_and_kind_tag() {
    let rep = sample_latency_report();
    let json = serde_json::to_string_pretty(&rep).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["schema"], SCHEMA);
    assert_eq!(v["kind"], "latency");
    assert_eq!(v["settings"]["policy"]["policy"], "fifo");
    let back: Report = serde_json::from_str(&json).unwrap();
    assert_eq!(back, rep);
}

#[test]
fn trace_cost_kind_is_snake_case() {
    let r = cpu_result(1, &[1000, 2000]);
    let mut rep = sample_latency_report();
    rep.body = Body::TraceCost(TraceCostRun {
        cpus: "1".parse().unwrap(),
        interval_ns: 1_000_000,
        rounds: 1,
        segment_ns: 1_000_000_000,
        load: None,
        untraced: r.clone(),
        traced: r,
        events: 10,
        events_per_s: 10.0,
        events_lost: 0,
    });
    let json = serde_json::to_string(&rep).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["kind"], "trace_cost");
    assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), rep);
}

/// An evaluate run: idle, stock, shield, idle-guests and balanced, each
/// with `n` samples from `base` ns on and its own throughput.
fn sample_evaluate_run_of(n: i64) -> EvaluateRun {
    let m = |v: f64| {
        vec![ComponentMetrics {
            component: "cpu".into(),
            ops: 1,
            ops_per_s: v,
            op: "bogo-op".into(),
        }]
    };
    let mk = |name: &str, base: i64, thr: Vec<ComponentMetrics>| ConfigResult {
        name: name.into(),
        description: String::new(),
        result: cpu_result(1, &(0..n).map(|i| base + i).collect::<Vec<_>>()),
        throughput: thr,
        segments: 2,
        disturbance: Disturbance::default(),
        tail_causes: None,
        balancer: None,
        rounds: vec![],
    };
    EvaluateRun {
        rt_cpus: "1".parse().unwrap(),
        nrt_cpus: "0".parse().unwrap(),
        load: "all".into(),
        load_engine: crate::load::LoadEngine::StressNg,
        interval_ns: 250_000,
        rounds_planned: 2,
        rounds_done: 2,
        segment_ns: 1_000_000_000,
        latency_bound_us: 300,
        configs: vec![
            mk("idle", 1000, vec![]),
            mk("stock", 100_000, m(100.0)),
            mk("shield", 10_000, m(50.0)),
            mk("idle-guests", 10_000, m(75.0)),
            mk("balanced", 30_000, m(90.0)),
        ],
        verdicts: vec![],
        rt_choice: None,
        skipped: vec![],
        host_preemption: None,
        intervals: None,
    }
}

fn sample_evaluate_run() -> EvaluateRun {
    sample_evaluate_run_of(2000)
}

#[test]
fn evaluate_round_trip_table_and_verdicts() {
    let e = sample_evaluate_run();
    let t = evaluate_table(&e);
    assert!(t.contains("shield") && t.contains("idle-guests"), "{t}");
    assert!(t.contains("0.50x"), "{t}"); // shield throughput / stock
    let v = evaluate_verdicts(&e);
    assert!(
        v.iter()
            .any(|l| l.starts_with("shield: p99 latency") && l.contains("lower than stock")),
        "{v:?}"
    );
    assert!(
        v.iter()
            .any(|l| l.starts_with("idle-guests's SCHED_IDLE guests recovered 50%")),
        "{v:?}"
    );
    assert!(
        v.iter()
            .any(|l| l.starts_with("stock: max") && l.contains("within")),
        "{v:?}"
    );
    let json = serde_json::to_string(&e).unwrap();
    assert_eq!(serde_json::from_str::<EvaluateRun>(&json).unwrap(), e);
}

#[test]
fn verdicts_compare_balanced_with_the_shield() {
    // 20 000 samples: enough for a p99.9. balanced's sit 20 µs above the shield's.
    let e = sample_evaluate_run_of(20_000);
    let v = evaluate_verdicts(&e);
    let line = v
        .iter()
        .find(|l| l.starts_with("balanced vs shield:"))
        .unwrap_or_else(|| panic!("{v:?}"));
    assert!(
        line.contains("p99.9 latency 1.7x higher than shield"),
        "{line}"
    );
    assert!(line.contains("max 1.7x higher than shield"), "{line}");
    assert!(line.contains("throughput 1.80x the shield's"), "{line}");
    assert!(
        v.iter()
            .any(|l| l.starts_with("the balancer's guests recovered 80%")),
        "{v:?}"
    );
    // A short run has no p99.9: the tails are compared at p99.
    let v = evaluate_verdicts(&sample_evaluate_run());
    assert!(
        v.iter()
            .any(|l| l.starts_with("balanced vs shield: p99 latency") && l.contains("higher")),
        "{v:?}"
    );
    // Without a shield there is nothing to weigh balanced against.
    let mut no_shield = e;
    no_shield.configs.retain(|c| c.name != "shield");
    let v = evaluate_verdicts(&no_shield);
    assert!(!v.iter().any(|l| l.contains("vs shield")), "{v:?}");
    assert!(v.iter().any(|l| l.starts_with("balanced: p99")), "{v:?}");
}

#[test]
fn an_old_report_s_rtmgr_configuration_reads_as_idle_guests() {
    let mut e = sample_evaluate_run();
    e.configs.retain(|c| c.name != "balanced");
    let mut rep = sample_latency_report();
    rep.body = Body::Evaluate(e);
    // A report written before issue 21 named the SCHED_IDLE guests "rtmgr".
    let old = serde_json::to_string(&rep)
        .unwrap()
        .replace("\"name\":\"idle-guests\"", "\"name\":\"rtmgr\"");
    assert!(old.contains("\"name\":\"rtmgr\""));
    let back: Report = serde_json::from_str(&old).unwrap();
    assert_eq!(back, rep);
    let e = crate::advice::evaluate_run(&back).unwrap();
    let v = evaluate_verdicts(e);
    assert!(
        v.iter().any(|l| l.starts_with("idle-guests: p99 latency")),
        "{v:?}"
    );
    let tail = crate::advice::tail_from_evaluate(e, 990_000, "old.json");
    assert!(
        tail.latency_ns.iter().any(|(n, _)| n == "idle-guests"),
        "{:?}",
        tail.latency_ns
    );
    assert_eq!(config_name("rtmgr"), "idle-guests");
    assert_eq!(config_name("balanced"), "balanced");
}

#[test]
fn summary_table_shows_only_supported_columns() {
    let r = cpu_result(0, &[5, 6]);
    let t = summary_table(&[("cpu0".into(), &r.summary)]);
    assert!(!t.contains("p50"), "{t}");
    assert!(t.contains("missed"));
    assert_eq!(us(Some(1500)), "1.5");
    assert_eq!(us(None), "-");
}

#[test]
fn ratios_keep_significant_digits_whatever_their_size() {
    let cases = [
        (221.4, "221"),
        (4312.0, "4312"),
        (22.14, "22.1"),
        (2.714, "2.71"),
        (1.0, "1.00"),
        (0.3412, "0.34"),
        (0.05, "0.050"),
        (1.0 / 221.0, "0.0045"),
        (0.0, "0"),
    ];
    for (r, text) in cases {
        assert_eq!(ratio_text(r), text, "{r}");
    }
    assert_eq!(text::ratio_cell(Some(1.0 / 221.0)), "0.0045x");
    assert_eq!(text::ratio_cell(None), "-");
}

/// A result labelled by the probe: the guest's tail without 3 host samples.
fn labelled(cpu: u32) -> CpuResult {
    let guest = cpu_result(cpu, &[1000, 2000]).summary;
    CpuResult {
        guest_summary: Some(guest),
        host_stalled_samples: 3,
        host_stalled_ns: 4_500_000,
        ..cpu_result(cpu, &[1000, 2000, 3_000_000, 2_000_000, 1_000_000])
    }
}

#[test]
fn the_two_tails_round_trip_and_old_reports_parse() {
    let mut rep = sample_latency_report();
    let Body::Latency(run) = &mut rep.body else {
        unreachable!()
    };
    run.overall = labelled(1);
    let json = serde_json::to_string(&rep).unwrap();
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["overall"]["host_stalled_samples"], 3);
    assert_eq!(v["overall"]["host_stalled_ns"], 4_500_000);
    assert_eq!(v["overall"]["guest_summary"]["n"], 2);
    assert_eq!(serde_json::from_str::<Report>(&json).unwrap(), rep);
    // Unlabelled: no guest_summary key is written.
    let plain = serde_json::to_value(cpu_result(1, &[5])).unwrap();
    assert!(plain.get("guest_summary").is_none());
    // A report written before the labelling has none of the three keys.
    let mut old: serde_json::Value = serde_json::from_str(&json).unwrap();
    for k in ["guest_summary", "host_stalled_samples", "host_stalled_ns"] {
        old["overall"].as_object_mut().unwrap().remove(k);
    }
    let back: Report = serde_json::from_value(old).unwrap();
    let Body::Latency(run) = back.body else {
        unreachable!()
    };
    assert_eq!(run.overall.guest_summary, None);
    assert_eq!(
        (
            run.overall.host_stalled_samples,
            run.overall.host_stalled_ns
        ),
        (0, 0)
    );
}

#[test]
fn the_two_tails_table_shows_guest_and_host_or_nothing() {
    let plain = cpu_result(1, &[1000]);
    assert_eq!(two_tails_table(&[("cpu1".into(), &plain)]), None);
    let l = labelled(1);
    let t = two_tails_table(&[("cpu1".into(), &l), ("old".into(), &plain)]).unwrap();
    assert!(
        t.contains("guest p99.9") && t.contains("host samples"),
        "{t}"
    );
    let row = t.lines().find(|l| l.starts_with("cpu1")).unwrap();
    assert!(row.ends_with("3      4.5"), "{row}");
    let old = t.lines().find(|l| l.starts_with("old")).unwrap();
    assert!(
        old.contains('-'),
        "an unlabelled row has no guest cells: {old}"
    );
}
