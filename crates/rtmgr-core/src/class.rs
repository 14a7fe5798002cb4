//! The ARTiS task classes (ARTiS §2.1): RT0 (hard real time, top SCHED_FIFO
//! priority, bound to one RT CPU), RT1+ (soft real time, SCHED_FIFO 1..98, any
//! CPU) and Linux tasks (time-sharing, NRT CPUs). Also where each class may run.

use crate::cpuset::CpuSet;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// SCHED_FIFO priority of RT0 tasks: the top of the range on Linux.
pub const RT0_PRIORITY: u8 = 99;
/// Highest priority an RT1+ task may have (below RT0).
pub const RT1_MAX_PRIORITY: u8 = 98;
/// Default priority of an RT1+ task when none is given.
pub const RT1_DEFAULT_PRIORITY: u8 = 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "class", rename_all = "lowercase")]
pub enum TaskClass {
    Rt0,
    Rt1 { priority: u8 },
    Linux,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClassError {
    #[error("unknown class {0:?}: expected rt0, rt1[:PRIO] (PRIO 1..98) or linux")]
    Unknown(String),
    #[error("RT1+ priority {0} out of range 1..98 (99 is reserved for RT0)")]
    Priority(String),
}

impl TaskClass {
    /// SCHED_FIFO priority, or None for a time-sharing task.
    pub fn fifo_priority(&self) -> Option<u8> {
        match self {
            TaskClass::Rt0 => Some(RT0_PRIORITY),
            TaskClass::Rt1 { priority } => Some(*priority),
            TaskClass::Linux => None,
        }
    }
}

impl FromStr for TaskClass {
    type Err = ClassError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let (name, prio) = match lower.split_once(':') {
            Some((n, p)) => (n, Some(p)),
            None => (lower.as_str(), None),
        };
        match (name, prio) {
            ("rt0", None) => Ok(TaskClass::Rt0),
            ("rt1" | "rt1+", None) => Ok(TaskClass::Rt1 {
                priority: RT1_DEFAULT_PRIORITY,
            }),
            ("rt1" | "rt1+", Some(p)) => match p.parse::<u8>() {
                Ok(v) if (1..=RT1_MAX_PRIORITY).contains(&v) => Ok(TaskClass::Rt1 { priority: v }),
                _ => Err(ClassError::Priority(p.to_string())),
            },
            ("linux", None) => Ok(TaskClass::Linux),
            _ => Err(ClassError::Unknown(s.to_string())),
        }
    }
}

impl fmt::Display for TaskClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TaskClass::Rt0 => write!(f, "rt0"),
            TaskClass::Rt1 { priority } => write!(f, "rt1:{priority}"),
            TaskClass::Linux => write!(f, "linux"),
        }
    }
}

/// Why a placement request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("an RT0 task needs --cpu N: it is bound to exactly one RT CPU")]
    Rt0NeedsCpu,
    #[error("no partition is applied: run `rtmgr partition apply --rt-cpus LIST` first (RT0 tasks need an RT CPU)")]
    NoPartition,
    #[error("CPU {cpu} is not an RT CPU of the current partition (RT CPUs: {rt})")]
    NotRtCpu { cpu: u32, rt: CpuSet },
    #[error("CPU {cpu} already hosts RT0 task(s) {pids:?}; pass --share to put several RT0 tasks on one CPU (their schedulability is then your responsibility, ARTiS §2.1)")]
    Rt0Busy { cpu: u32, pids: Vec<u32> },
    #[error("CPU {cpu} is not online (online: {online})")]
    Offline { cpu: u32, online: CpuSet },
    #[error("Linux tasks run on the NRT CPUs ({nrt}); CPU {cpu} is an RT CPU")]
    LinuxOnRt { cpu: u32, nrt: CpuSet },
}

/// The partition as seen by `rtmgr run`: which CPUs are RT and NRT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionView {
    pub rt: CpuSet,
    pub nrt: CpuSet,
}

/// Decide the CPUs a task of `class` may run on.
/// `rt0_on_cpu` lists the RT0 tasks already bound to the requested CPU.
pub fn place(
    class: TaskClass,
    cpu: Option<u32>,
    share: bool,
    online: &CpuSet,
    partition: Option<&PartitionView>,
    rt0_on_cpu: &[u32],
) -> Result<CpuSet, PlacementError> {
    if let Some(c) = cpu {
        if !online.contains(c) {
            return Err(PlacementError::Offline {
                cpu: c,
                online: online.clone(),
            });
        }
    }
    match class {
        TaskClass::Rt0 => {
            let c = cpu.ok_or(PlacementError::Rt0NeedsCpu)?;
            let p = partition.ok_or(PlacementError::NoPartition)?;
            if !p.rt.contains(c) {
                return Err(PlacementError::NotRtCpu {
                    cpu: c,
                    rt: p.rt.clone(),
                });
            }
            if !share && !rt0_on_cpu.is_empty() {
                return Err(PlacementError::Rt0Busy {
                    cpu: c,
                    pids: rt0_on_cpu.to_vec(),
                });
            }
            Ok(CpuSet::single(c))
        }
        TaskClass::Rt1 { .. } => Ok(match cpu {
            Some(c) => CpuSet::single(c),
            None => online.clone(),
        }),
        TaskClass::Linux => {
            let nrt = partition
                .map(|p| p.nrt.clone())
                .unwrap_or_else(|| online.clone());
            match cpu {
                Some(c) if !nrt.contains(c) => Err(PlacementError::LinuxOnRt { cpu: c, nrt }),
                Some(c) => Ok(CpuSet::single(c)),
                None => Ok(nrt),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> PartitionView {
        PartitionView {
            rt: CpuSet::parse_list("2-3").unwrap(),
            nrt: CpuSet::parse_list("0-1").unwrap(),
        }
    }

    #[test]
    fn parses_classes() {
        assert_eq!("rt0".parse::<TaskClass>().unwrap(), TaskClass::Rt0);
        assert_eq!(
            "RT1:7".parse::<TaskClass>().unwrap(),
            TaskClass::Rt1 { priority: 7 }
        );
        assert_eq!(
            "rt1".parse::<TaskClass>().unwrap().fifo_priority(),
            Some(50)
        );
        assert_eq!("linux".parse::<TaskClass>().unwrap().fifo_priority(), None);
        for bad in ["rt1:99", "rt1:0", "rt1:x", "rt2", "linux:3", "rt0:99"] {
            assert!(bad.parse::<TaskClass>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn rt0_rules() {
        let online = CpuSet::parse_list("0-3").unwrap();
        let v = view();
        assert_eq!(
            place(TaskClass::Rt0, Some(2), false, &online, Some(&v), &[]).unwrap(),
            CpuSet::single(2)
        );
        assert!(matches!(
            place(TaskClass::Rt0, Some(0), false, &online, Some(&v), &[]),
            Err(PlacementError::NotRtCpu { .. })
        ));
        assert!(matches!(
            place(TaskClass::Rt0, Some(2), false, &online, Some(&v), &[42]),
            Err(PlacementError::Rt0Busy { .. })
        ));
        assert!(place(TaskClass::Rt0, Some(2), true, &online, Some(&v), &[42]).is_ok());
        assert_eq!(
            place(TaskClass::Rt0, Some(2), false, &online, None, &[]),
            Err(PlacementError::NoPartition)
        );
        assert_eq!(
            place(TaskClass::Rt0, None, false, &online, Some(&v), &[]),
            Err(PlacementError::Rt0NeedsCpu)
        );
        assert!(matches!(
            place(TaskClass::Rt0, Some(9), false, &online, Some(&v), &[]),
            Err(PlacementError::Offline { .. })
        ));
    }

    #[test]
    fn rt1_and_linux_rules() {
        let online = CpuSet::parse_list("0-3").unwrap();
        let v = view();
        let rt1 = TaskClass::Rt1 { priority: 10 };
        assert_eq!(
            place(rt1, None, false, &online, Some(&v), &[]).unwrap(),
            online
        );
        assert_eq!(
            place(rt1, Some(3), false, &online, Some(&v), &[]).unwrap(),
            CpuSet::single(3)
        );
        assert_eq!(
            place(TaskClass::Linux, None, false, &online, Some(&v), &[]).unwrap(),
            v.nrt
        );
        assert!(place(TaskClass::Linux, Some(3), false, &online, Some(&v), &[]).is_err());
        assert_eq!(
            place(TaskClass::Linux, None, false, &online, None, &[]).unwrap(),
            online
        );
    }
}
