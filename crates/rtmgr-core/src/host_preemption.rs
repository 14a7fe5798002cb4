//! The host-preemption test's analysis (issue 20; ARTiS §2.2's promise that
//! lending the RT CPUs' idle time costs the RT tasks nothing): the RT CPU's
//! wake-up latency with and without a user-mode spinner beside it while the
//! other CPUs are busy, reduced to a verdict. Pure: phases in, result out; the
//! cached result's checks (age, boot) take the clock and boot id as data.

use crate::stats::Hist;
use crate::CpuSet;
use serde::{Deserialize, Serialize};

pub const HOST_PREEMPTION_SCHEMA: &str = "rtmgr.host-preemption/1";
/// A wake-up later than this is a late one (counted per second).
pub const LATE_NS: i64 = 1_000_000;
/// A spinner-side stall at least this long is host preemption when late
/// wake-ups, or steal, are at least twice as frequent as without the spinner
/// (a host slice is ~10 ms; the guest's own noise here stays below 1 ms).
pub const STALL_NS: i64 = 2_000_000;
/// A baseline (no spinner) busier than this with other work is no baseline.
pub const BUSY_BASELINE: f64 = 0.5;
/// /proc/stat counts steal in USER_HZ ticks: 10 ms each.
pub const STEAL_TICK_NS: u64 = 10_000_000;
/// The probe's period and one phase, by default (issue 20's hand measurement).
pub const DEFAULT_INTERVAL_NS: u64 = 250_000;
pub const DEFAULT_PHASE_NS: u64 = 250_000_000;
/// The command that produces a result (quoted in every message that lacks one).
pub const HOW_TO_MEASURE: &str = "rtmgr status --host-test";

/// One phase of the test on one CPU, as measured.
#[derive(Debug, Clone)]
pub struct Phase {
    pub cpu: u32,
    /// A SCHED_IDLE user-mode spinner ran on `cpu` during the phase.
    pub spinner: bool,
    pub elapsed_ns: u64,
    /// Every release's latency (missed releases included, no coordinated omission).
    pub latency: Hist,
    /// The wake-ups alone: a 10 ms stall is one late wake-up.
    pub wakeups: Hist,
    /// Steal ticks of `cpu` across the phase.
    pub steal_ticks: u64,
    /// Ticks `cpu` was busy (user, system, interrupts) and idle across the phase.
    pub busy_ticks: u64,
    pub idle_ticks: u64,
}

impl Phase {
    /// A synthetic phase on `cpu`: `secs` seconds of 40 µs wake-ups every
    /// `DEFAULT_INTERVAL_NS`, plus `stalls` wake-ups `stall_ns` late with the
    /// releases each swallowed; the CPU busy throughout with the spinner, idle
    /// without. For tests, and for a model of a host that preempts.
    pub fn synthetic(
        cpu: u32,
        spinner: bool,
        secs: u64,
        stalls: u64,
        stall_ns: i64,
        steal_ticks: u64,
    ) -> Phase {
        let (mut latency, mut wakeups) = (Hist::new(), Hist::new());
        let n = secs * 1_000_000_000 / DEFAULT_INTERVAL_NS;
        latency.record_n(40_000, n);
        wakeups.record_n(40_000, n);
        for _ in 0..stalls {
            wakeups.record(stall_ns);
            let mut late = stall_ns;
            while late > 0 {
                latency.record(late);
                late -= DEFAULT_INTERVAL_NS as i64;
            }
        }
        let ticks = secs * 100;
        Phase {
            cpu,
            spinner,
            elapsed_ns: secs * 1_000_000_000,
            latency,
            wakeups,
            steal_ticks,
            busy_ticks: if spinner { ticks } else { 0 },
            idle_ticks: if spinner { 0 } else { ticks },
        }
    }
}

impl TestSetup {
    /// The default probe period and phase, measured at `measured_at_unix_s` in boot `boot_id`.
    pub fn new(cpus: CpuSet, busy_cpus: CpuSet, boot_id: &str, measured_at_unix_s: u64) -> Self {
        TestSetup {
            measured_at_unix_s,
            boot_id: boot_id.into(),
            cpus,
            busy_cpus,
            interval_ns: DEFAULT_INTERVAL_NS,
            phase_ns: DEFAULT_PHASE_NS,
            partial: None,
        }
    }
}

/// One side (with or without the spinner) of one CPU, over its phases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Side {
    pub phases: u32,
    pub seconds: f64,
    pub samples: u64,
    pub p99_9_ns: Option<i64>,
    pub max_ns: Option<i64>,
    /// Wake-ups later than `LATE_NS`.
    pub late_wakeups: u64,
    pub late_per_s: f64,
    pub steal_ms_per_s: f64,
    /// Share of the time the CPU was busy (the spinner, or other work beside the probe).
    pub busy_share: f64,
}

/// What the test found on one CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuPreemption {
    pub cpu: u32,
    pub with_spinner: Side,
    pub without_spinner: Side,
    /// The host stalls this vCPU when it is busy (see `STALL_NS`).
    pub preempts: bool,
    /// Other work kept the CPU busy without the spinner too (at least
    /// `BUSY_BASELINE`), and no preemption was told: the comparison cannot
    /// tell the host's stalls from the load's.
    pub inconclusive: bool,
    pub finding: String,
}

/// How the test ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TestSetup {
    pub measured_at_unix_s: u64,
    /// /proc/sys/kernel/random/boot_id when measured.
    pub boot_id: String,
    /// The tested (RT) CPUs.
    pub cpus: CpuSet,
    /// The CPUs kept busy by spinners while a tested CPU was measured (the others).
    pub busy_cpus: CpuSet,
    pub interval_ns: u64,
    pub phase_ns: u64,
    /// Why the data are partial (interrupted), if they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<String>,
}

/// The test's result (schema `rtmgr.host-preemption/1`), cached at
/// /run/rtmgr/host-preemption.json.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostPreemption {
    pub schema: String,
    #[serde(flatten)]
    pub setup: TestSetup,
    pub per_cpu: Vec<CpuPreemption>,
    /// Some tested CPU was preempted by the host when busy.
    pub preempts: bool,
    /// Nothing was told on some CPU (its baseline was busy with other work).
    pub inconclusive: bool,
    /// The longest stall with a spinner on a preempted CPU: what lending costs at max.
    pub stall_max_ns: Option<i64>,
    pub verdict: String,
    /// What each further busy CPU adds (issue 28; absent in results cached
    /// before it, and when the test could not compare levels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_capacity: Option<crate::capacity::CpuCapacity>,
}

fn side(phases: &[&Phase]) -> Side {
    let (mut latency, mut wakeups) = (Hist::new(), Hist::new());
    let (mut elapsed, mut steal, mut busy, mut idle) = (0u64, 0u64, 0u64, 0u64);
    for p in phases {
        latency.merge(&p.latency);
        wakeups.merge(&p.wakeups);
        elapsed += p.elapsed_ns;
        steal += p.steal_ticks;
        busy += p.busy_ticks;
        idle += p.idle_ticks;
    }
    let seconds = elapsed as f64 / 1e9;
    let per_s = |x: f64| if seconds > 0.0 { x / seconds } else { 0.0 };
    let late = wakeups.count_above(LATE_NS);
    Side {
        phases: phases.len() as u32,
        seconds,
        samples: latency.len(),
        p99_9_ns: latency.percentile(999_000),
        max_ns: latency.max(),
        late_wakeups: late,
        late_per_s: per_s(late as f64),
        steal_ms_per_s: per_s((steal * STEAL_TICK_NS) as f64 / 1e6),
        busy_share: if busy + idle > 0 {
            busy as f64 / (busy + idle) as f64
        } else {
            0.0
        },
    }
}

fn ms(ns: Option<i64>) -> String {
    ns.map_or("-".into(), |v| format!("{:.1} ms", v as f64 / 1e6))
}

fn cpu_result(cpu: u32, phases: &[Phase]) -> CpuPreemption {
    let pick = |spinner: bool| -> Vec<&Phase> {
        phases
            .iter()
            .filter(|p| p.cpu == cpu && p.spinner == spinner)
            .collect()
    };
    let (with, without) = (side(&pick(true)), side(&pick(false)));
    // Long stalls with the spinner, more of them (or more steal) than without.
    let stalled = with.late_wakeups > 0 && with.max_ns.unwrap_or(0) >= STALL_NS;
    let more_late = with.late_per_s >= 2.0 * without.late_per_s;
    let more_steal =
        with.steal_ms_per_s > 0.0 && with.steal_ms_per_s >= 2.0 * without.steal_ms_per_s;
    let preempts = stalled && (more_late || more_steal);
    let inconclusive = !preempts && without.busy_share >= BUSY_BASELINE;
    let finding = format!(
        "CPU {cpu}: with a spinner max {} ({} wake-ups > 1 ms, {:.1}/s, steal {:.1} ms/s); \
         without max {} ({:.1}/s, steal {:.1} ms/s, CPU {:.0}% busy with other work)",
        ms(with.max_ns),
        with.late_wakeups,
        with.late_per_s,
        with.steal_ms_per_s,
        ms(without.max_ns),
        without.late_per_s,
        without.steal_ms_per_s,
        without.busy_share * 100.0,
    );
    CpuPreemption {
        cpu,
        with_spinner: with,
        without_spinner: without,
        preempts,
        inconclusive,
        finding,
    }
}

/// The result of the phases measured under `setup`.
pub fn assess(setup: TestSetup, phases: &[Phase]) -> HostPreemption {
    let per_cpu: Vec<CpuPreemption> = setup.cpus.iter().map(|c| cpu_result(c, phases)).collect();
    let preempted: Vec<&CpuPreemption> = per_cpu.iter().filter(|c| c.preempts).collect();
    let stall_max_ns = preempted.iter().filter_map(|c| c.with_spinner.max_ns).max();
    let findings: Vec<&str> = per_cpu.iter().map(|c| c.finding.as_str()).collect();
    let inconclusive = per_cpu.iter().any(|c| c.inconclusive);
    let findings = findings.join("; ");
    let verdict = match stall_max_ns {
        Some(stall) => format!(
            "this host preempts busy vCPUs: lending would cost about {:.0} ms at max ({findings})",
            stall as f64 / 1e6,
        ),
        None if inconclusive => format!(
            "inconclusive: other work kept the tested CPU busy even without the spinner, so \
             the host's stalls cannot be told from the load's; run the test on a quiet machine \
             or with a partition applied ({findings})"
        ),
        None => format!("no host preemption seen ({findings})"),
    };
    HostPreemption {
        schema: HOST_PREEMPTION_SCHEMA.into(),
        setup,
        preempts: stall_max_ns.is_some(),
        inconclusive: stall_max_ns.is_none() && inconclusive,
        stall_max_ns,
        per_cpu,
        verdict,
        cpu_capacity: None,
    }
}

/// Why a cached result cannot be used; each message says how to get one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CacheError {
    #[error("no host-preemption result at {0}: run `{HOW_TO_MEASURE}` (it loads every CPU for a few seconds)")]
    Missing(String),
    #[error("host-preemption result at {path} unreadable ({why}): run `{HOW_TO_MEASURE}` again")]
    Malformed { path: String, why: String },
    #[error("host-preemption result at {path} is from another boot ({then}, now {now}): run `{HOW_TO_MEASURE}` again")]
    OtherBoot {
        path: String,
        then: String,
        now: String,
    },
    #[error("host-preemption result at {path} is {age_s} s old (at most {max_age_s} s accepted): run `{HOW_TO_MEASURE}` again")]
    Stale {
        path: String,
        age_s: u64,
        max_age_s: u64,
    },
}

/// The cached result in `text` (read from `path`), if it is from this boot
/// (`boot_id`) and at most `max_age_s` old at `now_unix_s`.
pub fn check_cached(
    path: &str,
    text: &str,
    boot_id: &str,
    now_unix_s: u64,
    max_age_s: u64,
) -> Result<HostPreemption, CacheError> {
    let r: HostPreemption = serde_json::from_str(text).map_err(|e| CacheError::Malformed {
        path: path.into(),
        why: e.to_string(),
    })?;
    if r.schema != HOST_PREEMPTION_SCHEMA {
        return Err(CacheError::Malformed {
            path: path.into(),
            why: format!("schema {:?}, expected {HOST_PREEMPTION_SCHEMA}", r.schema),
        });
    }
    if r.setup.boot_id.trim() != boot_id.trim() {
        return Err(CacheError::OtherBoot {
            path: path.into(),
            then: r.setup.boot_id.trim().into(),
            now: boot_id.trim().into(),
        });
    }
    let age_s = now_unix_s.saturating_sub(r.setup.measured_at_unix_s);
    if age_s > max_age_s {
        return Err(CacheError::Stale {
            path: path.into(),
            age_s,
            max_age_s,
        });
    }
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase(spinner: bool, secs: u64, stalls: u64, stall_ns: i64, steal_ticks: u64) -> Phase {
        Phase::synthetic(0, spinner, secs, stalls, stall_ns, steal_ticks)
    }

    fn setup() -> TestSetup {
        TestSetup::new(CpuSet::single(0), CpuSet::single(1), "b1", 1_000)
    }

    #[test]
    fn host_slices_with_a_spinner_are_preemption_with_their_length() {
        let phases = [phase(false, 2, 0, 0, 0), phase(true, 2, 3, 12_000_000, 4)];
        let r = assess(setup(), &phases);
        assert!(r.preempts);
        let s = r.stall_max_ns.unwrap();
        assert!((11_900_000..=12_100_000).contains(&s), "{s}");
        assert!(
            r.verdict.starts_with(
                "this host preempts busy vCPUs: lending would cost about 12 ms at max"
            ),
            "{}",
            r.verdict
        );
        let c = &r.per_cpu[0];
        assert_eq!(c.with_spinner.late_wakeups, 3);
        assert!((c.with_spinner.late_per_s - 1.5).abs() < 1e-9);
        assert!((c.with_spinner.steal_ms_per_s - 20.0).abs() < 1e-9);
        assert_eq!(c.without_spinner.late_wakeups, 0);
        assert!(c.with_spinner.p99_9_ns.unwrap() > c.without_spinner.p99_9_ns.unwrap());
    }

    #[test]
    fn a_quiet_host_or_stalls_on_both_sides_are_no_preemption() {
        let quiet = [phase(false, 2, 0, 0, 0), phase(true, 2, 0, 0, 0)];
        let r = assess(setup(), &quiet);
        assert!(!r.preempts && r.stall_max_ns.is_none());
        assert!(
            r.verdict.starts_with("no host preemption seen"),
            "{}",
            r.verdict
        );
        // Short bumps with the spinner are guest noise, not host slices.
        let bumps = [phase(false, 2, 0, 0, 0), phase(true, 2, 2, 1_500_000, 0)];
        assert!(!assess(setup(), &bumps).preempts);
        // The host stalls the vCPU as often without a spinner: lending adds nothing.
        let both = [
            phase(false, 2, 2, 9_000_000, 2),
            phase(true, 2, 2, 9_000_000, 2),
        ];
        assert!(!assess(setup(), &both).preempts);
        // A baseline busy with other work tells nothing.
        let mut busy = phase(false, 2, 2, 9_000_000, 2);
        (busy.busy_ticks, busy.idle_ticks) = (180, 20);
        let r = assess(setup(), &[busy, phase(true, 2, 2, 9_000_000, 2)]);
        assert!(!r.preempts && r.inconclusive, "{r:?}");
        assert!(r.verdict.starts_with("inconclusive:"), "{}", r.verdict);
        // As many stalls without, but steal only with the spinner: the host's.
        let stolen = [
            phase(false, 2, 2, 9_000_000, 0),
            phase(true, 2, 2, 12_000_000, 3),
        ];
        assert!(assess(setup(), &stolen).preempts);
    }

    fn cached(r: &HostPreemption) -> String {
        serde_json::to_string(r).unwrap()
    }

    #[test]
    fn the_cache_is_taken_only_fresh_from_this_boot() {
        let r = assess(
            setup(),
            &[phase(false, 1, 0, 0, 0), phase(true, 1, 0, 0, 0)],
        );
        let text = cached(&r);
        let p = "/run/rtmgr/host-preemption.json";
        let back = check_cached(p, &text, "b1\n", 1_100, 600).unwrap();
        assert_eq!(
            (back.setup, back.verdict),
            (r.setup.clone(), r.verdict.clone())
        );
        let stale = check_cached(p, &text, "b1", 2_000, 600).unwrap_err();
        assert!(
            matches!(stale, CacheError::Stale { age_s: 1_000, .. }),
            "{stale}"
        );
        let other = check_cached(p, &text, "b2", 1_100, 600).unwrap_err();
        assert!(matches!(other, CacheError::OtherBoot { .. }));
        for bad in [
            "",
            "{",
            "{\"schema\":\"x\"}",
            &text.replace(HOST_PREEMPTION_SCHEMA, "rtmgr.other/1"),
        ] {
            let e = check_cached(p, bad, "b1", 1_100, 600).unwrap_err();
            assert!(matches!(e, CacheError::Malformed { .. }), "{e}");
            assert!(e.to_string().contains(HOW_TO_MEASURE), "{e}");
        }
    }
}
