//! Why one wake-up was late (ARTiS §3.1, McKenney §2.1; rtla timerlat's
//! auto-analysis without the timerlat tracer): from the events of the measured
//! CPU, split the time between the release and the wake-up into what held the
//! CPU — interrupt and softirq handlers by name, the task that ran and in which
//! system call, workqueue items — and the time no event explains.

use super::event::{syscall_name, Comm, Event, Kind, SOFTIRQ_NAMES};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// One sample to explain: the probe thread `tid` on `cpu` was to wake at
/// `release_ns` and ran at `wake_ns` (tracer clock = CLOCK_MONOTONIC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sample {
    pub cpu: u32,
    pub tid: u32,
    pub release_ns: u64,
    pub wake_ns: u64,
}

impl Sample {
    pub fn latency_ns(&self) -> u64 {
        self.wake_ns.saturating_sub(self.release_ns)
    }
}

/// What held the CPU for part of a late wake-up.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(tag = "cause", rename_all = "snake_case")]
pub enum Cause {
    /// A device interrupt handler.
    Irq { name: String },
    /// A softirq, by vector (TIMER, NET_RX, RCU, …).
    Softirq { name: String },
    /// An interrupt vector's handler (local_timer, reschedule, call_function, …).
    Vector { name: String },
    /// A task in a system call: the kernel did not give the CPU back.
    Syscall { comm: String, syscall: String },
    /// A task in the kernel outside a system call (page fault, kernel thread).
    Kernel { comm: String },
    /// A task had the CPU in user mode and no event came. User mode can
    /// neither hold off the timer interrupt due at the release nor keep the
    /// CPU once the probe is woken, so this points at the hypervisor — but it
    /// is no evidence: the time becomes `Host` only when the steal counter or
    /// a silence beyond a tick shows the host (issue 21), else it stays here,
    /// unexplained, with the task that had the CPU named.
    Stalled { comm: String },
    /// A workqueue item (kworker).
    Work { function: String },
    /// The CPU was idle until the wake-up: the timer or the vCPU woke late.
    IdleWakeup,
    /// From the switch to the probe to its first instruction.
    Switch,
    /// No event at all, and no evidence of the host: unexplained.
    Unexplained,
    /// The hypervisor held the vCPU, on evidence: a busy CPU saw no event for
    /// longer than a scheduler tick (the time beyond the tick), or the CPU's
    /// steal counter advanced across the wake-up (its no-event time).
    Host,
    /// The tracer lost the events of this time (its buffer overran): unknown.
    TraceLost,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Irq { name } => write!(f, "irq {name}"),
            Cause::Softirq { name } => write!(f, "softirq {name}"),
            Cause::Vector { name } => write!(f, "vector {name}"),
            Cause::Syscall { comm, syscall } => write!(f, "{comm} in {syscall}()"),
            Cause::Kernel { comm } => write!(f, "{comm} in the kernel (no system call)"),
            Cause::Stalled { comm } => write!(
                f,
                "no event while {comm} had the CPU in user mode (unexplained)"
            ),
            Cause::Work { function } => write!(f, "workqueue {function}"),
            Cause::IdleWakeup => f.write_str("idle CPU woke late (timer, vCPU wake-up)"),
            Cause::Switch => f.write_str("switch to the probe"),
            Cause::Unexplained => f.write_str("no event (unexplained)"),
            Cause::Host => {
                f.write_str("host: the vCPU did not run (steal, no tick on a busy CPU, or an idle vCPU woken late)")
            }
            Cause::TraceLost => f.write_str("unknown: the tracer lost these events"),
        }
    }
}

/// One late sample and what its time went to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    pub sample: Sample,
    /// Causes with the ns each took, largest first; they add up to the latency.
    pub parts: Vec<(Cause, u64)>,
}

impl Attribution {
    /// The wake-up is the host's on evidence: its no-event time (user mode
    /// without events, no event at all, an idle CPU woken late) is the host's too.
    pub fn name_silence_host(&mut self) {
        let mut host = 0;
        self.parts.retain(|(c, ns)| {
            let silence = matches!(
                c,
                Cause::Stalled { .. } | Cause::Unexplained | Cause::Host | Cause::IdleWakeup
            );
            if silence {
                host += ns;
            }
            !silence
        });
        if host > 0 {
            self.parts.push((Cause::Host, host));
        }
        self.parts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    }
}

/// A handler still open this long before the release lost its exit event.
const STALE_HANDLER_NS: u64 = 10_000_000;

/// What the CPU is doing between two events.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Ctx {
    Irq(Comm),
    Softirq(u8),
    Vector(Comm),
    Work(Comm),
}

fn ctx_cause(c: Ctx) -> Cause {
    match c {
        Ctx::Irq(n) => Cause::Irq {
            name: n.to_string(),
        },
        Ctx::Softirq(v) => Cause::Softirq {
            name: SOFTIRQ_NAMES
                .get(v as usize)
                .map(|s| s.to_string())
                .unwrap_or_else(|| format!("vec {v}")),
        },
        Ctx::Vector(n) => Cause::Vector {
            name: n.to_string(),
        },
        Ctx::Work(f) => Cause::Work {
            function: f.to_string(),
        },
    }
}

/// The CPU's state as the events replay: current task, its mode, open handlers.
struct Replay {
    pid: u32,
    comm: Comm,
    /// Open system call per task (a task switched out in a syscall resumes in
    /// it); few tasks run in one window, so a small list.
    in_syscall: Vec<(u32, u32)>,
    faulting: Option<u32>,
    /// Open handlers, innermost last, with when they opened.
    stack: Vec<(Ctx, u64)>,
    /// The probe was woken (its wake-up was no longer pending).
    woken: bool,
}

impl Replay {
    fn cause_now(&self) -> Cause {
        if let Some(&(c, _)) = self.stack.last() {
            return ctx_cause(c);
        }
        let comm = self.comm.to_string();
        if self.pid == 0 {
            return if self.woken {
                Cause::Switch
            } else {
                Cause::IdleWakeup
            };
        }
        if let Some(&(_, nr)) = self.in_syscall.iter().find(|(p, _)| *p == self.pid) {
            return Cause::Syscall {
                comm,
                syscall: syscall_name(nr),
            };
        }
        if self.faulting == Some(self.pid) || comm.starts_with("kworker") {
            return Cause::Kernel { comm };
        }
        Cause::Stalled { comm }
    }

    fn apply(&mut self, e: &Event, probe: u32) {
        if self.pid != e.pid && !matches!(e.kind, Kind::Switch { .. }) {
            // Every event names the current task: trust it over a missed switch.
            self.pid = e.pid;
            self.comm = e.comm;
        }
        let t = e.ts_ns;
        match e.kind {
            Kind::IrqEntry { name, .. } => self.stack.push((Ctx::Irq(name), t)),
            Kind::SoftirqEntry { vec } => self.stack.push((Ctx::Softirq(vec), t)),
            Kind::VectorEntry { name } => self.stack.push((Ctx::Vector(name), t)),
            Kind::WorkStart { function } => self.stack.push((Ctx::Work(function), t)),
            Kind::IrqExit { .. } => self.pop(|c| matches!(c, Ctx::Irq(_))),
            Kind::SoftirqExit { .. } => self.pop(|c| matches!(c, Ctx::Softirq(_))),
            Kind::VectorExit { .. } => self.pop(|c| matches!(c, Ctx::Vector(_))),
            Kind::WorkEnd => self.pop(|c| matches!(c, Ctx::Work(_))),
            Kind::Switch {
                next_pid,
                next_comm,
                ..
            } => {
                self.pid = next_pid;
                self.comm = next_comm;
                self.faulting = None;
                self.stack.retain(|(c, _)| !matches!(c, Ctx::Work(_)));
            }
            Kind::Waking { pid, .. } if pid == probe => self.woken = true,
            Kind::Waking { .. } => {}
            Kind::SysEnter { nr } => {
                self.in_syscall.retain(|(p, _)| *p != e.pid);
                self.in_syscall.push((e.pid, nr));
                self.faulting = None;
            }
            Kind::SysExit { .. } => {
                self.in_syscall.retain(|(p, _)| *p != e.pid);
            }
            Kind::PageFault { user } => {
                if user {
                    self.faulting = Some(e.pid);
                }
            }
            Kind::Lost => {}
        }
    }

    /// Close the innermost handler of this kind (a truncated trace may have
    /// lost its entry: then nothing is open and nothing changes).
    fn pop(&mut self, is: impl Fn(&Ctx) -> bool) {
        if let Some(i) = self.stack.iter().rposition(|(c, _)| is(c)) {
            self.stack.truncate(i);
        }
    }

    /// Handlers open for longer than any handler runs lost their exit (a
    /// truncated or overrun trace): they must not take the blame.
    fn forget_stale(&mut self, now: u64) {
        self.stack
            .retain(|&(_, opened)| now.saturating_sub(opened) < STALE_HANDLER_NS);
    }
}

/// The state of a CPU just before a release, found by looking back: the task
/// on it, and the system call that task is in, if any.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuState {
    pub pid: u32,
    pub comm: Comm,
    pub syscall: Option<u32>,
}

/// Look back from the release through `newest_first` (the CPU's events before
/// it, newest first) for the current task and its open system call; give up
/// after `limit` events (then the task is known, its system call not).
pub fn state_before<'a>(
    newest_first: impl IntoIterator<Item = &'a Event>,
    cpu: u32,
    limit: usize,
) -> Option<CpuState> {
    let mut it = newest_first
        .into_iter()
        .filter(|e| e.cpu == cpu)
        .take(limit);
    let first = it.next()?;
    let mut st = match first.kind {
        Kind::Switch {
            next_pid,
            next_comm,
            ..
        } => CpuState {
            pid: next_pid,
            comm: next_comm,
            syscall: None,
        },
        _ => CpuState {
            pid: first.pid,
            comm: first.comm,
            syscall: None,
        },
    };
    if st.pid == 0 {
        return Some(st);
    }
    for e in std::iter::once(first).chain(it) {
        if e.pid != st.pid {
            continue;
        }
        match e.kind {
            Kind::SysEnter { nr } => {
                st.syscall = Some(nr);
                break;
            }
            Kind::SysExit { .. } => break,
            _ => {}
        }
    }
    Some(st)
}

/// How far before the release `attribute` replays events (for the
/// interrupt handlers open at the release).
pub const REPLAY_NS: u64 = 2_000_000;

/// A busy CPU takes a timer tick at least every scheduler tick (4 ms at
/// HZ=250, the default used when the kernel's HZ is not known): a longer
/// silence on a busy CPU means the (v)CPU did not run — the hypervisor.
pub const DEFAULT_TICK_NS: u64 = 4_000_000;

/// Was a task on the CPU (so its tick must come)? Not when idle, nor when
/// the state is unknown.
fn busy(c: &Cause) -> bool {
    !matches!(
        c,
        Cause::IdleWakeup | Cause::TraceLost | Cause::Unexplained | Cause::Host
    )
}

/// Explain one sample. `initial` is the CPU's state before the release (see
/// `state_before`); `events` are the CPU's events in time order from about
/// `REPLAY_NS` before the release to the wake-up.
pub fn attribute<'a>(
    sample: &Sample,
    initial: Option<CpuState>,
    events: impl IntoIterator<Item = &'a Event>,
    tick_ns: u64,
) -> Attribution {
    let (r, w) = (sample.release_ns, sample.wake_ns.max(sample.release_ns));
    let init = initial.unwrap_or(CpuState {
        pid: 0,
        comm: Comm::new("<idle>"),
        syscall: None,
    });
    let mut replay = Replay {
        pid: init.pid,
        comm: init.comm,
        in_syscall: init.syscall.map(|nr| (init.pid, nr)).into_iter().collect(),
        faulting: None,
        stack: Vec::new(),
        woken: false,
    };
    let mut parts: BTreeMap<Cause, u64> = BTreeMap::new();
    let mut add = |c: Cause, ns: u64| {
        if ns > 0 {
            *parts.entry(c).or_default() += ns;
        }
    };
    // A silence longer than a tick while the CPU was busy (a task on it, in
    // user mode or in the kernel): a tick was due and did not come, so the
    // vCPU did not run — evidence of the host for the time beyond one tick.
    let mut add_gap = |c: Cause, ns: u64| {
        if busy(&c) && ns > tick_ns {
            add(Cause::Host, ns - tick_ns);
            add(c, tick_ns);
        } else {
            add(c, ns);
        }
    };
    let mine = events.into_iter().filter(|e| e.cpu == sample.cpu);
    let mut t = r;
    let mut seen_any = false;
    let mut switched_in = None;
    let mut before = true;
    for e in mine {
        if e.ts_ns <= r {
            replay.apply(e, sample.tid);
            continue;
        }
        if before {
            replay.forget_stale(r);
            before = false;
        }
        if e.ts_ns > w {
            break;
        }
        seen_any = true;
        let before_lost = if e.kind == Kind::Lost {
            Cause::TraceLost
        } else {
            replay.cause_now()
        };
        add_gap(before_lost, e.ts_ns - t);
        t = e.ts_ns;
        replay.apply(e, sample.tid);
        if let Kind::Switch { next_pid, .. } = e.kind {
            if next_pid == sample.tid {
                switched_in = Some(e.ts_ns);
                break;
            }
        }
    }
    match switched_in {
        Some(s) => add_gap(Cause::Switch, w.saturating_sub(s)),
        // Nothing at all: a known busy CPU silent beyond a tick is evidence.
        None if !seen_any && initial.is_some() && busy(&replay.cause_now()) && w - r > tick_ns => {
            add_gap(replay.cause_now(), w - r)
        }
        None if !seen_any => add_gap(Cause::Unexplained, w - r),
        None => add_gap(replay.cause_now(), w.saturating_sub(t)),
    }
    let mut parts: Vec<(Cause, u64)> = parts.into_iter().collect();
    parts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    Attribution {
        sample: *sample,
        parts,
    }
}

/// Explain one sample from all the events of a trace (in time order): the
/// state before the release by looking back, then the replay.
pub fn attribute_in(sample: &Sample, events: &[Event], tick_ns: u64) -> Attribution {
    let split = events.partition_point(|e| e.ts_ns <= sample.release_ns);
    let replay_from = events.partition_point(|e| e.ts_ns + REPLAY_NS < sample.release_ns);
    let initial = state_before(events[..split].iter().rev(), sample.cpu, usize::MAX);
    attribute(sample, initial, &events[replay_from..], tick_ns)
}

#[cfg(test)]
mod tests;
