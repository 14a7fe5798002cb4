//! Execution-time variation (ARTiS §3.2): a routine of N integer divisions
//! (default one million) run M times at the top SCHED_FIFO priority on one CPU.
//! Each run is released periodically so the busy thread never hits RT
//! throttling; T_min comes from an unloaded pass, and under load rtmgr reports
//! max − T_min in µs and % with the whole distribution.

use super::probe::{setup_rt_thread, Prepare};
use super::{mono_ns, sleep_until, MeasureError, Result};
use rtmgr_core::stats::Hist;
use rtmgr_linux::sched::Policy;
use rtmgr_sys::time::diff_ns;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

/// The ARTiS routine: `n` dependent integer divisions the compiler cannot fold.
#[inline(never)]
pub fn divisions(n: u64) -> u64 {
    let mut acc: u64 = std::hint::black_box(0x9E37_79B9_7F4A_7C15);
    let d = std::hint::black_box(7u64);
    for i in 0..n {
        acc = acc / d + (i | 0x1_0000_0000);
    }
    acc
}

pub struct ExecConfig {
    pub cpu: u32,
    pub divisions: u64,
    pub runs: u64,
    pub priority: u8,
}

/// Run the routine `runs` times on `cpu`, one run per release, with a period of
/// at least 3× the routine's duration (≤ ~35 % duty cycle: well inside RT throttling).
/// Returns the durations (ns) and whether the stop flag cut the pass short.
pub fn run_pass(
    cfg: &ExecConfig,
    stop: Arc<AtomicBool>,
    prepare: Option<Prepare>,
) -> Result<(Hist, bool)> {
    let (cpu, n, runs, prio) = (cfg.cpu, cfg.divisions, cfg.runs, cfg.priority);
    std::thread::Builder::new()
        .name(format!("rtmgr-exec{cpu}"))
        .spawn(move || -> Result<(Hist, bool)> {
            setup_rt_thread(cpu, Policy::Fifo { priority: prio }, prepare.as_ref())?;
            // Calibrate the period on a first, unrecorded run.
            let a = mono_ns();
            std::hint::black_box(divisions(n));
            let period = ((mono_ns() - a) * 3).max(1_000_000);
            let mut h = Hist::new();
            let mut next = mono_ns() + period;
            for _ in 0..runs {
                if stop.load(Relaxed) {
                    return Ok((h, true));
                }
                sleep_until(next);
                let t = mono_ns();
                std::hint::black_box(divisions(std::hint::black_box(n)));
                h.record(diff_ns(mono_ns(), t));
                next = (next + period).max(mono_ns() + period / 3);
            }
            Ok((h, false))
        })
        .map_err(|e| MeasureError::io("spawn exec thread", e))?
        .join()
        .map_err(|_| MeasureError::Setup("exec thread panicked".into()))?
}

/// max − T_min in ns and in % of T_min.
pub fn over_t_min(t_min: Option<i64>, max: Option<i64>) -> (Option<i64>, Option<f64>) {
    match (t_min, max) {
        (Some(t), Some(m)) if t > 0 => (Some(m - t), Some((m - t) as f64 * 100.0 / t as f64)),
        _ => (None, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routine_depends_on_n() {
        assert_ne!(divisions(10), divisions(11));
        assert_eq!(over_t_min(Some(1000), Some(1100)), (Some(100), Some(10.0)));
        assert_eq!(over_t_min(None, Some(1)), (None, None));
    }

    #[test]
    fn short_pass_records_every_run() {
        if !rtmgr_linux::sched::is_root() {
            eprintln!("skip: SCHED_FIFO needs root");
            return;
        }
        let cfg = ExecConfig {
            cpu: 0,
            divisions: 10_000,
            runs: 20,
            priority: 50,
        };
        let (h, cut) = run_pass(&cfg, Arc::new(AtomicBool::new(false)), None).unwrap();
        assert!(!cut);
        assert_eq!(h.len(), 20);
        assert!(h.min().unwrap() > 0);
    }
}
