//! Placement over the RT CPUs (ARTiS §4; the Kubernetes CPU Manager's static
//! policy hands out whole CPUs, rtmgr hands out shares of them): first-fit
//! tries the RT CPUs in ascending order, worst-fit the least utilised first.
//! For a whole task set (`rtmgr admit`, the simulator) the tasks go in
//! decreasing utilisation (FFD / WFD).
//!
//! First-fit is the default, by measurement (`cargo run --release -p
//! rtmgr-core --example placement`, docs/protocol.md "Placement"): on random
//! mixed sets over 4 RT CPUs it admitted more tasks than worst-fit at every
//! load from 0.5 to 0.9 (online, as the daemon places: 95.7 % vs 91.0 % at
//! 0.5, 79.1 % vs 77.5 % at 0.9) and more whole sets, with no simulated
//! deadline miss under either. Worst-fit keeps more headroom on the fullest
//! CPU, but the per-CPU cap already reserves headroom (McKenney §5 rule 2),
//! and spreading puts every constrained-deadline FIFO reservation next to
//! SCHED_DEADLINE interference, which is what it then refuses.

use super::{Admission, AdmissionConfig, CpuLoad, Demand, Id, Refusal};
use crate::cpuset::CpuSet;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// The default: see the module documentation.
    #[default]
    FirstFit,
    WorstFit,
}

impl std::str::FromStr for Placement {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "first-fit" | "ff" | "ffd" => Ok(Placement::FirstFit),
            "worst-fit" | "wf" | "wfd" => Ok(Placement::WorstFit),
            _ => Err(format!(
                "unknown placement {s:?}: expected first-fit or worst-fit"
            )),
        }
    }
}

/// The order in which CPUs are tried.
pub(super) fn order(p: Placement, cpus: &[CpuLoad]) -> Vec<u32> {
    let mut v: Vec<(i64, u32)> = cpus
        .iter()
        .map(|c| (utilisation_rank(c.utilisation()), c.cpu))
        .collect();
    match p {
        Placement::FirstFit => v.sort_by_key(|&(_, c)| c),
        Placement::WorstFit => v.sort(),
    }
    v.into_iter().map(|(_, c)| c).collect()
}

/// Worst-fit's key: utilisations equal to 1e-9 tie, and the tie goes by CPU
/// number (W/P as a float makes equal shares differ in their last bits:
/// 3 × 0.038 < 0.114).
pub(super) fn utilisation_rank(u: f64) -> i64 {
    (u * 1e9).round() as i64
}

/// One task of a set: a name, its demand, how many threads, an optional CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetTask {
    pub name: String,
    pub demand: Demand,
    pub count: u32,
    pub cpu: Option<u32>,
}

/// What became of each task of a set.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SetVerdict {
    /// (task name, CPU), in the order the tasks were placed.
    pub placed: Vec<(String, u32)>,
    /// (task name, why no CPU could take it).
    pub refused: Vec<(String, Refusal)>,
    /// (CPU, total utilisation, SCHED_DEADLINE utilisation) after placement.
    pub cpus: Vec<(u32, f64, f64)>,
}

impl SetVerdict {
    pub fn all_admitted(&self) -> bool {
        self.refused.is_empty()
    }
}

/// Admit a whole task set on `rt_cpus`: pinned tasks first, then the others
/// in decreasing utilisation, each where the placement rule finds room.
/// Returns the verdict and the admission state it produced.
pub fn admit_set(
    cfg: AdmissionConfig,
    rt_cpus: &CpuSet,
    tasks: &[SetTask],
) -> (SetVerdict, Admission) {
    let mut adm = Admission::new(cfg, rt_cpus);
    let mut idx: Vec<usize> = (0..tasks.len()).collect();
    idx.sort_by(|&a, &b| {
        let (ta, tb) = (&tasks[a], &tasks[b]);
        tb.cpu
            .is_some()
            .cmp(&ta.cpu.is_some())
            .then(
                (tb.demand.utilisation() * f64::from(tb.count))
                    .total_cmp(&(ta.demand.utilisation() * f64::from(ta.count))),
            )
            .then(a.cmp(&b))
    });
    let mut verdict = SetVerdict {
        placed: Vec::new(),
        refused: Vec::new(),
        cpus: Vec::new(),
    };
    for i in idx {
        let t = &tasks[i];
        match adm.admit(i as Id, t.demand, t.count, t.cpu) {
            Ok(p) => verdict.placed.push((t.name.clone(), p.cpu)),
            Err(r) => verdict.refused.push((t.name.clone(), r)),
        }
    }
    verdict.cpus = adm
        .cpus()
        .iter()
        .map(|c| (c.cpu, c.utilisation(), c.hard_utilisation()))
        .collect();
    (verdict, adm)
}
