//! The tail tracer (ARTiS §3.1; rtla timerlat's auto-analysis without the
//! timerlat tracer): while a latency probe runs, a private tracefs instance
//! records what happens on the measured CPUs; each probe thread hands its
//! late samples (at or above a floor) to the tracer through a wait-free
//! RT-FIFO, and the tracer explains each one from the events around it.

use super::tracefs::{Sink, TraceError, TraceSession, TraceSpec, TraceStats};
use crate::trace::attribute::{DEFAULT_TICK_NS, REPLAY_NS};
use crate::trace::{attribute, state_before, Attribution, Event, Sample};
use rtmgr_core::CpuSet;
use rtmgr_rt::fifo::{channel, Consumer, Producer};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The events that explain a delay; the kernel may lack some (then skipped).
pub const TAIL_EVENTS: [&str; 13] = [
    "irq/irq_handler_entry",
    "irq/irq_handler_exit",
    "irq/softirq_entry",
    "irq/softirq_exit",
    "irq_vectors",
    "sched/sched_switch",
    "sched/sched_waking",
    "raw_syscalls/sys_enter",
    "raw_syscalls/sys_exit",
    "workqueue/workqueue_execute_start",
    "workqueue/workqueue_execute_end",
    "exceptions/page_fault_user",
    "exceptions/page_fault_kernel",
];

/// How many events before a release the attribution looks through for the
/// CPU's state (the running task, its open system call).
const LOOKBACK_EVENTS: usize = 200_000;
/// Events kept per CPU (a sample is explained within ~30 ms of its wake-up).
const KEEP_NS: u64 = 250_000_000;
/// A sample is explained once its CPU's trace has passed its wake-up by this
/// much, or — when the reader has caught up with every CPU and this CPU
/// records nothing more — once the clock has passed it by `IDLE_SETTLE_NS`
/// (an empty read does not prove the kernel has no unread events of that
/// time: a CI run explained a busy CPU's 5 ms with no event at all).
const SETTLE_NS: u64 = 2_000_000;
const IDLE_SETTLE_NS: u64 = KEEP_NS / 2;
/// Late samples in flight per probe thread.
const QUEUE: usize = 4096;

/// A probe thread's end of the tracer: samples at or above the floor go in.
pub struct LateTx {
    tx: Producer<Sample>,
    /// Fixed by the user (`--trace=100us`), or the thread's running p99.
    fixed_floor: Option<u64>,
    floor: u64,
    dropped: Arc<AtomicU64>,
}

impl LateTx {
    /// Hand over a sample if it is late enough; never blocks.
    #[inline]
    pub fn offer(&mut self, s: Sample) {
        if s.latency_ns() >= self.floor && self.tx.push(s).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// With no fixed floor, follow the thread's running p99 (the final
    /// threshold, p99.9, is above it).
    pub fn set_running_p99(&mut self, p99_ns: Option<i64>) {
        if self.fixed_floor.is_none() {
            self.floor = p99_ns.unwrap_or(0).max(0) as u64;
        }
    }
}

/// The kernel's scheduler tick (CONFIG_HZ), the default when unknown.
pub fn tick_ns() -> u64 {
    rtmgr_linux::status::kernel_config(&rtmgr_linux::Host::real())
        .and_then(|c| {
            c.lines()
                .find_map(|l| l.strip_prefix("CONFIG_HZ="))
                .and_then(|v| v.trim().parse::<u64>().ok())
        })
        .filter(|&hz| hz > 0)
        .map(|hz| 1_000_000_000 / hz)
        .unwrap_or(DEFAULT_TICK_NS)
}

#[derive(Default)]
struct State {
    tick_ns: u64,
    logs: BTreeMap<u32, VecDeque<Event>>,
    pending: Vec<Sample>,
    done: Vec<Attribution>,
    consumers: Vec<Consumer<Sample>>,
}

impl State {
    /// `events` is the next batch; an empty batch means the reader has caught
    /// up with every CPU (so nothing before `now` is still unread).
    fn take(&mut self, events: &[Event], now: u64) {
        let caught_up = events.is_empty();
        for e in events {
            self.logs.entry(e.cpu).or_default().push_back(*e);
        }
        for c in &mut self.consumers {
            while let Some(s) = c.pop() {
                self.pending.push(s);
            }
        }
        let mut i = 0;
        while i < self.pending.len() {
            let s = self.pending[i];
            let log = self.logs.entry(s.cpu).or_default();
            let newest = log.back().map_or(0, |e| e.ts_ns);
            if newest >= s.wake_ns + SETTLE_NS || (caught_up && now >= s.wake_ns + IDLE_SETTLE_NS) {
                let split = log.partition_point(|e| e.ts_ns <= s.release_ns);
                let from = log.partition_point(|e| e.ts_ns + REPLAY_NS < s.release_ns);
                let to = log.partition_point(|e| e.ts_ns <= s.wake_ns).max(from);
                let initial = state_before(log.range(..split).rev(), s.cpu, LOOKBACK_EVENTS);
                self.done
                    .push(attribute(&s, initial, log.range(from..to), self.tick_ns));
                self.pending.swap_remove(i);
            } else {
                i += 1;
            }
        }
        for log in self.logs.values_mut() {
            let newest = log.back().map_or(0, |e| e.ts_ns).max(now);
            while log.front().is_some_and(|e| e.ts_ns + KEEP_NS < newest) {
                log.pop_front();
            }
        }
    }
}

/// What the tail tracer recorded.
pub struct TailTrace {
    /// Every sample the probe handed over, explained.
    pub attributions: Vec<Attribution>,
    pub stats: TraceStats,
    /// Samples the probe could not hand over (the queue was full).
    pub dropped: u64,
}

/// A running tail tracer.
pub struct TailTracer {
    session: TraceSession,
    state: Arc<Mutex<State>>,
    dropped: Arc<AtomicU64>,
}

impl TailTracer {
    /// Trace `cpus`; one `LateTx` per probe thread (`threads` of them).
    pub fn start(
        cpus: &CpuSet,
        threads: usize,
        fixed_floor: Option<u64>,
    ) -> Result<(TailTracer, Vec<LateTx>), TraceError> {
        let dropped = Arc::new(AtomicU64::new(0));
        let mut txs = Vec::new();
        let mut consumers = Vec::new();
        for _ in 0..threads {
            let (tx, rx) = channel(QUEUE);
            consumers.push(rx);
            txs.push(LateTx {
                tx,
                fixed_floor,
                floor: fixed_floor.unwrap_or(0),
                dropped: dropped.clone(),
            });
        }
        let state = Arc::new(Mutex::new(State {
            consumers,
            tick_ns: tick_ns(),
            ..Default::default()
        }));
        let st = state.clone();
        let sink: Sink = Box::new(move |events: &[Event]| {
            if let Ok(mut s) = st.lock() {
                s.take(events, rtmgr_sys::time::mono_ns());
            }
        });
        let spec = TraceSpec {
            cpus: cpus.clone(),
            events: TAIL_EVENTS.iter().map(|e| e.to_string()).collect(),
            buffer_kb: 8192,
            pids: None,
            react_at_priority: None,
            events_only_with_pids: false,
        };
        let session = TraceSession::start(spec, sink)?;
        Ok((
            TailTracer {
                session,
                state,
                dropped,
            },
            txs,
        ))
    }

    /// Stop tracing (after the probe stopped) and explain what is left.
    pub fn finish(self) -> Result<TailTrace, TraceError> {
        let stats = self.session.finish()?;
        let mut s = self
            .state
            .lock()
            .map_err(|_| TraceError::Thread("tail state poisoned".into()))?;
        s.take(&[], u64::MAX / 2);
        Ok(TailTrace {
            attributions: std::mem::take(&mut s.done),
            stats,
            dropped: self.dropped.load(Ordering::Relaxed),
        })
    }
}
