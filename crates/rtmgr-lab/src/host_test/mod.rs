//! The host-preemption test (issue 20 item 1; ARTiS §2.2: lending must not
//! delay the RT tasks; McKenney §2.1: what lies under the kernel): for each
//! tested CPU, with every other CPU busy, the FIFO 99 latency probe runs in
//! short phases alternately with and without a SCHED_IDLE user-mode spinner
//! beside it; steal is read per phase. `rtmgr_core::host_preemption` judges.
//! Then the machine's capacity (issue 28): `capacity`.

pub mod capacity;
pub mod spinner;

use crate::experiment::session::{check_cpus, Session};
use crate::experiment::{bad_input, Result};
use crate::measure::probe::{max_fifo_priority, Probe};
use crate::measure::segment::prepare_for;
use crate::measure::{mono_ns, unix_now_s};
use crate::procstat::{parse_cpu_ticks, CpuTicks};
use crate::report::{PolicySpec, ProbeMode, ProbeSpec};
use rtmgr_core::host_preemption::{
    assess, HostPreemption, Phase, TestSetup, DEFAULT_INTERVAL_NS, DEFAULT_PHASE_NS,
};
use rtmgr_core::CpuSet;
use rtmgr_linux::partition::Applied;
use rtmgr_linux::sched::Policy;
use rtmgr_linux::Host;
use spinner::{SpinnerSpec, Spinners};
use std::time::Duration;

/// The whole test's default length (split between the tested CPUs).
pub const DEFAULT_DURATION: Duration = Duration::from_secs(4);
/// One phase: long enough for a few host slices' worth of chances, short
/// enough that both sides see the same host.
pub const DEFAULT_PHASE: Duration = Duration::from_nanos(DEFAULT_PHASE_NS);

/// What to test.
#[derive(Debug, Clone)]
pub struct HostTestConfig {
    /// The (RT) CPUs tested, one after the other.
    pub cpus: CpuSet,
    pub duration: Duration,
    pub phase: Duration,
    pub interval_ns: u64,
    /// The capacity measurement's length (zero: skipped) and phase.
    pub capacity_duration: Duration,
    pub capacity_phase: Duration,
}

impl HostTestConfig {
    pub fn new(cpus: CpuSet) -> Self {
        HostTestConfig {
            cpus,
            duration: DEFAULT_DURATION,
            phase: DEFAULT_PHASE,
            interval_ns: DEFAULT_INTERVAL_NS,
            capacity_duration: capacity::DEFAULT_CAPACITY_DURATION,
            capacity_phase: capacity::DEFAULT_CAPACITY_PHASE,
        }
    }

    /// Phases per tested CPU: an even number, at least one pair.
    fn phases_per_cpu(&self) -> u32 {
        let per_cpu = self.duration.as_nanos() / self.cpus.len().max(1) as u128;
        let n = (per_cpu / self.phase.as_nanos().max(1)) as u32;
        (n / 2).max(1) * 2
    }
}

/// The CPUs tested when none are named: the applied partition's RT CPUs,
/// else the one `--rt-cpus auto` would choose.
pub fn default_cpus(s: &Session) -> Result<CpuSet> {
    if let Some(a) = &s.applied {
        return Ok(a.plan.rt.clone());
    }
    let window = rtmgr_linux::unmovable::SAMPLE_WINDOW;
    rtmgr_linux::unmovable::choose_rt_cpus(&s.host, 1, window)
        .map(|c| c.rt)
        .map_err(|e| crate::experiment::Error::Failed(format!("choosing the CPU to test: {e}")))
}

/// What the test would disturb under an applied partition: refuse while RT
/// tasks run there (the spinners load every CPU for seconds).
fn refuse_beside_rt_tasks(
    host: &Host,
    applied: Option<&Applied>,
    duration: Duration,
) -> Result<()> {
    let Some(a) = applied else { return Ok(()) };
    let tasks = rtmgr_linux::cgroup::members(host, &a.layout, &a.rt_cgroup);
    if !tasks.is_empty() {
        let shown: Vec<String> = tasks.iter().take(8).map(|t| t.to_string()).collect();
        return bad_input(format!(
            "a partition is applied and {} task(s) run in its RT cpuset ({}{}): the host test \
             loads every CPU for {:.0} s and would delay them; stop them or `rtmgr partition reset` first",
            tasks.len(),
            shown.join(" "),
            if tasks.len() > shown.len() { " …" } else { "" },
            duration.as_secs_f64()
        ));
    }
    Ok(())
}

fn ticks_of(s: &Session, cpu: u32) -> CpuTicks {
    let text = s.host.read_opt("/proc/stat").unwrap_or_default();
    parse_cpu_ticks(&text)
        .get(&cpu)
        .copied()
        .unwrap_or_default()
}

/// One phase on `cpu`: the probe for `cfg.phase`, with a SCHED_IDLE spinner
/// beside it if `spinner`.
fn phase(s: &Session, cfg: &HostTestConfig, cpu: u32, spinner: bool) -> Result<Phase> {
    let one = CpuSet::single(cpu);
    let prepare = prepare_for(&s.host, s.applied.as_ref(), &one).or_else(bad_input)?;
    let _beside = if spinner {
        Some(Spinners::start(&[SpinnerSpec {
            cpu,
            policy: Policy::Idle,
            prepare: prepare.clone(),
        }])?)
    } else {
        None
    };
    let probe = ProbeSpec {
        mode: ProbeMode::Absolute,
        cpus: one,
        interval_ns: cfg.interval_ns,
        duration_ns: Some(cfg.phase.as_nanos() as u64),
        loops: None,
        policy: PolicySpec::Fifo {
            priority: max_fifo_priority(),
        },
        parallel: 1,
    };
    let ticks0 = ticks_of(s, cpu);
    let t0 = mono_ns();
    let out = Probe::start(&probe, s.stop.clone(), prepare)?.join();
    let elapsed_ns = mono_ns().saturating_sub(t0);
    let ticks = ticks_of(s, cpu).since(&ticks0);
    let thread = out
        .into_iter()
        .next()
        .ok_or_else(|| crate::experiment::Error::Failed("the probe thread died".into()))?;
    Ok(Phase {
        cpu,
        spinner,
        elapsed_ns,
        latency: thread.hist,
        wakeups: thread.wakeups,
        steal_ticks: ticks.steal,
        busy_ticks: ticks.busy,
        idle_ticks: ticks.idle,
    })
}

/// Run the test on `cfg.cpus`, then its capacity measurement (spinners
/// stopped on return, on error and on SIGINT/SIGTERM through the session's
/// stop flag; a stopped test is partial).
pub fn measure_host_preemption(s: &Session, cfg: &HostTestConfig) -> Result<HostPreemption> {
    check_cpus("host test CPUs", &cfg.cpus, &s.online)?;
    if cfg.phase.is_zero() || cfg.interval_ns == 0 || cfg.duration < cfg.phase * 2 {
        return bad_input(format!(
            "host test: phases of {:?} every {} ns need a duration of at least two phases (got {:?})",
            cfg.phase, cfg.interval_ns, cfg.duration
        ));
    }
    refuse_beside_rt_tasks(&s.host, s.applied.as_ref(), cfg.duration)?;
    let mut phases = Vec::new();
    let mut busy_cpus = CpuSet::new();
    for cpu in cfg.cpus.iter() {
        let others = s.online.difference(&CpuSet::single(cpu));
        busy_cpus = busy_cpus.union(&others);
        let specs = others
            .iter()
            .map(|c| {
                let prepare = prepare_for(&s.host, s.applied.as_ref(), &CpuSet::single(c))
                    .or_else(bad_input)?;
                Ok(SpinnerSpec {
                    cpu: c,
                    policy: Policy::Other { nice: 0 },
                    prepare,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let _busy = Spinners::start(&specs)?;
        for i in 0..cfg.phases_per_cpu() {
            if s.stopped() {
                break;
            }
            phases.push(phase(s, cfg, cpu, i % 2 == 1)?);
        }
    }
    let cpu_capacity =
        capacity::measure_capacity(s, &cfg.cpus, cfg.capacity_duration, cfg.capacity_phase)?;
    let boot_id = rtmgr_linux::host_preemption::boot_id(&s.host);
    let setup = TestSetup {
        interval_ns: cfg.interval_ns,
        phase_ns: cfg.phase.as_nanos() as u64,
        partial: s.partial(),
        ..TestSetup::new(cfg.cpus.clone(), busy_cpus, &boot_id, unix_now_s())
    };
    Ok(HostPreemption {
        cpu_capacity,
        ..assess(setup, &phases)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_alternate_in_pairs_split_between_cpus() {
        let mut c = HostTestConfig::new(CpuSet::single(0));
        assert_eq!(c.phases_per_cpu(), 16);
        c.cpus = CpuSet::parse_list("0-1").unwrap();
        assert_eq!(c.phases_per_cpu(), 8);
        c.duration = Duration::from_millis(300);
        assert_eq!(c.phases_per_cpu(), 2, "at least one pair");
    }

    #[test]
    fn refused_while_tasks_run_in_the_rt_cpuset_of_an_applied_partition() {
        use rtmgr_linux::fake::FakeMachine;
        let m = FakeMachine::new(2).typical_tasks().build();
        let host = m.host();
        let journal = std::path::Path::new("/run/rtmgr/journal.jsonl");
        let online = rtmgr_linux::cpus::online(&host).unwrap();
        let plan =
            rtmgr_core::partition::validate(&Default::default(), Some(&CpuSet::single(1)), &online)
                .unwrap();
        let opts = rtmgr_linux::partition::ApplyOptions {
            journal: journal.into(),
            replace: false,
        };
        rtmgr_linux::partition::apply(&host, &plan, &opts).unwrap();
        let applied = rtmgr_linux::partition::current(&host, journal)
            .unwrap()
            .unwrap();
        let four = Duration::from_secs(4);
        assert!(refuse_beside_rt_tasks(&host, None, four).is_ok());
        let rt_tasks = rtmgr_linux::cgroup::members(&host, &applied.layout, &applied.rt_cgroup);
        if rt_tasks.is_empty() {
            assert!(refuse_beside_rt_tasks(&host, Some(&applied), four).is_ok());
            let tid = rtmgr_linux::tasks::pids(&host).unwrap()[0];
            rtmgr_linux::cgroup::attach(&host, &applied.layout, &applied.rt_cgroup, tid).unwrap();
        }
        let e = refuse_beside_rt_tasks(&host, Some(&applied), four).unwrap_err();
        assert!(e.is_input(), "{e}");
        assert!(e.to_string().contains("run in its RT cpuset"), "{e}");
        rtmgr_linux::partition::reset(&host, journal).unwrap();
    }
}
