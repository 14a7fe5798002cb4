//! Decoding `trace_pipe_raw` pages (the ring buffer's sub-buffers) into the
//! tracer's events: ns timestamps, and no text formatting in the kernel, so
//! the tracer keeps up with millions of events per second. Layouts come from
//! tracefs's own format files (`format.rs`). Pure: bytes in, events out.

use super::event::{Comm, Event, Kind};
use super::format::{EventFormat, Field, PageHeader};
use std::collections::HashMap;

/// The page header's commit field carries "events were lost before this
/// page" flags above the data length.
const MISSED_EVENTS: u64 = 1 << 31;
const MISSED_STORED: u64 = 1 << 30;

#[derive(Debug, Clone, Copy)]
enum Decode {
    IrqEntry {
        irq: Field,
        name: Field,
    },
    IrqExit {
        irq: Field,
    },
    SoftirqEntry {
        vec: Field,
    },
    SoftirqExit {
        vec: Field,
    },
    Vector {
        name: Comm,
        entry: bool,
    },
    Switch {
        prev_comm: Field,
        prev_pid: Field,
        prev_state: Field,
        next_comm: Field,
        next_pid: Field,
    },
    Waking {
        comm: Field,
        pid: Field,
        target_cpu: Field,
    },
    SysEnter {
        id: Field,
    },
    SysExit {
        id: Field,
    },
    WorkStart {
        function: Field,
    },
    WorkEnd,
    PageFault {
        user: bool,
    },
}

fn decode_for(f: &EventFormat) -> Option<Decode> {
    let g = |n: &str| f.field(n);
    Some(match f.name.as_str() {
        "irq_handler_entry" => Decode::IrqEntry {
            irq: g("irq")?,
            name: g("name")?,
        },
        "irq_handler_exit" => Decode::IrqExit { irq: g("irq")? },
        "softirq_entry" => Decode::SoftirqEntry { vec: g("vec")? },
        "softirq_exit" => Decode::SoftirqExit { vec: g("vec")? },
        "sched_switch" => Decode::Switch {
            prev_comm: g("prev_comm")?,
            prev_pid: g("prev_pid")?,
            prev_state: g("prev_state")?,
            next_comm: g("next_comm")?,
            next_pid: g("next_pid")?,
        },
        "sched_waking" | "sched_wakeup" => Decode::Waking {
            comm: g("comm")?,
            pid: g("pid")?,
            target_cpu: g("target_cpu")?,
        },
        "sys_enter" => Decode::SysEnter { id: g("id")? },
        "sys_exit" => Decode::SysExit { id: g("id")? },
        "workqueue_execute_start" => Decode::WorkStart {
            function: g("function")?,
        },
        "workqueue_execute_end" => Decode::WorkEnd,
        "page_fault_user" => Decode::PageFault { user: true },
        "page_fault_kernel" => Decode::PageFault { user: false },
        n => {
            let (base, entry) = match n.strip_suffix("_entry") {
                Some(b) => (b, true),
                None => (n.strip_suffix("_exit")?, false),
            };
            Decode::Vector {
                name: Comm::new(base),
                entry,
            }
        }
    })
}

/// What a decoded page said besides its events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageInfo {
    pub events: usize,
    /// The kernel lost events before this page (reader too slow).
    pub missed_before: bool,
    /// How many, when the kernel stored the count.
    pub missed: u64,
}

/// Turns raw pages into events, remembering task names from context switches
/// and wake-ups (raw records carry only the current task's pid).
pub struct Decoder {
    header: PageHeader,
    by_id: HashMap<u16, Decode>,
    comms: HashMap<u32, Comm>,
    /// Kernel symbols (address, name), sorted, for workqueue functions.
    symbols: Vec<(u64, String)>,
    common_pid: Field,
}

impl Decoder {
    pub fn new(
        header: PageHeader,
        formats: &[EventFormat],
        mut symbols: Vec<(u64, String)>,
    ) -> Decoder {
        symbols.sort();
        let common_pid = formats
            .iter()
            .find_map(|f| f.field("common_pid"))
            .unwrap_or(Field {
                offset: 4,
                size: 4,
                signed: true,
                data_loc: false,
            });
        Decoder {
            header,
            by_id: formats
                .iter()
                .filter_map(|f| Some((f.id, decode_for(f)?)))
                .collect(),
            comms: HashMap::new(),
            symbols,
            common_pid,
        }
    }

    /// The name known for a task ("?" when none is yet).
    pub fn comm_of(&self, pid: u32) -> Comm {
        if pid == 0 {
            return Comm::new("<idle>");
        }
        self.comms
            .get(&pid)
            .copied()
            .unwrap_or_else(|| Comm::new("?"))
    }

    fn symbol(&self, addr: u64) -> Comm {
        let i = self.symbols.partition_point(|(a, _)| *a <= addr);
        match i.checked_sub(1).map(|i| &self.symbols[i]) {
            Some((_, n)) => Comm::new(n),
            None => Comm::new(&format!("{addr:x}")),
        }
    }

    /// Name a task the caller learned of elsewhere (/proc/<pid>/comm).
    pub fn learn_comm(&mut self, pid: u32, comm: &str) {
        self.comms.insert(pid, Comm::new(comm));
    }

    /// Tasks seen in records whose names are not known yet.
    pub fn unnamed(&self, events: &[Event]) -> Vec<u32> {
        let mut v: Vec<u32> = events
            .iter()
            .filter(|e| e.pid != 0 && !self.comms.contains_key(&e.pid))
            .map(|e| e.pid)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Append the events of one page of `cpu` to `out`.
    pub fn page(&mut self, cpu: u32, page: &[u8], out: &mut Vec<Event>) -> PageInfo {
        let mut info = PageInfo::default();
        let (Some(mut ts), Some(commit)) = (
            self.header.timestamp.read_u64(page),
            self.header.commit.read_u64(page),
        ) else {
            return info;
        };
        info.missed_before = commit & MISSED_EVENTS != 0;
        let len = (commit & (MISSED_STORED - 1)) as usize;
        let start = self.header.data_offset;
        let end = (start + len).min(page.len());
        if commit & MISSED_STORED != 0 {
            if let Some(b) = page.get(end..end + 8) {
                info.missed = u64::from_ne_bytes(b.try_into().unwrap_or_default());
            }
        }
        let word = |at: usize| -> Option<u32> {
            Some(u32::from_ne_bytes(page.get(at..at + 4)?.try_into().ok()?))
        };
        if info.missed_before {
            out.push(Event {
                cpu,
                ts_ns: ts,
                pid: 0,
                comm: Comm::new("?"),
                kind: Kind::Lost,
            });
        }
        let mut pos = start;
        while pos + 4 <= end {
            let Some(h) = word(pos) else { break };
            let (type_len, delta) = (h & 31, (h >> 5) as u64);
            match type_len {
                29 => {
                    if delta == 0 {
                        break; // the rest of the page is padding
                    }
                    let Some(n) = word(pos + 4) else { break };
                    ts += delta;
                    pos += 4 + n as usize;
                }
                30 => {
                    let Some(hi) = word(pos + 4) else { break };
                    ts += delta | (hi as u64) << 27;
                    pos += 8;
                }
                31 => {
                    let Some(hi) = word(pos + 4) else { break };
                    let abs = delta | (hi as u64) << 27;
                    ts = abs | (ts & !((1u64 << 59) - 1));
                    pos += 8;
                }
                _ => {
                    let (data, size) = if type_len == 0 {
                        let Some(n) = word(pos + 4) else { break };
                        (pos + 8, (n as usize).saturating_sub(4))
                    } else {
                        (pos + 4, type_len as usize * 4)
                    };
                    ts += delta;
                    pos = data + size;
                    let Some(rec) = page.get(data..data + size) else {
                        break;
                    };
                    if let Some(e) = self.record(cpu, ts, rec) {
                        out.push(e);
                        info.events += 1;
                    }
                }
            }
        }
        info
    }

    fn record(&mut self, cpu: u32, ts_ns: u64, rec: &[u8]) -> Option<Event> {
        let id = u16::from_ne_bytes(rec.get(0..2)?.try_into().ok()?);
        let d = *self.by_id.get(&id)?;
        let pid = self.common_pid.read_u64(rec)? as u32;
        let u = |f: Field| f.read_u64(rec);
        let kind = match d {
            Decode::IrqEntry { irq, name } => Kind::IrqEntry {
                irq: u(irq)? as u32,
                name: Comm::new(name.read_str(rec)?),
            },
            Decode::IrqExit { irq } => Kind::IrqExit {
                irq: u(irq)? as u32,
            },
            Decode::SoftirqEntry { vec } => Kind::SoftirqEntry { vec: u(vec)? as u8 },
            Decode::SoftirqExit { vec } => Kind::SoftirqExit { vec: u(vec)? as u8 },
            Decode::Vector { name, entry } => {
                if entry {
                    Kind::VectorEntry { name }
                } else {
                    Kind::VectorExit { name }
                }
            }
            Decode::Switch {
                prev_comm,
                prev_pid,
                prev_state,
                next_comm,
                next_pid,
            } => {
                let (pp, np) = (u(prev_pid)? as u32, u(next_pid)? as u32);
                let (pc, nc) = (
                    Comm::new(prev_comm.read_str(rec)?),
                    Comm::new(next_comm.read_str(rec)?),
                );
                self.comms.insert(pp, pc);
                self.comms.insert(np, nc);
                Kind::Switch {
                    prev_pid: pp,
                    prev_comm: pc,
                    // TASK_RUNNING is 0: preempted, still runnable.
                    prev_runnable: u(prev_state)? & 0xff == 0,
                    next_pid: np,
                    next_comm: nc,
                }
            }
            Decode::Waking {
                comm,
                pid,
                target_cpu,
            } => {
                let p = u(pid)? as u32;
                self.comms.insert(p, Comm::new(comm.read_str(rec)?));
                Kind::Waking {
                    pid: p,
                    target_cpu: u(target_cpu)? as u32,
                }
            }
            Decode::SysEnter { id } => Kind::SysEnter { nr: u(id)? as u32 },
            Decode::SysExit { id } => Kind::SysExit { nr: u(id)? as u32 },
            Decode::WorkStart { function } => Kind::WorkStart {
                function: self.symbol(u(function)?),
            },
            Decode::WorkEnd => Kind::WorkEnd,
            Decode::PageFault { user } => Kind::PageFault { user },
        };
        Some(Event {
            cpu,
            ts_ns,
            pid,
            comm: self.comm_of(pid),
            kind,
        })
    }
}

#[cfg(test)]
mod tests;
