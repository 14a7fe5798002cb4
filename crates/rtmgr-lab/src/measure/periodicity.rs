//! The periodicity experiment of DROPS §5.3: a high-priority timer task with a
//! 100 µs period alternately wakes two high-priority tasks; each logs its
//! activation time; the logs are merged and the time between consecutive
//! activations, its deviation from the period and the lost activations are
//! reported (DROPS Figs. 6–8). Wake-ups go through eventfds; a coalesced
//! wake-up (counter > 1) or a timer overrun is a lost activation.

use super::probe::{setup_rt_thread, Prepare};
use super::{mono_ns, sleep_until, MeasureError, Result};
use rtmgr_core::stats::Hist;
use rtmgr_linux::sched::Policy;
use rtmgr_sys::fd::EventCounter;
use std::sync::atomic::{AtomicBool, Ordering::*};
use std::sync::Arc;

/// Added to an eventfd to tell its task to finish.
const TERM: u64 = 1 << 40;

pub struct PeriodicityConfig {
    pub cpu: u32,
    pub period_ns: u64,
    pub duration_ns: u64,
    /// Priority of the timer task; the two tasks run one below.
    pub priority: u8,
}

pub struct PeriodicityOutcome {
    pub expected: u64,
    pub activations: u64,
    pub lost: u64,
    pub inter_activation: Hist,
    pub deviation: Hist,
    pub series_ns: Vec<i64>,
    pub interrupted: bool,
}

/// Keep at most this many points for the plot.
pub const SERIES_POINTS: usize = 20_000;

fn event_counter() -> Result<EventCounter> {
    EventCounter::new().map_err(|e| MeasureError::io("eventfd", e))
}

struct TaskLog {
    times: Vec<u64>,
    coalesced: u64,
}

pub fn run(
    cfg: &PeriodicityConfig,
    stop: Arc<AtomicBool>,
    prepare: Option<Prepare>,
) -> Result<PeriodicityOutcome> {
    if cfg.period_ns == 0 || cfg.priority < 2 {
        return Err(MeasureError::Setup(
            "period must be > 0 and priority ≥ 2".into(),
        ));
    }
    let expected_cap = (cfg.duration_ns / cfg.period_ns) as usize / 2 + 16;
    let fds = Arc::new([event_counter()?, event_counter()?]);
    let ready = Arc::new(std::sync::Barrier::new(3));
    let setup_failed = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for k in 0..2 {
        let (fds, ready, failed, prepare) = (
            fds.clone(),
            ready.clone(),
            setup_failed.clone(),
            prepare.clone(),
        );
        let (cpu, prio) = (cfg.cpu, cfg.priority - 1);
        let h = std::thread::Builder::new()
            .name(format!("rtmgr-periodic{k}"))
            .spawn(move || -> Result<TaskLog> {
                let r = setup_rt_thread(cpu, Policy::Fifo { priority: prio }, prepare.as_ref());
                if r.is_err() {
                    failed.store(true, SeqCst);
                }
                ready.wait();
                r?;
                Ok(record_activations(&fds[k], expected_cap))
            })
            .map_err(|e| MeasureError::io("spawn periodic task", e))?;
        tasks.push(h);
    }
    let (fds2, ready2, failed2) = (fds.clone(), ready.clone(), setup_failed.clone());
    let (cpu, prio, period, duration) = (cfg.cpu, cfg.priority, cfg.period_ns, cfg.duration_ns);
    let timer = std::thread::Builder::new()
        .name("rtmgr-periodic-timer".into())
        .spawn(move || -> Result<(u64, u64, bool)> {
            let r = setup_rt_thread(cpu, Policy::Fifo { priority: prio }, prepare.as_ref());
            if r.is_err() {
                failed2.store(true, SeqCst);
            }
            ready2.wait();
            let finish = |fds: &[EventCounter; 2]| {
                fds[0].add(TERM);
                fds[1].add(TERM);
            };
            if let Err(e) = r {
                finish(&fds2);
                return Err(e);
            }
            if failed2.load(SeqCst) {
                finish(&fds2);
                return Ok((0, 0, false));
            }
            let released = release(&fds2, &stop, period, duration);
            finish(&fds2);
            Ok(released)
        })
        .map_err(|e| MeasureError::io("spawn timer task", e))?;
    let timer_res = timer
        .join()
        .map_err(|_| MeasureError::Setup("timer task panicked".into()))?;
    let logs: Vec<Result<TaskLog>> = tasks
        .into_iter()
        .map(|h| {
            h.join()
                .unwrap_or_else(|_| Err(MeasureError::Setup("periodic task panicked".into())))
        })
        .collect();
    let (expected, _overruns, interrupted) = timer_res?;
    let mut times = Vec::new();
    for l in logs {
        let l = l?;
        times.extend(l.times);
    }
    Ok(summarise(times, cfg.period_ns, expected, interrupted))
}

/// One periodic task's log: when each activation woke it, until told to end.
fn record_activations(fd: &EventCounter, expected: usize) -> TaskLog {
    let mut log = TaskLog {
        times: Vec::with_capacity(expected),
        coalesced: 0,
    };
    loop {
        let v = fd.wait();
        let t = mono_ns();
        let real = v % TERM;
        if real > 0 {
            log.times.push(t);
            log.coalesced += real - 1;
        }
        if v >= TERM {
            return log;
        }
    }
}

/// Release the two tasks in turn every `period` for `duration` (DROPS §5.3):
/// activations released, those lost because the timer was late, and
/// whether a stop cut the run short.
fn release(
    fds: &[EventCounter; 2],
    stop: &AtomicBool,
    period: u64,
    duration: u64,
) -> (u64, u64, bool) {
    let t0 = mono_ns() + 1_000_000;
    let end = t0 + duration;
    let (mut next, mut k, mut overruns, mut interrupted) = (t0 + period, 0u64, 0u64, false);
    while next <= end {
        if stop.load(Relaxed) {
            interrupted = true;
            break;
        }
        sleep_until(next);
        fds[(k % 2) as usize].add(1);
        k += 1;
        let now = mono_ns();
        next += period;
        while next <= now && next <= end {
            // The timer itself was late: those activations are lost.
            overruns += 1;
            k += 1;
            next += period;
        }
    }
    (k, overruns, interrupted)
}

/// The inter-activation times and their deviation from the period.
fn summarise(
    mut times: Vec<u64>,
    period_ns: u64,
    expected: u64,
    interrupted: bool,
) -> PeriodicityOutcome {
    times.sort_unstable();
    let activations = times.len() as u64;
    let mut inter = Hist::new();
    let mut dev = Hist::new();
    let mut series = Vec::with_capacity(SERIES_POINTS.min(times.len()));
    for w in times.windows(2) {
        let d = (w[1] - w[0]) as i64;
        inter.record(d);
        dev.record(d - period_ns as i64);
        if series.len() < SERIES_POINTS {
            series.push(d);
        }
    }
    PeriodicityOutcome {
        expected,
        activations,
        lost: expected.saturating_sub(activations),
        inter_activation: inter,
        deviation: dev,
        series_ns: series,
        interrupted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_and_lost_add_up() {
        if !rtmgr_linux::sched::is_root() {
            eprintln!("skip: SCHED_FIFO needs root");
            return;
        }
        let cfg = PeriodicityConfig {
            cpu: 0,
            period_ns: 500_000,
            duration_ns: 100_000_000,
            priority: 50,
        };
        let o = run(&cfg, Arc::new(AtomicBool::new(false)), None).unwrap();
        assert_eq!(o.expected, 200);
        assert_eq!(o.activations + o.lost, o.expected);
        assert_eq!(o.inter_activation.len(), o.activations - 1);
        assert!(!o.interrupted);
    }
}
