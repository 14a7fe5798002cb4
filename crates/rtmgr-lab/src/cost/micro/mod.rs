//! The work `rtmgr measure cost` offers in every configuration, run inside a
//! worker process (`rtmgr __cost …`) that rtmgr starts on the CPUs the
//! configuration leaves to Linux tasks: the micro-benchmarks of DROPS §5.1
//! Fig. 4 (`bench`) and the job mix of DROPS §5.2 Fig. 5 (`jobs`). The worker
//! prints one JSON line, `WorkerOutput`.

mod bench;
mod jobs;

pub use jobs::JOB_MIX;

use crate::cost::Better;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// The hidden subcommand of the rtmgr binary that runs `main`.
pub const WORKER_COMMAND: &str = "__cost";

/// A micro-benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MicroKind {
    NullSyscall,
    CtxSwitch,
    PipeLatency,
    PipeBandwidth,
    ForkExit,
    PageFault,
    UdpRoundTrip,
}

impl MicroKind {
    pub const ALL: [MicroKind; 7] = [
        MicroKind::NullSyscall,
        MicroKind::CtxSwitch,
        MicroKind::PipeLatency,
        MicroKind::PipeBandwidth,
        MicroKind::ForkExit,
        MicroKind::PageFault,
        MicroKind::UdpRoundTrip,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MicroKind::NullSyscall => "null-syscall",
            MicroKind::CtxSwitch => "ctx-switch",
            MicroKind::PipeLatency => "pipe-latency",
            MicroKind::PipeBandwidth => "pipe-bandwidth",
            MicroKind::ForkExit => "fork-exit",
            MicroKind::PageFault => "page-fault",
            MicroKind::UdpRoundTrip => "udp-rtt",
        }
    }

    pub fn what(self) -> &'static str {
        match self {
            MicroKind::NullSyscall => "getppid(), ns per call",
            MicroKind::CtxSwitch => {
                "two threads pinned to one CPU ping-pong a byte over two pipes, ns per switch (half a round trip)"
            }
            MicroKind::PipeLatency => {
                "two threads ping-pong a byte over two pipes, ns per round trip"
            }
            MicroKind::PipeBandwidth => "64 KiB writes through a pipe to a reader thread, MB/s",
            MicroKind::ForkExit => "fork(), the child _exit(0)s, the parent waits: ns each",
            MicroKind::PageFault => "first write to fresh anonymous 4 KiB pages, ns per page",
            MicroKind::UdpRoundTrip => {
                "one-byte UDP datagram to an echo thread on 127.0.0.1 and back, ns per round trip"
            }
        }
    }

    pub fn unit(self) -> &'static str {
        match self {
            MicroKind::PipeBandwidth => "MB/s",
            _ => "ns",
        }
    }

    pub fn better(self) -> Better {
        match self {
            MicroKind::PipeBandwidth => Better::Higher,
            _ => Better::Lower,
        }
    }

    pub fn parse(name: &str) -> Option<MicroKind> {
        MicroKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// What one worker process does.
#[derive(Debug, Clone, PartialEq)]
pub enum WorkerRequest {
    /// One micro-benchmark for `budget`.
    Micro { kind: MicroKind, budget: Duration },
    /// `concurrency` tasks running the job mix for `budget`, files in `dir`.
    Jobs {
        concurrency: u32,
        budget: Duration,
        dir: PathBuf,
    },
}

/// The worker's one line of output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerOutput {
    /// ns per operation or MB/s (micro), jobs per minute (jobs).
    pub value: f64,
}

impl WorkerRequest {
    /// The arguments after `WORKER_COMMAND` (read back by `parse`).
    pub fn to_args(&self) -> Vec<String> {
        match self {
            WorkerRequest::Micro { kind, budget } => vec![
                "micro".into(),
                kind.name().into(),
                budget.as_micros().to_string(),
            ],
            WorkerRequest::Jobs {
                concurrency,
                budget,
                dir,
            } => vec![
                "jobs".into(),
                concurrency.to_string(),
                budget.as_micros().to_string(),
                dir.display().to_string(),
            ],
        }
    }

    pub fn parse(args: &[String]) -> Result<WorkerRequest, String> {
        let us = |s: &String| {
            s.parse::<u64>()
                .map(Duration::from_micros)
                .map_err(|_| format!("bad budget {s:?} (µs)"))
        };
        match args {
            [m, kind, budget] if m == "micro" => Ok(WorkerRequest::Micro {
                kind: MicroKind::parse(kind)
                    .ok_or_else(|| format!("unknown micro-benchmark {kind:?}"))?,
                budget: us(budget)?,
            }),
            [j, c, budget, dir] if j == "jobs" => Ok(WorkerRequest::Jobs {
                concurrency: c.parse().map_err(|_| format!("bad concurrency {c:?}"))?,
                budget: us(budget)?,
                dir: PathBuf::from(dir),
            }),
            _ => Err(format!(
                "expected `micro NAME BUDGET_US` or `jobs N BUDGET_US DIR`, got {args:?}"
            )),
        }
    }
}

/// Run one request; its output as the JSON line to print.
pub fn run(req: &WorkerRequest) -> Result<WorkerOutput, String> {
    let value = match req {
        WorkerRequest::Micro { kind, budget } => {
            bench::measure(*kind, *budget).map_err(|e| format!("{}: {e}", kind.name()))?
        }
        WorkerRequest::Jobs {
            concurrency,
            budget,
            dir,
        } => {
            let (jobs, elapsed) =
                jobs::run_jobs(*concurrency, *budget, dir).map_err(|e| format!("job mix: {e}"))?;
            jobs as f64 * 60.0 / elapsed.as_secs_f64().max(1e-9)
        }
    };
    Ok(WorkerOutput { value })
}

/// The worker process's body: parse, run, print one JSON line.
pub fn main(args: &[String]) -> Result<(), String> {
    let out = run(&WorkerRequest::parse(args)?)?;
    println!(
        "{}",
        serde_json::to_string(&out).map_err(|e| e.to_string())?
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip_through_arguments() {
        let reqs = [
            WorkerRequest::Micro {
                kind: MicroKind::UdpRoundTrip,
                budget: Duration::from_millis(20),
            },
            WorkerRequest::Jobs {
                concurrency: 4,
                budget: Duration::from_millis(300),
                dir: PathBuf::from("/tmp/x"),
            },
        ];
        for r in reqs {
            assert_eq!(WorkerRequest::parse(&r.to_args()).unwrap(), r);
        }
        assert!(WorkerRequest::parse(&["micro".into(), "nope".into(), "1".into()]).is_err());
        assert!(WorkerRequest::parse(&[]).is_err());
        for k in MicroKind::ALL {
            assert_eq!(MicroKind::parse(k.name()), Some(k));
        }
    }

    /// Every benchmark runs and gives a positive figure (no timing is asserted).
    #[test]
    fn every_micro_benchmark_and_the_job_mix_run() {
        for kind in MicroKind::ALL {
            let out = run(&WorkerRequest::Micro {
                kind,
                budget: Duration::from_millis(5),
            })
            .unwrap();
            assert!(out.value > 0.0 && out.value.is_finite(), "{kind:?}");
        }
        let dir = tempfile::tempdir().unwrap();
        // Long enough that a task started late on a loaded machine still
        // finishes a job before the budget ends (5 ms was flaky under load).
        let out = run(&WorkerRequest::Jobs {
            concurrency: 2,
            budget: Duration::from_millis(200),
            dir: dir.path().to_path_buf(),
        })
        .unwrap();
        assert!(out.value > 0.0);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }
}
