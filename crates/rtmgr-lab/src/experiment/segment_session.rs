//! What `rtmgr evaluate` and `rtmgr evaluate --ablate` hold while their
//! segments run, in rounds (docs/architecture.md "Measuring"; McKenney §2.1
//! Fig. 3): the stop flag, the orchestrator kept off the RT CPU, mlockall,
//! /dev/cpu_dma_latency, and the one probe every segment runs.

use super::session::{lock_memory, stop_flag, STOP_SIGNALS};
use super::Result;
use crate::measure::probe::{max_fifo_priority, ProbeConfig};
use crate::measure::segment::Orchestrator;
use crate::measure::{unix_now_s, DmaLatencyGuard};
use crate::report::{PolicySpec, ProbeMode};
use rtmgr_core::CpuSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The set-up of a run of segments, held for as long as they run. Fields
/// drop in order: the probe, the latency guard, the orchestrator, the flag.
pub struct SegmentSession {
    /// The RT CPU's probe: SCHED_FIFO at the top priority, one segment long.
    pub probe: ProbeConfig,
    /// When the run started (Unix seconds), for the report's header.
    pub started: u64,
    pub dma: DmaLatencyGuard,
    /// Whether mlockall succeeded.
    pub mlocked: bool,
    _orchestrator: Orchestrator,
    pub stop: Arc<AtomicBool>,
}

impl SegmentSession {
    /// Catch SIGINT/SIGTERM, move this thread off `rt`, lock memory, hold
    /// /dev/cpu_dma_latency, and plan the probe of `rt_cpu` every `interval`
    /// for `segment`.
    pub fn open(
        rt: &CpuSet,
        online: &CpuSet,
        rt_cpu: u32,
        interval: Duration,
        segment: Duration,
    ) -> Result<SegmentSession> {
        let stop = stop_flag(&STOP_SIGNALS)?;
        let orchestrator = Orchestrator::enter(rt, online);
        let mlocked = lock_memory();
        let dma = DmaLatencyGuard::hold();
        let started = unix_now_s();
        let probe = ProbeConfig {
            mode: ProbeMode::Absolute,
            cpus: CpuSet::single(rt_cpu),
            interval_ns: interval.as_nanos() as u64,
            duration_ns: Some(segment.as_nanos() as u64),
            loops: None,
            policy: PolicySpec::Fifo {
                priority: max_fifo_priority(),
            },
            parallel: 1,
        };
        Ok(SegmentSession {
            probe,
            started,
            dma,
            mlocked,
            _orchestrator: orchestrator,
            stop,
        })
    }

    /// Has SIGINT or SIGTERM come?
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_probe_runs_one_segment_on_the_rt_cpu() {
        let online = CpuSet::parse_list("0-1").unwrap();
        let s = SegmentSession::open(
            &CpuSet::single(1),
            &online,
            1,
            Duration::from_micros(250),
            Duration::from_secs(2),
        )
        .unwrap();
        assert_eq!(s.probe.cpus, CpuSet::single(1));
        assert_eq!(s.probe.interval_ns, 250_000);
        assert_eq!(s.probe.duration_ns, Some(2_000_000_000));
        assert!(!s.stopped());
        assert!(s.started > 0);
    }
}
