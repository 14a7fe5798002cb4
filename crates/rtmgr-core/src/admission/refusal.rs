//! Why admission said no, with the numbers (ARTiS §4 admission per RT CPU;
//! McKenney §5 rule 2: the utilisation cap): one verdict per RT CPU tried,
//! shown to the client and counted by the daemon's metrics.

use super::{fmt_duration, Id};
use serde::{Deserialize, Serialize};

/// Why one CPU cannot take a reservation, with the numbers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "check", rename_all = "snake_case")]
pub enum CpuRefusal {
    /// Total utilisation over the cap.
    Utilisation {
        cpu: u32,
        would: f64,
        cap: f64,
    },
    /// SCHED_DEADLINE utilisation over the kernel's share.
    DeadlineShare {
        cpu: u32,
        would: f64,
        share: f64,
    },
    /// EDF processor demand in [0, at) exceeds `at`.
    EdfDemand {
        cpu: u32,
        at_ns: u64,
        demand_ns: u64,
    },
    /// A soft reservation's response time exceeds its deadline (`task`
    /// None = the one asked for).
    ResponseTime {
        cpu: u32,
        task: Option<Id>,
        response_ns: u64,
        deadline_ns: u64,
    },
    Offline {
        cpu: u32,
    },
    NotRt {
        cpu: u32,
    },
}

impl std::fmt::Display for CpuRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use CpuRefusal::*;
        match self {
            Utilisation { cpu, would, cap } => {
                write!(f, "CPU {cpu}: U would be {would:.2} > cap {cap:.2}")
            }
            DeadlineShare { cpu, would, share } => write!(
                f,
                "CPU {cpu}: SCHED_DEADLINE U would be {would:.2} > the kernel's share {share:.2} (sched_rt_runtime_us / sched_rt_period_us)"
            ),
            EdfDemand {
                cpu,
                at_ns,
                demand_ns,
            } => write!(
                f,
                "CPU {cpu}: EDF demand {} within {} > {}",
                fmt_duration(*demand_ns),
                fmt_duration(*at_ns),
                fmt_duration(*at_ns)
            ),
            ResponseTime {
                cpu,
                task,
                response_ns,
                deadline_ns,
            } => {
                let who = match task {
                    Some(id) => format!("τ{id}"),
                    None => "the new reservation".into(),
                };
                let r = if *response_ns == u64::MAX {
                    "unbounded".into()
                } else {
                    fmt_duration(*response_ns)
                };
                write!(
                    f,
                    "CPU {cpu}: response time of {who} {r} > deadline {}",
                    fmt_duration(*deadline_ns)
                )
            }
            Offline { cpu } => write!(f, "CPU {cpu}: offline"),
            NotRt { cpu } => write!(f, "CPU {cpu}: not an RT CPU"),
        }
    }
}

/// A refusal: why each CPU tried could not take the reservation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refusal {
    pub cpus: Vec<CpuRefusal>,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.cpus.is_empty() {
            return f.write_str("no RT CPU");
        }
        let parts: Vec<String> = self.cpus.iter().map(|c| c.to_string()).collect();
        f.write_str(&parts.join("; "))
    }
}
