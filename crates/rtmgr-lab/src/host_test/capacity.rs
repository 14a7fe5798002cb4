//! The capacity part of the host test (issue 28 item 3; ARTiS §2.1: lending
//! is worth it only where a further busy CPU adds work): 1…N SCHED_OTHER
//! spinners pinned on the candidate CPUs (the tested RT CPUs added last), in
//! interleaved short phases (1, 2, …, N, 1, 2, …), each counting fixed units
//! of work, with the busy CPUs' steal per phase.
//! `rtmgr_core::capacity` judges.

use super::spinner::{SpinnerSpec, Spinners};
use crate::experiment::session::Session;
use crate::experiment::{bad_input, Result};
use crate::measure::mono_ns;
use crate::measure::segment::prepare_for;
use crate::procstat::parse_cpu_ticks;
use rtmgr_core::capacity::{assess_capacity, schedule, CapacityPhase, CpuCapacity};
use rtmgr_core::CpuSet;
use rtmgr_linux::sched::Policy;
use std::time::Duration;

/// The capacity part's default length, and one phase: short phases,
/// interleaved, so that every level sees the same host (it changes from
/// minute to minute).
pub const DEFAULT_CAPACITY_DURATION: Duration = Duration::from_secs(2);
pub const DEFAULT_CAPACITY_PHASE: Duration = Duration::from_millis(200);

/// The candidate CPUs in the order spinners are added: the online CPUs that
/// are not tested, then the tested ones, so the last level's gain is what
/// lending the tested (RT) CPUs adds.
pub fn spinner_order(online: &CpuSet, tested: &CpuSet) -> Vec<u32> {
    let others = online.difference(tested);
    others.iter().chain(tested.iter()).collect()
}

fn steal_ticks(s: &Session, cpus: &[u32]) -> u64 {
    let text = s.host.read_opt("/proc/stat").unwrap_or_default();
    let ticks = parse_cpu_ticks(&text);
    cpus.iter()
        .filter_map(|c| ticks.get(c))
        .map(|t| t.steal)
        .sum()
}

/// One phase: `k` spinners on the first `k` CPUs of `order` for `phase`.
fn phase(s: &Session, order: &[u32], k: usize, phase: Duration) -> Result<CapacityPhase> {
    let busy = &order[..k];
    let specs = busy
        .iter()
        .map(|&c| {
            let prepare =
                prepare_for(&s.host, s.applied.as_ref(), &CpuSet::single(c)).or_else(bad_input)?;
            Ok(SpinnerSpec {
                cpu: c,
                policy: Policy::Other { nice: 0 },
                prepare,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let spinners = Spinners::start(&specs)?;
    let (steal0, work0, t0) = (steal_ticks(s, busy), spinners.work(), mono_ns());
    std::thread::sleep(phase);
    let (work1, t1) = (spinners.work(), mono_ns());
    let steal1 = steal_ticks(s, busy);
    drop(spinners);
    Ok(CapacityPhase {
        elapsed_ns: t1.saturating_sub(t0),
        work: work1.iter().zip(&work0).map(|(b, a)| b - a).collect(),
        steal_ticks: steal1.saturating_sub(steal0),
    })
}

/// Measure the capacity of `tested` with the other online CPUs for
/// `duration` in phases of `phase_len` (None: fewer than two CPUs, or
/// interrupted before a comparison).
pub fn measure_capacity(
    s: &Session,
    tested: &CpuSet,
    duration: Duration,
    phase_len: Duration,
) -> Result<Option<CpuCapacity>> {
    let order = spinner_order(&s.online, tested);
    let n = order.len() as u32;
    if n < 2 || duration.is_zero() || phase_len.is_zero() {
        return Ok(None);
    }
    let phases = (duration.as_nanos() / phase_len.as_nanos()) as u32;
    let phases = phases.max(n) / n * n;
    let mut out = Vec::with_capacity(phases as usize);
    for k in schedule(n, phases) {
        if s.stopped() {
            break;
        }
        out.push(phase(s, &order, k as usize, phase_len)?);
    }
    Ok(assess_capacity(&order, phase_len.as_nanos() as u64, &out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tested_cpus_are_added_last() {
        let online = CpuSet::parse_list("0-3").unwrap();
        let tested = CpuSet::parse_list("0,2").unwrap();
        assert_eq!(spinner_order(&online, &tested), [1, 3, 0, 2]);
        assert_eq!(spinner_order(&online, &online), [0, 1, 2, 3]);
    }
}
