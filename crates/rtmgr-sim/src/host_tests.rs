//! The host model with the lending controller (issue 20): on a host that
//! stalls busy vCPUs the rtmgr policy stops lending and its tail stays the
//! shield's; on one that does not, it keeps lending and gains throughput.
//! Ratios only, on simulated time: deterministic, seeded.

use super::*;
use rtmgr_core::balance::scenario;

const MS: u64 = 1_000_000;

/// `scenarios/host-preempt-2cpu.lbu`: CPU 1 RT with a periodic probe (an
/// RT0 task released every 250 µs, running 5 µs), CPU 0 NRT, three
/// CPU-bound Linux tasks of 4 s, here of `work_s` each.
fn probe_machine(b: BalancerKind, host: Option<HostModel>, work_s: u64) -> SimReport {
    let (cfg, tasks) = probe_config(b, host, work_s);
    run(&cfg, &tasks).unwrap()
}

fn probe_config(
    b: BalancerKind,
    host: Option<HostModel>,
    work_s: u64,
) -> (SimConfig, Vec<TaskDef>) {
    let sc = scenario::parse(include_str!("../../../scenarios/host-preempt-2cpu.lbu")).unwrap();
    let mut cfg = scenario_config(&sc, b);
    cfg.host = host;
    let mut tasks = tasks_from_scenario(&sc, cfg.cpus);
    for t in tasks.iter_mut().filter(|t| t.class == TaskClass::Linux) {
        t.work_ns = work_s * 1_000_000_000;
    }
    (cfg, tasks)
}

/// This VM's host, roughly (docs/lending.md): a busy vCPU loses ~9 ms a
/// few times a second while both are busy.
const THIS_VM: HostModel = HostModel {
    rate_per_s: 4.0,
    slice_ns: 9 * MS,
    busy_vcpus: 0,
    capacity: None,
};

struct Figures {
    p999_ratio: f64,
    max_ratio: f64,
    throughput: f64,
}

fn p999(r: &SimReport) -> i64 {
    r.result.rt0_latency.get(999_000).unwrap()
}

/// rtmgr against the shield on the probe machine: p99.9 and max ratios,
/// throughput (the shield's completion time over rtmgr's).
fn compare(shield: &SimReport, rtmgr: &SimReport) -> Figures {
    let done = |r: &SimReport| r.result.completion_max_ns.unwrap() as f64;
    let max = |r: &SimReport| r.result.rt0_latency.max_ns.unwrap() as f64;
    let f = Figures {
        p999_ratio: p999(rtmgr) as f64 / p999(shield) as f64,
        max_ratio: max(rtmgr) / max(shield),
        throughput: done(shield) / done(rtmgr),
    };
    eprintln!(
        "p99.9 shield {} rtmgr {} ns (×{:.2}), max ×{:.1}, throughput ×{:.2}",
        p999(shield),
        p999(rtmgr),
        f.p999_ratio,
        f.max_ratio,
        f.throughput
    );
    f
}

fn pair(host: Option<HostModel>, work_s: u64) -> (SimReport, SimReport) {
    (
        probe_machine(BalancerKind::Shield, host, work_s),
        probe_machine(BalancerKind::Rtmgr, host, work_s),
    )
}

#[test]
fn without_host_stalls_lending_continues_and_pays() {
    let (shield, rtmgr) = pair(None, 4);
    let f = compare(&shield, &rtmgr);
    assert!(f.throughput >= 1.25, "throughput ×{}", f.throughput);
    assert!(f.p999_ratio <= 1.2, "p99.9 ×{}", f.p999_ratio);
    assert!(rtmgr.host.is_none());
    // With a host model that never finds all vCPUs busy enough: the same.
    let rare = HostModel {
        busy_vcpus: 3,
        ..THIS_VM
    };
    let (_, calm) = pair(Some(rare), 4);
    let host = calm.host.unwrap();
    assert_eq!(host.stalls, 0);
    assert!(host
        .lending
        .iter()
        .all(|l| l.lending && l.off_periods.is_empty()));
    assert_eq!(
        calm.result.completion_max_ns,
        rtmgr.result.completion_max_ns
    );
}

#[test]
fn with_host_stalls_the_controller_stops_lending_and_keeps_the_tail() {
    // A minute behind the shield: the controller's few tries, backing off
    // from 2 s, cost fewer late samples than the p99.9 allows.
    let (shield, rtmgr) = pair(Some(THIS_VM), 20);
    let f = compare(&shield, &rtmgr);
    assert!(f.p999_ratio <= 1.2, "p99.9 ×{}", f.p999_ratio);
    let host = rtmgr.host.as_ref().unwrap();
    assert!(host.stalls > 0);
    let cpu1 = &host.lending[0];
    assert_eq!(cpu1.cpu, 1);
    assert!(cpu1.off_periods.len() >= 3, "{cpu1:?}");
    assert!(cpu1.lends_stalled > 0);
    assert!(
        cpu1.off_periods[0].reason.contains("stalled by the host"),
        "{cpu1:?}"
    );
    // Converged: the off periods grow (2 s, 4 s, 8 s ...).
    let lengths: Vec<u64> = cpu1
        .off_periods
        .iter()
        .filter_map(|p| p.to_ns.map(|t| t - p.from_ns))
        .collect();
    assert!(lengths.windows(2).all(|w| w[1] >= w[0]), "{lengths:?}");
    // The controller is what keeps the tail: without it the stalls show.
    let (mut cfg, tasks) = probe_config(BalancerKind::Rtmgr, Some(THIS_VM), 20);
    cfg.policy.lending.enabled = false;
    let blind = run(&cfg, &tasks).unwrap();
    assert!(
        p999(&blind) > 10 * p999(&rtmgr),
        "{} {}",
        p999(&blind),
        p999(&rtmgr)
    );
}

#[test]
fn a_prior_keeps_a_short_run_from_lending_at_all() {
    let prior = LendingPrior {
        host_preempts_busy_vcpus: true,
        stall_ns: THIS_VM.slice_ns,
        measured_at_unix_s: 0,
        ..Default::default()
    };
    let (mut cfg, tasks) = probe_config(BalancerKind::Rtmgr, Some(THIS_VM), 4);
    cfg.lending_prior = Some(prior);
    let rtmgr = run(&cfg, &tasks).unwrap();
    let shield = probe_machine(BalancerKind::Shield, Some(THIS_VM), 4);
    let f = compare(&shield, &rtmgr);
    assert!(f.p999_ratio <= 1.2, "p99.9 ×{}", f.p999_ratio);
    let cpu1 = &rtmgr.host.unwrap().lending[0];
    assert!(!cpu1.lending);
    assert_eq!(cpu1.lends, 0);
    assert!(cpu1
        .reason
        .as_deref()
        .unwrap()
        .contains("the host preempts busy vCPUs"));
}

#[test]
fn on_a_host_that_gives_one_cpu_the_controller_lends_nothing_and_loses_nothing() {
    // Two vCPUs, the capacity of one: lending the RT CPU adds no work.
    let host = HostModel::capacity_only(1.0).unwrap();
    let prior = host.capacity_prior(2).unwrap();
    assert_eq!(prior.marginal_capacity, Some(0.0));
    let (mut cfg, tasks) = probe_config(BalancerKind::Rtmgr, Some(host), 4);
    cfg.lending_prior = Some(prior);
    let rtmgr = run(&cfg, &tasks).unwrap();
    let shield = probe_machine(BalancerKind::Shield, Some(host), 4);
    let f = compare(&shield, &rtmgr);
    assert!(f.throughput >= 1.0, "throughput ×{}", f.throughput);
    assert!(f.p999_ratio <= 1.2, "p99.9 ×{}", f.p999_ratio);
    let cpu1 = &rtmgr.host.as_ref().unwrap().lending[0];
    assert_eq!((cpu1.lending, cpu1.lends), (false, 0), "{cpu1:?}");
    assert!(
        cpu1.reason
            .as_deref()
            .unwrap()
            .contains("lending adds no capacity"),
        "{cpu1:?}"
    );
    // What blind lending buys there: no throughput (the shield's NRT vCPU
    // already had the one CPU), where without the factor it nearly halves
    // the completion time (`without_host_stalls_lending_continues_and_pays`).
    let (mut blind, tasks) = probe_config(BalancerKind::Rtmgr, Some(host), 4);
    blind.policy.lending.enabled = false;
    let blind = run(&blind, &tasks).unwrap();
    let b = compare(&shield, &blind);
    assert!(b.throughput < 1.1, "blind lending ×{}", b.throughput);
    assert!(blind.host.as_ref().unwrap().stalls > 0);
    // With the capacity of two CPUs the same prior lets it lend.
    let full = HostModel::capacity_only(2.0).unwrap();
    assert_eq!(full.sharing_rate(2), 0.0);
    assert_eq!(full.capacity_prior(2).unwrap().marginal_capacity, Some(1.0));
}

#[test]
fn the_capacity_factor_is_a_stalled_share_and_bad_factors_fail_clearly() {
    let host = HostModel::capacity_only(1.5).unwrap();
    // Stalled share rS / (1 + rS) = 1 − F/N.
    let rs = host.sharing_rate(2) * 0.010;
    assert!((rs / (1.0 + rs) - 0.25).abs() < 1e-9);
    assert_eq!(host.sharing_rate(1), 0.0, "one vCPU: F ≥ N");
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let e = HostModel::capacity_only(bad).unwrap_err().to_string();
        assert!(e.contains("host capacity"), "{e}");
    }
}

#[test]
fn an_idle_vcpu_is_not_stalled() {
    // Behind a shield the RT vCPU is busy 2 % of the time (the probe): it
    // is stalled far less often than the always-busy NRT vCPU.
    let shield = probe_machine(BalancerKind::Shield, Some(THIS_VM), 4);
    let host = shield.host.unwrap();
    assert!(host.steal_ns[0] > 10 * host.steal_ns[1].max(1), "{host:?}");
    // No vCPU busy: nothing to stall.
    let only_probe: Vec<TaskDef> = probe_config(BalancerKind::Shield, None, 4)
        .1
        .into_iter()
        .filter(|t| t.class == TaskClass::Rt0)
        .map(|mut t| {
            t.work_ns = 100 * MS;
            t
        })
        .collect();
    let mut cfg = probe_config(BalancerKind::Shield, Some(THIS_VM), 4).0;
    cfg.irq_per_s = 0.0;
    let r = run(&cfg, &only_probe).unwrap();
    assert_eq!(r.host.unwrap().stalls, 0);
}

#[test]
fn host_model_specs_parse_or_fail_clearly() {
    assert_eq!(
        HostModel::parse("4,9").unwrap(),
        HostModel {
            rate_per_s: 4.0,
            slice_ns: 9 * MS,
            busy_vcpus: 0,
            capacity: None,
        }
    );
    assert_eq!(HostModel::parse("0.5, 2.5, 1").unwrap().slice_ns, 2_500_000);
    for bad in ["", "4", "x,9", "4,9,1,2", "0,9", "4,0", "-1,9", "inf,9"] {
        let e = HostModel::parse(bad).unwrap_err().to_string();
        assert!(e.contains("RATE,SLICE_MS"), "{bad}: {e}");
    }
}

#[test]
fn host_model_runs_are_deterministic_and_leave_other_runs_alone() {
    let a = probe_machine(BalancerKind::Rtmgr, Some(THIS_VM), 2);
    let b = probe_machine(BalancerKind::Rtmgr, Some(THIS_VM), 2);
    assert_eq!(a, b);
    let json = serde_json::to_string(&probe_machine(BalancerKind::Rtmgr, None, 2)).unwrap();
    assert!(!json.contains("\"host\""));
}
