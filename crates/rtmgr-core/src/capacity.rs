//! The machine's real capacity (issue 28 item 3; ARTiS §2.1: lending an RT
//! CPU's idle time to ordinary work is worth it only where it adds
//! throughput): the work rate of 1…N user-mode spinners on the candidate
//! CPUs, measured in interleaved short phases, reduced to what each further
//! busy CPU adds, against the steal the host accounted. Pure: phases in,
//! result out (the lab's host test measures, `status` shows, the lending
//! prior uses it).

use serde::{Deserialize, Serialize};

/// /proc/stat counts steal in USER_HZ ticks of 10 ms.
const STEAL_TICK_MS: f64 = 10.0;
/// The fixed unit of work each spinner counts (one multiply-add chain).
pub const WORK_UNIT: &str = "10 000 dependent 64-bit multiply-adds";
/// Below this, a further busy vCPU adds "about nothing": the finding says so.
const NOTHING: f64 = 0.15;

/// One capacity phase: `work[i]` units done by spinner `i` (pinned to the
/// `i`-th candidate CPU) in `elapsed_ns`, with `work.len()` spinners busy.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityPhase {
    pub elapsed_ns: u64,
    pub work: Vec<u64>,
    /// Steal ticks of the busy CPUs across the phase, summed.
    pub steal_ticks: u64,
}

/// What `busy_cpus` spinners did together, over their phases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityLevel {
    pub busy_cpus: u32,
    pub phases: u32,
    pub seconds: f64,
    /// Work units per second, all spinners together.
    pub total_rate: f64,
    /// ... per spinner: the mean, and the slowest.
    pub per_thread_rate: f64,
    pub slowest_thread_rate: f64,
    /// `total_rate` over the one-spinner level's: how many CPUs' worth of work.
    pub relative: f64,
    /// Steal the host accounted on the busy CPUs, ms per second (summed).
    pub steal_ms_per_s: f64,
}

/// The `cpu_capacity` result (cached with the host test).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuCapacity {
    /// The candidate CPUs in the order spinners were added: spinner `i` ran
    /// on `cpus[i]` (the tested RT CPUs last, so the last level's gain is
    /// what lending them adds).
    pub cpus: Vec<u32>,
    pub unit: String,
    pub phase_ns: u64,
    pub levels: Vec<CapacityLevel>,
    /// `relative` with every candidate CPU busy: CPUs' worth of work the host gives.
    pub effective_cpus: f64,
    /// What the last busy CPU added, in CPUs (relative at N − at N−1).
    pub marginal: f64,
    pub finding: String,
}

/// Spinners per phase, interleaved: 1, 2, …, n, 1, 2, … for `phases` phases.
pub fn schedule(n: u32, phases: u32) -> Vec<u32> {
    (0..phases).map(|i| i % n.max(1) + 1).collect()
}

fn level(k: u32, phases: &[&CapacityPhase], one: Option<f64>) -> CapacityLevel {
    let elapsed: u64 = phases.iter().map(|p| p.elapsed_ns).sum();
    let seconds = elapsed as f64 / 1e9;
    let rate = |units: u64| {
        if seconds > 0.0 {
            units as f64 / seconds
        } else {
            0.0
        }
    };
    let total: u64 = phases.iter().flat_map(|p| &p.work).sum();
    let per_thread: Vec<f64> = (0..k as usize)
        .map(|i| rate(phases.iter().filter_map(|p| p.work.get(i)).sum()))
        .collect();
    let total_rate = rate(total);
    let steal: u64 = phases.iter().map(|p| p.steal_ticks).sum();
    CapacityLevel {
        busy_cpus: k,
        phases: phases.len() as u32,
        seconds,
        total_rate,
        per_thread_rate: total_rate / f64::from(k.max(1)),
        slowest_thread_rate: per_thread.iter().copied().fold(f64::INFINITY, f64::min),
        relative: match one {
            Some(r) if r > 0.0 => total_rate / r,
            _ => 1.0,
        },
        steal_ms_per_s: if seconds > 0.0 {
            steal as f64 * STEAL_TICK_MS / seconds
        } else {
            0.0
        },
    }
}

/// The capacity measured on `cpus` (spinner `i` on `cpus[i]`) in `phases`;
/// None without a phase of one spinner and one of more (nothing to compare).
pub fn assess_capacity(
    cpus: &[u32],
    phase_ns: u64,
    phases: &[CapacityPhase],
) -> Option<CpuCapacity> {
    let n = phases.iter().map(|p| p.work.len() as u32).max()?;
    let of = |k: u32| -> Vec<&CapacityPhase> {
        phases
            .iter()
            .filter(|p| p.work.len() as u32 == k && p.elapsed_ns > 0)
            .collect()
    };
    let ones = of(1);
    if ones.is_empty() || n < 2 {
        return None;
    }
    let one = level(1, &ones, None).total_rate;
    let levels: Vec<CapacityLevel> = (1..=n)
        .map(|k| (k, of(k)))
        .filter(|(_, p)| !p.is_empty())
        .map(|(k, p)| level(k, &p, Some(one)))
        .collect();
    let last = levels.last()?;
    let before = levels.iter().rev().nth(1)?;
    let marginal = last.relative - before.relative;
    let finding = finding(last, marginal);
    Some(CpuCapacity {
        cpus: cpus.to_vec(),
        unit: WORK_UNIT.into(),
        phase_ns,
        effective_cpus: last.relative,
        marginal,
        finding,
        levels,
    })
}

fn finding(all: &CapacityLevel, marginal: f64) -> String {
    let n = all.busy_cpus;
    let gives = if (all.relative - 1.0).abs() < NOTHING {
        "about one CPU".to_string()
    } else {
        format!("about {:.1} CPUs", all.relative)
    };
    let last = if marginal < NOTHING {
        "the last busy vCPU adds about nothing".to_string()
    } else {
        format!("the last busy vCPU adds {marginal:.2} of a CPU")
    };
    let missing = f64::from(n) - all.relative;
    let steal_cpus = all.steal_ms_per_s / 1000.0;
    let steal = if missing > 0.2 && steal_cpus < missing / 2.0 {
        format!(
            "steal {:.1} ms/s: the host takes the capacity without accounting it as steal",
            all.steal_ms_per_s
        )
    } else {
        format!("steal {:.1} ms/s", all.steal_ms_per_s)
    };
    format!(
        "{n} busy vCPUs do {:.1}× the work of one: the host gives this VM {gives} now; {last} ({steal})",
        all.relative
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rounds` rounds of one phase per level, each spinner doing `rate(k)`
    /// units per second when `k` are busy.
    fn phases(n: u32, rounds: u32, per_thread: impl Fn(u32) -> u64) -> Vec<CapacityPhase> {
        schedule(n, n * rounds)
            .into_iter()
            .map(|k| CapacityPhase {
                elapsed_ns: 200_000_000,
                work: vec![per_thread(k) / 5; k as usize],
                steal_ticks: 0,
            })
            .collect()
    }

    #[test]
    fn the_schedule_interleaves_levels() {
        assert_eq!(schedule(2, 5), [1, 2, 1, 2, 1]);
        assert_eq!(schedule(3, 6), [1, 2, 3, 1, 2, 3]);
    }

    #[test]
    fn a_host_that_gives_one_cpu_adds_nothing_with_the_second() {
        // Two spinners each at half the speed of one alone.
        let c =
            assess_capacity(&[1, 0], 200_000_000, &phases(2, 3, |k| 1000 / u64::from(k))).unwrap();
        assert!((c.effective_cpus - 1.0).abs() < 1e-9, "{c:?}");
        assert!(c.marginal.abs() < 1e-9);
        assert_eq!(c.levels.len(), 2);
        assert!((c.levels[1].per_thread_rate - 500.0).abs() < 1e-6);
        assert!((c.levels[1].slowest_thread_rate - 500.0).abs() < 1e-6);
        assert!(
            c.finding.starts_with(
                "2 busy vCPUs do 1.0× the work of one: the host gives this VM about one CPU now; \
                 the last busy vCPU adds about nothing"
            ),
            "{}",
            c.finding
        );
        assert!(c.finding.contains("without accounting it as steal"));
    }

    #[test]
    fn full_and_partial_capacity_are_told_with_the_last_cpus_gain() {
        let full = assess_capacity(&[1, 0], 1, &phases(2, 2, |_| 1000)).unwrap();
        assert!((full.effective_cpus - 2.0).abs() < 1e-9);
        assert!((full.marginal - 1.0).abs() < 1e-9);
        assert!(full.finding.contains("about 2.0 CPUs"), "{}", full.finding);
        assert!(!full.finding.contains("without accounting"));
        // Three CPUs, the third adding half a CPU.
        let three = assess_capacity(
            &[1, 2, 0],
            1,
            &phases(3, 2, |k| [0, 1500, 1500, 1250][k as usize]),
        )
        .unwrap();
        assert!((three.marginal - 0.5).abs() < 0.01, "{three:?}");
        assert!(
            three.finding.contains("adds 0.50 of a CPU"),
            "{}",
            three.finding
        );
        // Steal that accounts for the loss is not called hidden.
        let mut stolen = phases(2, 2, |k| 1000 / u64::from(k));
        for p in stolen.iter_mut().filter(|p| p.work.len() == 2) {
            p.steal_ticks = 20; // 1 s of steal per 0.2 s phase: a whole CPU
        }
        let s = assess_capacity(&[1, 0], 1, &stolen).unwrap();
        assert!(!s.finding.contains("without accounting"), "{}", s.finding);
    }

    #[test]
    fn nothing_to_compare_is_no_result() {
        assert!(assess_capacity(&[0], 1, &[]).is_none());
        assert!(assess_capacity(&[0], 1, &phases(1, 3, |_| 1000)).is_none());
        let only_two: Vec<_> = phases(2, 2, |_| 1000)
            .into_iter()
            .filter(|p| p.work.len() == 2)
            .collect();
        assert!(assess_capacity(&[1, 0], 1, &only_two).is_none());
    }
}
