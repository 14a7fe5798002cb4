//! What every command that measures or changes the machine sets up first, in
//! this order (docs/architecture.md "Measuring"; McKenney §2.1 Fig. 3): root, the machine
//! lock, the applied partition, Ctrl-C handling, mlockall, /dev/cpu_dma_latency.

use super::error::{bad_input, Result};
use crate::load::LoadKind;
use crate::measure::load::EngineChoice;
use crate::measure::segment::LoadPlan;
use crate::measure::{unix_now_s, DmaLatencyGuard};
use crate::report::{Body, Header, Report, SCHEMA};
use rtmgr_core::CpuSet;
use rtmgr_linux::lock::MachineLock;
use rtmgr_linux::machine_access::{machine_lock, require_root};
use rtmgr_linux::partition::Applied;
use rtmgr_linux::Host;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Signals that set the returned flag instead of killing rtmgr, so every guard
/// runs and a partial report is written.
pub fn stop_flag(signals: &[i32]) -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for &sig in signals {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| super::Error::io("install signal handler", e))?;
    }
    Ok(stop)
}

/// SIGINT and SIGTERM: what a measurement stops on.
pub const STOP_SIGNALS: [i32; 2] = [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM];

/// Lock memory for the probe (McKenney §2.1 Fig. 3); false when not permitted.
pub fn lock_memory() -> bool {
    match rtmgr_linux::sched::mlockall() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("rtmgr: warning: mlockall failed ({e}): page faults may add latency");
            false
        }
    }
}

/// Validate measured CPUs against the online set.
pub fn check_cpus(what: &str, cpus: &CpuSet, online: &CpuSet) -> Result<()> {
    if cpus.is_empty() {
        return bad_input(format!("{what}: empty CPU list"));
    }
    let off = cpus.difference(online);
    if !off.is_empty() {
        return bad_input(format!(
            "{what}: CPUs {off} are not online (online: {online})"
        ));
    }
    Ok(())
}

/// The load beside a measurement, as asked for.
#[derive(Debug, Clone)]
pub struct LoadRequest {
    pub kind: LoadKind,
    /// Default: the online CPUs not measured (all of them if none is left).
    pub cpus: Option<CpuSet>,
    pub engine: EngineChoice,
}

/// A measurement's set-up, held for as long as it runs.
pub struct Session {
    pub host: Host,
    pub online: CpuSet,
    /// The user's partition, if one is applied.
    pub applied: Option<Applied>,
    pub stop: Arc<AtomicBool>,
    pub mlocked: bool,
    pub dma: DmaLatencyGuard,
    pub started: u64,
    _lock: Option<MachineLock>,
}

impl Session {
    pub fn open(host: Host, what: &str) -> Result<Session> {
        require_root(&host, what)?;
        let online = rtmgr_linux::cpus::online(&host)?;
        let lock = machine_lock(&host)?;
        let applied = rtmgr_linux::partition::current(
            &host,
            Path::new(rtmgr_linux::journal::DEFAULT_JOURNAL),
        )?;
        let stop = stop_flag(&STOP_SIGNALS)?;
        Ok(Session {
            host,
            online,
            applied,
            stop,
            mlocked: lock_memory(),
            dma: DmaLatencyGuard::hold(),
            started: unix_now_s(),
            _lock: lock,
        })
    }

    /// The CPU measured when none is named: the last RT CPU of an applied
    /// partition, else the last online CPU.
    pub fn default_cpu(&self) -> u32 {
        self.applied
            .as_ref()
            .and_then(|a| a.plan.rt.iter().last())
            .or_else(|| self.online.iter().last())
            .unwrap_or(0)
    }

    /// The load to run beside a measurement of `measured`: on the requested
    /// CPUs, or on the online CPUs not measured (all of them if none is left),
    /// by the requested engine (found here: a missing one is bad input).
    pub fn load_plan(
        &self,
        request: Option<&LoadRequest>,
        measured: &CpuSet,
    ) -> Result<Option<LoadPlan>> {
        let Some(request) = request else {
            return Ok(None);
        };
        let cpus = match &request.cpus {
            Some(c) => c.clone(),
            None => {
                let rest = self.online.difference(measured);
                if rest.is_empty() {
                    self.online.clone()
                } else {
                    rest
                }
            }
        };
        check_cpus("--load-cpus", &cpus, &self.online)?;
        let program = request.engine.resolve()?;
        Ok(Some(LoadPlan::simple(request.kind, program, cpus)))
    }

    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Why the report is partial, if it is.
    pub fn partial(&self) -> Option<String> {
        self.stopped().then(|| {
            "interrupted (SIGINT/SIGTERM): the data cover only part of the planned run".to_string()
        })
    }

    /// Wrap a body into a report with the header filled in.
    pub fn report(&self, body: Body, partial: Option<String>) -> Report {
        report(body, &self.online, self.started, partial)
    }
}

/// Wrap a body into a report with the header filled in.
pub fn report(body: Body, online: &CpuSet, started: u64, partial: Option<String>) -> Report {
    Report {
        header: Header::new(SCHEMA, started, crate::measure::host_info(online), partial),
        body,
    }
}
