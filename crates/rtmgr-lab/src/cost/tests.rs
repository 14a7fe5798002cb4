use super::*;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9 * (1.0 + a.abs().max(b.abs()))
}

#[test]
fn mean_and_sample_sd() {
    let s = mean_sd(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]).unwrap();
    assert_eq!(s.n, 8);
    assert!(close(s.mean, 5.0));
    // Sample sd (n − 1): sqrt(32 / 7).
    assert!(close(s.sd, (32.0f64 / 7.0).sqrt()));
    let one = mean_sd(&[3.5]).unwrap();
    assert_eq!((one.n, one.sd), (1, 0.0));
    assert!(mean_sd(&[]).is_none());
    // Non-finite samples (a failed round) are left out.
    let s = mean_sd(&[1.0, f64::NAN, 3.0]).unwrap();
    assert_eq!(s.n, 2);
    assert!(close(s.mean, 2.0));
}

#[test]
fn slowdown_is_above_one_when_slower_either_way() {
    assert_eq!(slowdown(Some(200.0), Some(100.0), Better::Lower), Some(2.0));
    assert_eq!(slowdown(Some(50.0), Some(100.0), Better::Higher), Some(2.0));
    assert_eq!(slowdown(Some(100.0), Some(0.0), Better::Lower), None);
    assert_eq!(slowdown(Some(0.0), Some(10.0), Better::Higher), None);
    assert_eq!(slowdown(None, Some(1.0), Better::Lower), None);
}

#[test]
fn slowdowns_are_against_stock_whatever_its_position() {
    let mut rows = vec![
        Measured::new("shield", vec![30.0, 30.0]),
        Measured::new("stock", vec![10.0, 10.0]),
        Measured::new("balanced", vec![]),
    ];
    set_slowdowns(&mut rows, Better::Lower);
    assert_eq!(rows[0].slowdown, Some(3.0));
    assert_eq!(rows[1].slowdown, Some(1.0));
    assert_eq!(rows[2].slowdown, None);
    let mut no_stock = vec![Measured::new("shield", vec![1.0])];
    set_slowdowns(&mut no_stock, Better::Lower);
    assert_eq!(no_stock[0].slowdown, None);
}

#[test]
fn slowdown_intervals_are_paired_over_rounds() {
    // Stock drifts from round to round; the shield is a steady 2x slower.
    let stock = vec![10.0, 14.0, 9.0, 12.0, 11.0];
    let shield: Vec<f64> = stock.iter().map(|x| 2.0 * x).collect();
    let mut rows = vec![
        Measured::new("stock", stock.clone()),
        Measured::new("shield", shield.clone()),
        Measured::new("twin", stock.clone()),
    ];
    set_slowdowns(&mut rows, Better::Lower);
    assert_eq!(rows[0].slowdown_ci, None);
    let i = rows[1].slowdown_ci.expect("5 rounds");
    assert!(i.low > 1.5 && i.high < 2.5 && i.contains(2.0), "{i:?}");
    assert!(rows[2].slowdown_ci.unwrap().contains(1.0));
    // A rate: the slower configuration has the lower rate, the same slowdown.
    let rate = slowdown_interval(&stock, &shield, Better::Higher).unwrap();
    assert!(rate.contains(2.0) && rate.low > 1.0, "{rate:?}");
    // Too few rounds, or unequal ones: no interval.
    assert_eq!(
        slowdown_interval(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0], Better::Lower),
        None
    );
    assert_eq!(slowdown_interval(&shield, &stock[..4], Better::Lower), None);
    let t = micro_table(&[MicroBench {
        name: "null-syscall".into(),
        what: String::new(),
        unit: "ns/op".into(),
        better: Better::Lower,
        per_config: rows,
    }]);
    assert!(t.contains("(2.00x ["), "{t}");
}

#[test]
fn levels_double_past_saturation() {
    assert_eq!(sweep_levels(2, None), vec![1, 2, 4, 8]);
    assert_eq!(sweep_levels(1, None), vec![1, 2, 4]);
    assert_eq!(sweep_levels(2, Some(3)), vec![1, 2]);
    assert_eq!(sweep_levels(0, Some(0)), vec![1]);
}

fn sweep_row(config: &str, jpm: &[&[f64]]) -> SweepConfigCost {
    SweepConfigCost {
        config: config.into(),
        points: jpm
            .iter()
            .map(|s| Measured::new(config, s.to_vec()))
            .collect(),
        relative_to_stock: None,
        max_jobs_per_min: None,
        max_at: None,
    }
}

#[test]
fn sweep_average_relative_and_maximum() {
    let levels = [1, 2, 4];
    let mut rows = vec![
        sweep_row("stock", &[&[100.0], &[200.0], &[190.0]]),
        sweep_row("shield", &[&[100.0], &[100.0], &[95.0]]),
        sweep_row("balanced", &[&[90.0, 110.0], &[], &[190.0]]),
    ];
    summarize_sweep(&levels, &mut rows);
    assert!(close(rows[0].relative_to_stock.unwrap(), 1.0));
    assert_eq!(
        (rows[0].max_jobs_per_min, rows[0].max_at),
        (Some(200.0), Some(2))
    );
    // (1 + 0.5 + 0.5) / 3.
    assert!(close(rows[1].relative_to_stock.unwrap(), 2.0 / 3.0));
    assert_eq!(rows[1].max_at, Some(1));
    // A level without data is left out of the average, not counted as zero.
    assert!(close(rows[2].relative_to_stock.unwrap(), 1.0));
    assert_eq!(rows[2].max_at, Some(4));
}

#[test]
fn tables_show_mean_sd_and_ratio() {
    let mut per_config = vec![
        Measured::new("stock", vec![100.0, 110.0, 90.0]),
        Measured::new("shield", vec![200.0, 200.0, 200.0]),
    ];
    set_slowdowns(&mut per_config, Better::Lower);
    let b = MicroBench {
        name: "null-syscall".into(),
        what: "getppid()".into(),
        unit: "ns".into(),
        better: Better::Lower,
        per_config,
    };
    let t = micro_table(&[b]);
    assert!(t.contains("null-syscall"), "{t}");
    assert!(t.contains("100 ± 10.0"), "{t}");
    assert!(t.contains("200 ± 0 (2.00x)"), "{t}");
    let build = BuildCost {
        source: "regex-syntax 0.8.11".into(),
        command: vec!["cargo".into(), "build".into()],
        per_config: vec![BuildConfigCost {
            config: "stock".into(),
            jobs: 2,
            real_s: Measured::new("stock", vec![10.0, 12.0]),
            user_s: Measured::new("stock", vec![15.0]),
            sys_s: Measured::new("stock", vec![]),
            failures: vec!["exit status 101".into()],
        }],
    };
    let t = build_table(&build);
    assert!(t.contains("11.0 ± 1.41"), "{t}");
    assert!(t.contains("build failed: exit status 101"), "{t}");
}

#[test]
fn three_significant_digits() {
    assert_eq!(sig3(1234.4), "1234");
    assert_eq!(sig3(12.345), "12.3");
    assert_eq!(sig3(0.012345), "0.0123");
    assert_eq!(sig3(0.0), "0");
}

#[test]
fn report_round_trips_through_json() {
    let r = CostReport {
        header: crate::report::Header::new(
            COST_SCHEMA,
            1,
            crate::report::HostInfo {
                hostname: "h".into(),
                kernel: "k".into(),
                cpus_online: "0-1".parse().unwrap(),
                hypervisor: None,
            },
            None,
        ),
        rt_cpus: "1".parse().unwrap(),
        nrt_cpus: "0".parse().unwrap(),
        rounds_planned: 3,
        rounds_done: 3,
        configs: vec![],
        skipped: vec!["preempt".into()],
        micro: vec![],
        build: None,
        sweep: None,
    };
    let text = serde_json::to_string(&r).unwrap();
    let back: CostReport = serde_json::from_str(&text).unwrap();
    assert_eq!(back, r);
}
