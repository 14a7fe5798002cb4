//! Tests of the lending controller, alone and inside the balancer.

use super::*;
use crate::balance::{
    Balancer, Move, Observation, Place, PolicyConfig, PolicyConfigError, Reason, TaskObs,
};
use crate::class::TaskClass;

const MS: u64 = 1_000_000;
const S: u64 = 1_000_000_000;

/// RT CPU 1's window: `samples` probe samples, `late` of them late,
/// `stalled` of those stalled by the host (9 ms steal in the window), lent or not.
fn rt1(samples: u64, late: u64, stalled: u64, lent: bool) -> CpuObs {
    CpuObs {
        cpu: 1,
        rt: true,
        samples,
        late_samples: late,
        host_stalled_samples: stalled,
        steal_ns: if stalled > 0 { 9 * MS } else { 0 },
        lent_ns: if lent { 50 * MS } else { 0 },
        ..Default::default()
    }
}

fn one_guest(_: u32) -> usize {
    1
}

#[test]
fn a_host_that_stalls_lends_stops_lending_and_says_why() {
    let cfg = LendingConfig {
        stalled_to_stop: 2,
        ..Default::default()
    };
    let mut c = LendingControl::new(cfg);
    assert!(c.observe(0, &[rt1(200, 0, 0, false)], one_guest).is_empty());
    assert!(c
        .observe(50 * MS, &[rt1(200, 1, 1, true)], one_guest)
        .is_empty());
    assert!(c.allows(1, 50 * MS));
    let stopped = c.observe(100 * MS, &[rt1(200, 2, 1, true)], one_guest);
    assert_eq!(stopped, vec![1]);
    assert!(!c.allows(1, 100 * MS));
    let st = &c.status(100 * MS)[0];
    assert!(!st.lending);
    assert_eq!(
        st.reason.as_deref(),
        Some("lending off on CPU 1: 2 of 2 lent windows stalled by the host, 9.0 ms each; retry in 2 s")
    );
    assert_eq!(st.retry_at_ns, Some(100 * MS + 2 * S));
    assert_eq!((st.lends, st.lends_stalled), (2, 2));
    assert_eq!(st.off_periods.len(), 1);
    assert_eq!(st.off_periods[0].to_ns, None);
    // Retried after 2 s; stalled again: 4 s, then 8 s ...
    let mut now = 100 * MS + 2 * S;
    assert!(c.allows(1, now));
    let mut backoffs = Vec::new();
    for _ in 0..8 {
        let mut stop = Vec::new();
        while stop.is_empty() {
            stop = c.observe(now, &[rt1(200, 1, 1, true)], one_guest);
            if stop.is_empty() {
                now += 50 * MS;
            }
        }
        let retry = c.status(now)[0].retry_at_ns.unwrap();
        backoffs.push((retry - now) / S);
        now = retry;
    }
    assert_eq!(backoffs, [4, 8, 16, 32, 64, 64, 64, 64]);
    let st = &c.status(now)[0];
    assert!(st.lending);
    assert_eq!(st.off_periods.len(), 9);
    assert!(st.off_periods.iter().all(|p| p.to_ns.is_some()));
}

#[test]
fn by_default_one_stalled_lent_window_stops_lending() {
    let mut c = LendingControl::new(LendingConfig::default());
    assert!(c.observe(0, &[rt1(200, 0, 0, true)], one_guest).is_empty());
    assert_eq!(
        c.observe(50 * MS, &[rt1(200, 36, 36, true)], one_guest),
        [1]
    );
    let reason = c.status(50 * MS)[0].reason.clone().unwrap();
    assert!(
        reason.contains("1 of 2 lent windows stalled by the host, 9.0 ms each"),
        "{reason}"
    );
}

#[test]
fn a_host_that_does_not_stall_keeps_lending() {
    let mut c = LendingControl::new(LendingConfig::default());
    for k in 0..1000 {
        // Guest-free windows have their rare late sample; so do lent ones.
        let lent = k % 10 != 0;
        let late = u64::from(k % 50 == 0);
        assert!(c
            .observe(k * 50 * MS, &[rt1(200, late, 0, lent)], one_guest)
            .is_empty());
    }
    let st = &c.status(50 * S)[0];
    assert!(st.lending && st.reason.is_none() && st.off_periods.is_empty());
    assert_eq!(st.lends, 900);
}

#[test]
fn in_guest_harm_halves_the_guest_cap_then_stops_lending() {
    let mut c = LendingControl::new(LendingConfig::default());
    c.observe(0, &[rt1(200, 0, 0, false)], one_guest);
    assert_eq!(c.guest_cap(1), usize::MAX);
    c.observe(50 * MS, &[rt1(200, 3, 0, true)], |_| 4);
    assert_eq!(c.guest_cap(1), 2);
    c.observe(100 * MS, &[rt1(200, 0, 0, true)], |_| 2);
    assert_eq!(c.guest_cap(1), 3);
    c.observe(150 * MS, &[rt1(200, 3, 0, true)], |_| 3);
    assert_eq!(c.guest_cap(1), 1);
    assert!(c
        .observe(200 * MS, &[rt1(200, 3, 0, true)], one_guest)
        .is_empty());
    let stopped = c.observe(250 * MS, &[rt1(200, 3, 0, true)], one_guest);
    assert_eq!(stopped, vec![1]);
    let reason = c.status(250 * MS)[0].reason.clone().unwrap();
    assert!(
        reason.contains("4 of 5 lent windows late beyond the guest-free tail"),
        "{reason}"
    );
}

#[test]
fn late_samples_the_guest_free_windows_also_show_are_no_harm() {
    let mut c = LendingControl::new(LendingConfig::default());
    // 1 late sample in 100 without guests: 2 in 200 lent is expected.
    for k in 0..20 {
        c.observe(k * 50 * MS, &[rt1(100, 1, 0, false)], one_guest);
    }
    for k in 20..40 {
        assert!(c
            .observe(k * 50 * MS, &[rt1(200, 2, 0, true)], one_guest)
            .is_empty());
    }
    assert_eq!(c.status(2 * S)[0].lends_late, 0);
    // 3 in 200 is more than 1.2 × expected.
    c.observe(40 * 50 * MS, &[rt1(200, 3, 0, true)], one_guest);
    assert_eq!(c.status(2 * S)[0].lends_late, 1);
}

#[test]
fn a_prior_saying_the_host_preempts_starts_with_lending_off() {
    let prior = LendingPrior {
        host_preempts_busy_vcpus: true,
        stall_ns: 9 * MS,
        measured_at_unix_s: 1_000,
        ..Default::default()
    };
    let mut c = LendingControl::new(LendingConfig::default());
    assert!(c.set_prior(prior.clone(), 1_060));
    c.observe(5 * S, &[rt1(0, 0, 0, false)], one_guest);
    assert!(!c.allows(1, 5 * S));
    let st = &c.status(5 * S)[0];
    assert_eq!(
        st.reason.as_deref(),
        Some(
            "lending off on CPU 1: the host preempts busy vCPUs (stalls of 9.0 ms, measured \
             before the start); retry in 64 s"
        )
    );
    assert!(c.allows(1, 69 * S));
    // Too old, or a host that does not preempt: no prior.
    let mut old = LendingControl::new(LendingConfig::default());
    assert!(!old.set_prior(prior.clone(), 1_000 + 8 * 24 * 3600));
    let calm = LendingPrior {
        host_preempts_busy_vcpus: false,
        ..prior
    };
    assert!(!old.set_prior(calm, 1_060));
    old.observe(5 * S, &[rt1(0, 0, 0, false)], one_guest);
    assert!(old.allows(1, 5 * S));
}

#[test]
fn a_prior_saying_lending_adds_no_capacity_starts_with_lending_off() {
    let flat = LendingPrior {
        measured_at_unix_s: 1_000,
        marginal_capacity: Some(0.05),
        effective_cpus: Some(1.04),
        ..Default::default()
    };
    let mut c = LendingControl::new(LendingConfig::default());
    assert!(c.set_prior(flat.clone(), 1_060));
    c.observe(5 * S, &[rt1(0, 0, 0, false)], one_guest);
    assert!(!c.allows(1, 5 * S));
    let reason = c.status(5 * S)[0].reason.clone().unwrap();
    assert_eq!(
        reason,
        "lending off on CPU 1: lending adds no capacity (all busy vCPUs did 1.0× the work of \
         one, the last added 0.05 of a CPU, below 0.25; measured before the start): lending \
         that buys no throughput only risks latency; retry in 64 s"
    );
    // Both causes are told.
    let both = LendingPrior {
        host_preempts_busy_vcpus: true,
        stall_ns: 9 * MS,
        ..flat.clone()
    };
    let mut c = LendingControl::new(LendingConfig::default());
    assert!(c.set_prior(both, 1_060));
    c.observe(5 * S, &[rt1(0, 0, 0, false)], one_guest);
    let reason = c.status(5 * S)[0].reason.clone().unwrap();
    assert!(
        reason.contains("preempts busy vCPUs") && reason.contains("adds no capacity"),
        "{reason}"
    );
    // A CPU that adds capacity, no measurement, or the rule off: lending starts on.
    for (m, min) in [(Some(0.6), 0.25), (None, 0.25), (Some(0.05), 0.0)] {
        let cfg = LendingConfig {
            min_marginal_capacity: min,
            ..Default::default()
        };
        let mut c = LendingControl::new(cfg);
        let p = LendingPrior {
            marginal_capacity: m,
            ..flat.clone()
        };
        assert!(!c.set_prior(p, 1_060), "{m:?} {min}");
        c.observe(5 * S, &[rt1(0, 0, 0, false)], one_guest);
        assert!(c.allows(1, 5 * S));
    }
}

#[test]
fn disabled_controller_never_stops() {
    let cfg = LendingConfig {
        enabled: false,
        ..Default::default()
    };
    let mut c = LendingControl::new(cfg);
    for k in 0..10 {
        assert!(c
            .observe(k * 50 * MS, &[rt1(200, 5, 5, true)], one_guest)
            .is_empty());
    }
    assert!(c.allows(1, S));
}

#[test]
fn malformed_configs_give_one_clear_error() {
    let bad = [
        (
            "[lending]\nmin_marginal_capacity = 1.5\n",
            "min_marginal_capacity must be 0..=1",
        ),
        (
            "[lending]\njudge_windows = 0\n",
            "judge_windows must be 1..=32",
        ),
        (
            "[lending]\nstalled_to_stop = 21\n",
            "stalled_to_stop must be 1..=judge_windows",
        ),
        (
            "[lending]\nlate_tolerance = 0.5\n",
            "late_tolerance must be ≥ 1",
        ),
        ("[lending]\nretry_max_ns = 1\n", "retry_max_ns"),
        ("[lending]\nbogus = 1\n", "unknown field `bogus`"),
        ("[lending]\nenabled = \"yes\"\n", "invalid type"),
        ("hysteresis = -1.0\n", "hysteresis must be ≥ 0"),
        (
            "kernel_share_max = 2.0\n",
            "kernel_share_max must be a share",
        ),
    ];
    for (text, want) in bad {
        let e = PolicyConfig::from_toml(text).unwrap_err();
        let msg = e.to_string();
        assert!(msg.starts_with("balancer config: "), "{msg}");
        assert!(msg.contains(want), "{text:?}: {msg}");
        assert_eq!(msg.lines().count(), 1, "{msg}");
    }
    let good = PolicyConfig::from_toml("[lending]\nretry_max_ns = 8000000000\n").unwrap();
    assert_eq!(good.lending.retry_max_ns, 8 * S);
    assert_eq!(
        PolicyConfig::from_toml("").unwrap(),
        PolicyConfig::default()
    );
    assert!(matches!(
        PolicyConfig::from_toml("[lending]\njudge_windows = 40\n"),
        Err(PolicyConfigError::Lending(_))
    ));
}

#[test]
fn old_observations_without_evidence_still_parse() {
    let old = r#"{"cpu":1,"rt":true,"rt_load":0.5,"latency_p99_ns":null}"#;
    let c: CpuObs = serde_json::from_str(old).unwrap();
    assert_eq!((c.samples, c.lent_ns), (0, 0));
}

// --- Inside the balancer ---

fn hog(id: u64, place: Place) -> TaskObs {
    crate::balance::tests::busy(id, TaskClass::Linux, place)
}

/// One window of a 2-CPU machine (CPU 1 RT) whose lent windows the host stalls
/// (`stall`) or not; the guest's place follows the moves.
fn run_balancer(b: &mut Balancer, from: u64, steps: u64, stall: bool, ids: u64) -> Vec<Move> {
    let mut tasks: Vec<TaskObs> = (ids..ids + 3).map(|i| hog(i, Place::Nrt)).collect();
    let mut all = Vec::new();
    for k in 0..steps {
        let lent = tasks.iter().any(|t| t.place == Place::Rt(1));
        let s = u64::from(stall && lent);
        let cpus = vec![
            CpuObs {
                cpu: 0,
                ..Default::default()
            },
            rt1(200, s, s, lent),
        ];
        let obs = Observation {
            now_ns: from + k * 50 * MS,
            window_ns: 50 * MS,
            cpus,
            tasks: tasks.clone(),
            time_resolution_ns: 0,
        };
        let moves = b.step(&obs);
        for m in &moves {
            let t = tasks.iter_mut().find(|t| t.id == m.task).unwrap();
            t.place = m.to;
        }
        all.extend(moves);
    }
    all
}

#[test]
fn balancer_evicts_and_stops_filling_while_lending_is_off() {
    let mut b = Balancer::new(PolicyConfig::default());
    let moves = run_balancer(&mut b, 0, 40, true, 0);
    let off: Vec<&Move> = moves
        .iter()
        .filter(|m| m.reason == Reason::LendingOff)
        .collect();
    assert_eq!(off.len(), 1, "{moves:?}");
    let off_at = moves
        .iter()
        .position(|m| m.reason == Reason::LendingOff)
        .unwrap();
    // Nothing goes to the RT CPU during the 2 s off (40 steps = 2 s).
    assert!(
        moves[off_at..].iter().all(|m| m.to == Place::Nrt),
        "{moves:?}"
    );
    let st = &b.lending_status(2 * S)[0];
    assert!(!st.lending, "{st:?}");
    // Without stalls, the same balancer lends.
    let mut calm = Balancer::new(PolicyConfig::default());
    let moves = run_balancer(&mut calm, 0, 40, false, 0);
    assert!(moves.iter().any(|m| m.to == Place::Rt(1)));
    assert!(moves.iter().all(|m| m.reason != Reason::LendingOff));
    assert!(calm.lending_status(2 * S)[0].lending);
}

#[test]
fn the_controller_survives_runs_with_new_task_ids() {
    let mut first = Balancer::new(PolicyConfig::default());
    run_balancer(&mut first, 0, 10, true, 0);
    let kept = first.take_lending();
    let st = &kept.status(500 * MS)[0];
    assert!(!st.lending);
    // A new run, new task ids, same clock: still off until the retry.
    let mut second = Balancer::new(PolicyConfig::default());
    second.restore_lending(kept);
    let moves = run_balancer(&mut second, 600 * MS, 10, true, 100);
    assert!(moves.iter().all(|m| m.to != Place::Rt(1)), "{moves:?}");
    assert_eq!(second.lending_status(S)[0].off_periods.len(), 1);
}

#[test]
fn guest_free_windows_teach_the_baseline_while_lending_is_off() {
    let mut c = LendingControl::new(LendingConfig::default());
    assert_eq!(c.observe(0, &[rt1(200, 1, 1, true)], one_guest), [1]);
    // Off for 2 s: the CPU's own tasks are late once in 100 samples.
    for k in 1..40 {
        c.observe(k * 50 * MS, &[rt1(100, 1, 0, false)], one_guest);
    }
    // Retried: 2 late in 200 lent is what it shows without guests.
    assert!(c.allows(1, 2 * S));
    assert!(c
        .observe(2 * S, &[rt1(200, 2, 0, true)], one_guest)
        .is_empty());
    // Only the first, stalled, window was late (no baseline yet then).
    assert_eq!(c.status(2 * S)[0].lends_late, 1);
}
