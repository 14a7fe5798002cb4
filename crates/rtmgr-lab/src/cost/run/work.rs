//! Running one piece of the offered work where a configuration puts Linux
//! tasks: a child process pinned to the configuration's CPUs, inside the NRT
//! cpuset when a partition is applied (entered before it runs, like the
//! loads), timed from its wait4 resource usage (McKenney §2.2 Table 1's
//! real/user/sys).

use super::configs::Placement;
use crate::cost::micro::{WorkerOutput, WorkerRequest, WORKER_COMMAND};
use crate::measure::spawn::{GroupChild, SpawnSpec};
use crate::measure::MeasureError;
use rtmgr_linux::partition::{self, Role};
use rtmgr_linux::Host;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How a child ended and what it cost.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timed {
    pub real_s: f64,
    pub user_s: f64,
    pub sys_s: f64,
    /// None when a signal ended it (or rtmgr stopped it).
    pub exit_code: Option<i32>,
}

/// Start `program args` at `placement`, wait for it (at most `limit`, or
/// until `stop`), and time it. Its output goes to `log`.
pub fn run_timed(
    host: &Host,
    placement: &Placement<'_>,
    program: &Path,
    args: Vec<String>,
    log: &Path,
    limit: Duration,
    stop: &AtomicBool,
) -> Result<Timed, MeasureError> {
    let enter = |pid: u32| -> Result<(), MeasureError> {
        match placement.applied {
            Some(a) => partition::enter(host, a, Role::Nrt, pid).map_err(|e| {
                MeasureError::Setup(format!("move the work into the NRT cpuset: {e}"))
            }),
            None => Ok(()),
        }
    };
    let logf = std::fs::File::create(log).map_err(|e| MeasureError::io("work log", e))?;
    let name = program.display().to_string();
    let t0 = Instant::now();
    let mut child = GroupChild::spawn(SpawnSpec {
        program: &name,
        args,
        cpus: Some(placement.cpus.clone()),
        sched_idle: false,
        log: Some(logf),
        before_run: placement.applied.map(|_| &enter as &dyn Fn(u32) -> _),
    })?;
    let end = t0 + limit;
    while !child.try_reap() {
        if Instant::now() >= end || stop.load(Ordering::Relaxed) {
            child.stop(libc::SIGKILL, Duration::ZERO)?;
            return Err(MeasureError::Setup(format!(
                "{name} did not finish within {limit:?}{}",
                if stop.load(Ordering::Relaxed) {
                    " (interrupted)"
                } else {
                    ""
                }
            )));
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let real_s = t0.elapsed().as_secs_f64();
    // Nothing of the group may outlive it (e.g. a build's stray children).
    child.stop(libc::SIGKILL, Duration::ZERO)?;
    let u = child.usage().unwrap_or_default();
    Ok(Timed {
        real_s,
        user_s: u.user_ns as f64 / 1e9,
        sys_s: u.system_ns as f64 / 1e9,
        exit_code: u.exit_code(),
    })
}

/// One `rtmgr __cost …` worker at `placement`: its figure.
pub fn run_worker(
    host: &Host,
    placement: &Placement<'_>,
    worker: &Path,
    req: &WorkerRequest,
    scratch: &Path,
    stop: &AtomicBool,
) -> Result<f64, MeasureError> {
    let budget = match req {
        WorkerRequest::Micro { budget, .. } | WorkerRequest::Jobs { budget, .. } => *budget,
    };
    let log: PathBuf = scratch.join("worker.log");
    let mut args = vec![WORKER_COMMAND.to_string()];
    args.extend(req.to_args());
    let limit = budget * 4 + Duration::from_secs(60);
    let t = run_timed(host, placement, worker, args, &log, limit, stop)?;
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    let parsed = text
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str::<WorkerOutput>(l).ok());
    match (t.exit_code, parsed) {
        (Some(0), Some(out)) => Ok(out.value),
        _ => Err(MeasureError::Setup(format!(
            "cost worker {:?} failed (exit {:?}): {}",
            req.to_args(),
            t.exit_code,
            text.lines().rev().take(3).collect::<Vec<_>>().join(" | ")
        ))),
    }
}
