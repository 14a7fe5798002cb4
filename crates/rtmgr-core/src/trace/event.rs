//! One line of a tracefs text trace (`trace`/`trace_pipe`), parsed into the
//! events that explain a late wake-up (ARTiS §3.1's question — what held the
//! CPU? — answered the way rtla timerlat's auto-analysis does): interrupt and
//! softirq handlers, interrupt vectors, context switches and wake-ups, system
//! call entries and exits, workqueue items, page faults. Timestamps are the
//! tracer's clock (rtmgr sets `mono`: CLOCK_MONOTONIC) at µs resolution.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A task's name as the kernel keeps it (at most 15 bytes), without allocating.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Comm {
    len: u8,
    bytes: [u8; 16],
}

impl Comm {
    pub fn new(s: &str) -> Comm {
        let mut c = Comm::default();
        let n = s.len().min(16);
        c.bytes[..n].copy_from_slice(&s.as_bytes()[..n]);
        c.len = n as u8;
        c
    }
    pub fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("?")
    }
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl fmt::Display for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Comm {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Comm {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Comm, D::Error> {
        Ok(Comm::new(&String::deserialize(d)?))
    }
}

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    IrqEntry {
        irq: u32,
        name: Comm,
    },
    IrqExit {
        irq: u32,
    },
    SoftirqEntry {
        vec: u8,
    },
    SoftirqExit {
        vec: u8,
    },
    /// An x86 interrupt vector handler (irq_vectors: local_timer, reschedule, …).
    VectorEntry {
        name: Comm,
    },
    VectorExit {
        name: Comm,
    },
    Switch {
        prev_pid: u32,
        prev_comm: Comm,
        /// prev_state starts with R (preempted, still runnable).
        prev_runnable: bool,
        next_pid: u32,
        next_comm: Comm,
    },
    Waking {
        pid: u32,
        target_cpu: u32,
    },
    SysEnter {
        nr: u32,
    },
    SysExit {
        nr: u32,
    },
    WorkStart {
        function: Comm,
    },
    WorkEnd,
    PageFault {
        user: bool,
    },
    /// The tracer lost events before this point (its buffer overran).
    Lost,
}

/// One event of one CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Event {
    pub cpu: u32,
    /// Tracer clock, ns (µs resolution in text traces).
    pub ts_ns: u64,
    /// The task current on the CPU when it was recorded.
    pub pid: u32,
    pub comm: Comm,
    pub kind: Kind,
}

/// The softirq vectors, by number (include/linux/interrupt.h).
pub const SOFTIRQ_NAMES: [&str; 10] = [
    "HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU",
];

/// The irq_vectors events (x86 interrupt vectors) a trace may carry.
const VECTORS: [&str; 9] = [
    "local_timer",
    "reschedule",
    "call_function",
    "call_function_single",
    "irq_work",
    "x86_platform_ipi",
    "error_apic",
    "spurious_apic",
    "thermal_apic",
];

fn field<'a>(fields: &'a str, key: &str) -> Option<&'a str> {
    let start = fields.find(key)? + key.len();
    let rest = &fields[start..];
    Some(rest.split_whitespace().next().unwrap_or(""))
}

/// The text between `key` and `until` (values that may hold spaces: comms).
fn between<'a>(fields: &'a str, key: &str, until: &str) -> Option<&'a str> {
    let start = fields.find(key)? + key.len();
    let end = fields[start..].find(until)? + start;
    Some(&fields[start..end])
}

fn num(s: Option<&str>) -> Option<u32> {
    s?.parse().ok()
}

/// "8068.824920" (seconds.microseconds, or more digits) → ns.
fn timestamp_ns(s: &str) -> Option<u64> {
    let (sec, frac) = s.split_once('.')?;
    let sec: u64 = sec.parse().ok()?;
    if frac.is_empty() || frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let scale = 10u64.pow(9 - frac.len() as u32);
    Some(sec * 1_000_000_000 + frac.parse::<u64>().ok()? * scale)
}

/// Parse one line of a text trace. Header lines (`#`), events rtmgr does not
/// use and damaged lines (a truncated read) give None.
pub fn parse_line(line: &str) -> Option<Event> {
    if line.trim_start().starts_with('#') {
        return None;
    }
    // "<comm>-<pid> [<cpu>] <flags> <ts>: <event>: <fields>"; comm may hold
    // spaces and dashes, so the "[cpu]" after the last "-pid" anchors it.
    let open = line.find(" [")?;
    let close = open + line[open..].find(']')?;
    let cpu: u32 = line[open + 2..close].trim().parse().ok()?;
    let task = line[..open].trim();
    let dash = task.rfind('-')?;
    let pid: u32 = task[dash + 1..].parse().ok()?;
    let comm = Comm::new(&task[..dash]);
    let rest = line[close + 1..].trim_start();
    // Optional flags column, then "ts: ".
    let colon = rest.find(": ")?;
    let ts_ns = timestamp_ns(rest[..colon].split_whitespace().last()?)?;
    let rest = &rest[colon + 2..];
    let (name, fields) = rest
        .split_once(": ")
        .unwrap_or((rest.trim_end_matches(':'), ""));
    let kind = match name.trim() {
        "irq_handler_entry" => Kind::IrqEntry {
            irq: num(field(fields, "irq="))?,
            name: Comm::new(field(fields, "name=")?),
        },
        "irq_handler_exit" => Kind::IrqExit {
            irq: num(field(fields, "irq="))?,
        },
        "softirq_entry" => Kind::SoftirqEntry {
            vec: num(field(fields, "vec="))?.try_into().ok()?,
        },
        "softirq_exit" => Kind::SoftirqExit {
            vec: num(field(fields, "vec="))?.try_into().ok()?,
        },
        "sched_switch" => Kind::Switch {
            prev_pid: num(field(fields, "prev_pid="))?,
            prev_comm: Comm::new(between(fields, "prev_comm=", " prev_pid=")?),
            prev_runnable: field(fields, "prev_state=")?.starts_with('R'),
            next_pid: num(field(fields, "next_pid="))?,
            next_comm: Comm::new(between(fields, "next_comm=", " next_pid=")?),
        },
        "sched_waking" | "sched_wakeup" => Kind::Waking {
            pid: num(field(fields, " pid=").or_else(|| field(fields, "pid=")))?,
            target_cpu: num(field(fields, "target_cpu=")).unwrap_or(cpu),
        },
        "sys_enter" => Kind::SysEnter {
            nr: num(field(fields, "NR "))?,
        },
        "sys_exit" => Kind::SysExit {
            nr: num(field(fields, "NR "))?,
        },
        "workqueue_execute_start" => Kind::WorkStart {
            function: Comm::new(field(fields, "function ")?),
        },
        "workqueue_execute_end" => Kind::WorkEnd,
        "page_fault_user" => Kind::PageFault { user: true },
        "page_fault_kernel" => Kind::PageFault { user: false },
        v => {
            let (base, entry) = if let Some(b) = v.strip_suffix("_entry") {
                (b, true)
            } else {
                (v.strip_suffix("_exit")?, false)
            };
            if !VECTORS.contains(&base) {
                return None;
            }
            let name = Comm::new(base);
            if entry {
                Kind::VectorEntry { name }
            } else {
                Kind::VectorExit { name }
            }
        }
    };
    Some(Event {
        cpu,
        ts_ns,
        pid,
        comm,
        kind,
    })
}

/// A system call's name on this architecture (x86_64 numbers on x86_64).
pub fn syscall_name(nr: u32) -> String {
    syscalls::Sysno::new(nr as usize)
        .map(|s| s.name().to_string())
        .unwrap_or_else(|| format!("syscall {nr}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_every_kind() {
        let e = parse_line("           sleep-9917    [001] d..4.  8068.824920: sched_waking: comm=sh pid=9914 prio=120 target_cpu=000").unwrap();
        assert_eq!((e.cpu, e.pid, e.comm.as_str()), (1, 9917, "sleep"));
        assert_eq!(e.ts_ns, 8_068_824_920_000);
        assert_eq!(
            e.kind,
            Kind::Waking {
                pid: 9914,
                target_cpu: 0
            }
        );
        let s = parse_line("   Web Content-3012  [000] d..2.  12.000001: sched_switch: prev_comm=Web Content prev_pid=3012 prev_prio=120 prev_state=R+ ==> next_comm=rtmgr-probe1.0 next_pid=77 next_prio=0").unwrap();
        assert_eq!(s.comm.as_str(), "Web Content");
        assert_eq!(
            s.kind,
            Kind::Switch {
                prev_pid: 3012,
                prev_comm: Comm::new("Web Content"),
                prev_runnable: true,
                next_pid: 77,
                next_comm: Comm::new("rtmgr-probe1.0"),
            }
        );
        let k = |l: &str| parse_line(l).map(|e| e.kind);
        assert_eq!(
            k("  <idle>-0 [001] d.h1.  8068.825184: irq_handler_entry: irq=36 name=virtio1-req.0"),
            Some(Kind::IrqEntry {
                irq: 36,
                name: Comm::new("virtio1-req.0")
            })
        );
        assert_eq!(
            k("  <idle>-0 [001] d.h1.  8068.825190: irq_handler_exit: irq=36 ret=handled"),
            Some(Kind::IrqExit { irq: 36 })
        );
        assert_eq!(
            k(" ksoftirqd/1-22 [001] ..s1.  1.5: softirq_entry: vec=1 [action=TIMER]"),
            Some(Kind::SoftirqEntry { vec: 1 })
        );
        assert_eq!(
            k("  stress-ng-123 [001] .....  8068.824984: sys_enter: NR 202 (0, 7ffe, 0, 37f, 0, 0)"),
            Some(Kind::SysEnter { nr: 202 })
        );
        assert_eq!(
            k("  stress-ng-123 [001] .....  8068.824990: sys_exit: NR 202 = 0"),
            Some(Kind::SysExit { nr: 202 })
        );
        assert_eq!(
            k("  <idle>-0 [001] d.h1.  2.000003: local_timer_entry: vector=236"),
            Some(Kind::VectorEntry {
                name: Comm::new("local_timer")
            })
        );
        assert_eq!(
            k(" kworker/1:1-40 [001] .....  3.0: workqueue_execute_start: work struct 0000000012345678: function vmstat_update"),
            Some(Kind::WorkStart { function: Comm::new("vmstat_update") })
        );
        assert_eq!(
            k("  cc1-9 [001] .....  3.0: page_fault_user: address=0x7f ip=0x40 error_code=0x6"),
            Some(Kind::PageFault { user: true })
        );
    }

    #[test]
    fn headers_unknown_and_truncated_lines_are_skipped() {
        assert!(parse_line("# tracer: nop").is_none());
        assert!(parse_line("").is_none());
        assert!(parse_line("  sh-1 [001] .....  8068.8249").is_none());
        assert!(parse_line("  sh-1 [001] .....  8068.824920: sys_enter: NR").is_none());
        assert!(parse_line(
            "  sh-1 [001] .....  8068.824920: sched_switch: prev_comm=sh prev_pid=1"
        )
        .is_none());
        assert!(parse_line("  sh-1 [001] .....  8068.824920: kmalloc: bytes_req=8").is_none());
        assert!(parse_line("garbage without brackets").is_none());
    }
}
