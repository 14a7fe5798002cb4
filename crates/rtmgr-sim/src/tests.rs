//! Simulator tests: determinism, accounting, and the qualitative behaviour of
//! each balancer on small ARTiS-like machines (fast: simulated seconds only).

use super::*;
use rtmgr_core::balance::scenario;

const MS: u64 = 1_000_000;

fn linux(name: &str, cpus: u32, work_ms: u64) -> TaskDef {
    TaskDef {
        name: name.into(),
        class: TaskClass::Linux,
        mask: (0..cpus).collect(),
        work_ns: work_ms * MS,
        burst_ns: 0,
        sleep_ns: 0,
        np_every_ns: 0,
        np_len_ns: 0,
        periodic: false,
    }
}

fn rt0(name: &str, cpu: u32, busy_ms: u64, sleep_ms: u64, work_ms: u64) -> TaskDef {
    TaskDef {
        name: name.into(),
        class: TaskClass::Rt0,
        mask: CpuSet::single(cpu),
        work_ns: work_ms * MS,
        burst_ns: busy_ms * MS,
        sleep_ns: sleep_ms * MS,
        np_every_ns: 0,
        np_len_ns: 0,
        periodic: false,
    }
}

/// ARTiS §3.3 at a small scale: 4 CPUs, 3 RT0 tasks at 90 %, 13 Linux tasks.
fn artis_33(balancer: BalancerKind, work_ms: u64) -> (SimConfig, Vec<TaskDef>) {
    let cfg = SimConfig::new(4, CpuSet::parse_list("1-3").unwrap(), balancer);
    let mut tasks: Vec<TaskDef> = (0..13)
        .map(|i| linux(&format!("l{i}"), 4, work_ms))
        .collect();
    for c in 1..=3 {
        tasks.push(rt0(&format!("rt{c}"), c, 9, 1, 1_000_000));
    }
    (cfg, tasks)
}

#[test]
fn same_seed_same_trace_different_seed_different_trace() {
    let (mut cfg, tasks) = artis_33(BalancerKind::Rtmgr, 300);
    cfg.keep_trace = true;
    let mut a = Sim::new(cfg.clone(), tasks.clone()).unwrap();
    a.run();
    let mut b = Sim::new(cfg.clone(), tasks.clone()).unwrap();
    b.run();
    assert!(a.trace.len() > 10_000);
    assert_eq!(a.trace, b.trace);
    assert_eq!(a.report(), b.report());
    cfg.seed = 2;
    let mut c = Sim::new(cfg, tasks).unwrap();
    c.run();
    assert_ne!(a.report().trace_hash, c.report().trace_hash);
}

#[test]
fn work_is_conserved_and_shares_add_up() {
    for b in ALL_BALANCERS {
        let (cfg, tasks) = artis_33(b, 200);
        let r = run(&cfg, &tasks).unwrap();
        assert_eq!(r.result.unfinished, 0, "{b}");
        for t in r
            .result
            .tasks
            .iter()
            .filter(|t| t.class == TaskClass::Linux)
        {
            // Done work = its own work plus migration costs.
            let expected = 200 * MS + t.migrations * cfg.migration_cost_ns;
            assert_eq!(t.cpu_ns, expected, "{b} {}", t.name);
            let sum: f64 = t.cpu_percent.iter().sum();
            assert!((sum - 100.0).abs() < 1e-6, "{b}: {sum}");
        }
        assert!(r.cpu_busy_percent.iter().all(|&p| p <= 100.0 + 1e-9));
    }
}

#[test]
fn shield_keeps_linux_tasks_off_rt_cpus_and_artis_uses_them() {
    let (cfg, tasks) = artis_33(BalancerKind::Shield, 200);
    let r = run(&cfg, &tasks).unwrap();
    for t in r
        .result
        .tasks
        .iter()
        .filter(|t| t.class == TaskClass::Linux)
    {
        assert_eq!(t.cpu_percent[0], 100.0, "{}", t.name);
    }
    let (cfg, tasks) = artis_33(BalancerKind::Artis, 200);
    let a = run(&cfg, &tasks).unwrap();
    let on_rt: f64 = a
        .result
        .tasks
        .iter()
        .filter(|t| t.class == TaskClass::Linux)
        .map(|t| t.cpu_percent[1..].iter().sum::<f64>())
        .sum();
    assert!(on_rt > 0.0);
    // Using the RT CPUs' idle 10 % finishes the work sooner than the shield.
    assert!(a.result.completion_max_ns.unwrap() < r.result.completion_max_ns.unwrap());
}

#[test]
fn rt_load_weighting_is_fairer_than_the_symmetric_balancer() {
    let spread = |b| {
        let (cfg, tasks) = artis_33(b, 400);
        run(&cfg, &tasks).unwrap().result.completion_spread.unwrap()
    };
    let (lin, art, rtm) = (
        spread(BalancerKind::Linux),
        spread(BalancerKind::Artis),
        spread(BalancerKind::Rtmgr),
    );
    assert!(lin > 1.5, "linux spread {lin}");
    assert!(
        art < lin && rtm < lin,
        "linux {lin} artis {art} rtmgr {rtm}"
    );
}

#[test]
fn artis_migrates_on_non_preemptible_entry_rtmgr_only_after_observing() {
    // Linux tasks with frequent 450 µs kernel sections; RT0 wakes every 2 ms.
    let mk = |b| {
        let mut cfg = SimConfig::new(2, CpuSet::single(1), b);
        cfg.irq_per_s = 0.0;
        let mut tasks = vec![rt0("rt", 1, 1, 1, 1_000_000)];
        for i in 0..3 {
            let mut t = linux(&format!("k{i}"), 2, 400);
            t.np_every_ns = 1_100_000;
            t.np_len_ns = 450_000;
            tasks.push(t);
        }
        run(&cfg, &tasks).unwrap()
    };
    let shield = mk(BalancerKind::Shield);
    let artis = mk(BalancerKind::Artis);
    let linux = mk(BalancerKind::Linux);
    let rtmgr = mk(BalancerKind::Rtmgr);
    let max = |r: &SimReport| r.result.rt0_latency.max_ns.unwrap();
    eprintln!(
        "max latency: shield {} artis {} linux {} rtmgr {}",
        max(&shield),
        max(&artis),
        max(&linux),
        max(&rtmgr)
    );
    // ARTiS never lets a non-preemptible section run on the RT CPU.
    assert!(
        max(&artis) <= max(&shield) + 20_000,
        "{} {}",
        max(&artis),
        max(&shield)
    );
    // rtmgr sees kernel time only after the fact: no better than ARTiS.
    assert!(max(&rtmgr) >= max(&artis));
    assert!(max(&linux) > 50_000, "linux max {}", max(&linux));
}

#[test]
fn scenario_tasks_convert_with_units() {
    let sc = scenario::parse(
        "iter_ns = 10\n{\n loop = 1000\n sloop = 100\n sleep = 5\n kernel_every = 50\n kernel_us = 2\n}\n{\n cpu_mask = 0x2\n sched = FIFO\n priority = 99\n loop = 1\n}\n",
    )
    .unwrap();
    let t = tasks_from_scenario(&sc, 4);
    assert_eq!(t[0].work_ns, 10_000);
    assert_eq!(t[0].burst_ns, 1000);
    assert_eq!(t[0].sleep_ns, 5000);
    assert_eq!((t[0].np_every_ns, t[0].np_len_ns), (500, 2000));
    assert_eq!(t[0].mask.len(), 4);
    assert_eq!(t[1].class, TaskClass::Rt0);
}

#[test]
fn bad_machines_are_refused() {
    let t = vec![linux("a", 2, 1)];
    let all = CpuSet::parse_list("0-1").unwrap();
    assert!(matches!(
        Sim::new(SimConfig::new(2, all, BalancerKind::Rtmgr), t.clone()),
        Err(SimError::NoNrt(_))
    ));
    let bad_rt0 = vec![rt0("r", 0, 1, 1, 1)];
    assert!(matches!(
        Sim::new(
            SimConfig::new(2, CpuSet::single(1), BalancerKind::Linux),
            bad_rt0
        ),
        Err(SimError::Rt0Placement(_))
    ));
    assert!(Sim::new(
        SimConfig::new(2, CpuSet::single(1), BalancerKind::Linux),
        vec![]
    )
    .is_err());
}

/// FNV-1a of the report's JSON: every figure, the event count and trace hash.
fn digest(r: &SimReport) -> u64 {
    let json = serde_json::to_vec(r).unwrap();
    json.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Pins the simulator's behaviour: these digests were computed from the
/// code before issue 19's speed work, and a speed-up must not change one
/// bit of a report. If a change of the model is meant, update them and say
/// so in the commit (bench/sim-identical.sh compares every scenario).
#[test]
fn reports_are_pinned() {
    let want = [
        (BalancerKind::Linux, 7_299_359_604_139_940_037),
        (BalancerKind::Shield, 901_712_659_818_467_027),
        (BalancerKind::Artis, 18_105_303_548_231_460_104),
        (BalancerKind::Rtmgr, 2_198_431_527_060_446_739),
    ];
    for (b, pinned) in want {
        let (mut cfg, mut tasks) = artis_33(b, 300);
        // Kernel sections too (ARTiS's migration trigger, rtmgr's kernel time).
        cfg.seed = 7;
        tasks[0].np_every_ns = 20 * MS;
        tasks[0].np_len_ns = 2 * MS;
        tasks[1].burst_ns = 5 * MS;
        tasks[1].sleep_ns = 3 * MS;
        let r = run(&cfg, &tasks).unwrap();
        assert_eq!(digest(&r), pinned, "{b}: {} events", r.events);
    }
}
