//! The live half of ARTiS §2.2's migration trigger: ARTiS catches a guest in
//! preempt_disable() and migrates it; from user space rtmgr watches the RT
//! CPUs with a private tracefs instance that records only the guests' kernel
//! entries (system calls, page faults) and sends a guest to the NRT CPUs the
//! moment one is read — within a few ms of the entry, not at the next sample.
//! The balancer learns of each entry at its next step (Fig. 3's history).

use super::mover::Evictor;
use crate::trace::{TraceError, TraceSession, TraceSpec, TraceStats};
use rtmgr_core::trace::{Event, Kind};
use rtmgr_core::CpuSet;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// A guest seen entering the kernel on its RT CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    pub tid: u32,
    pub cpu: u32,
    pub ts_ns: u64,
    /// The system call, or None for a page fault.
    pub syscall: Option<u32>,
    /// The eviction failed (the task may have exited).
    pub evict_failed: bool,
    /// From the entry to the eviction (the affinity change), ns.
    pub delay_ns: u64,
}

#[derive(Default)]
struct Shared {
    /// Watched guests: tid → its RT CPU.
    watched: BTreeMap<u32, u32>,
    /// Evicted since they were last watched (one eviction per lend).
    evicted: BTreeSet<u32>,
    entries: Vec<Entry>,
}

/// The running watch.
pub struct EntryWatch {
    session: TraceSession,
    shared: Arc<Mutex<Shared>>,
    pids: Vec<u32>,
}

impl EntryWatch {
    /// Watch `rt`: kernel entries of the tasks named later by `watch`.
    pub fn start(rt: &CpuSet, evictor: Evictor) -> Result<EntryWatch, TraceError> {
        let shared: Arc<Mutex<Shared>> = Arc::default();
        let sh = shared.clone();
        let sink = Box::new(move |events: &[Event]| {
            let Ok(mut s) = sh.lock() else { return };
            for e in events {
                let syscall = match e.kind {
                    Kind::SysEnter { nr } => Some(nr),
                    Kind::PageFault { .. } => None,
                    _ => continue,
                };
                if s.watched.get(&e.pid) != Some(&e.cpu) || !s.evicted.insert(e.pid) {
                    continue;
                }
                let evict_failed = evictor.evict(e.pid).is_err();
                s.entries.push(Entry {
                    tid: e.pid,
                    cpu: e.cpu,
                    ts_ns: e.ts_ns,
                    syscall,
                    evict_failed,
                    delay_ns: rtmgr_sys::time::mono_ns().saturating_sub(e.ts_ns),
                });
            }
        });
        let spec = TraceSpec {
            cpus: rt.clone(),
            events: vec![
                "raw_syscalls/sys_enter".into(),
                "exceptions/page_fault_user".into(),
            ],
            buffer_kb: 256,
            pids: Some(Vec::new()),
            // React at once, above the ordinary work on the NRT CPUs.
            react_at_priority: Some(1),
            // No system-call tax on the machine while no guest is lent.
            events_only_with_pids: true,
        };
        Ok(EntryWatch {
            session: TraceSession::start(spec, sink)?,
            shared,
            pids: Vec::new(),
        })
    }

    /// The guests to watch now (tid → RT CPU); the tracer records only them.
    pub fn watch(&mut self, guests: &BTreeMap<u32, u32>) {
        let pids: Vec<u32> = guests.keys().copied().collect();
        if let Ok(mut s) = self.shared.lock() {
            // A task no longer watched may be lent again later: forget its eviction.
            s.evicted.retain(|t| guests.contains_key(t));
            s.watched = guests.clone();
        }
        if pids != self.pids {
            self.session.set_pids(pids.clone());
            self.pids = pids;
        }
    }

    /// The entries seen since the last call.
    pub fn take(&self) -> Vec<Entry> {
        self.shared
            .lock()
            .map(|mut s| std::mem::take(&mut s.entries))
            .unwrap_or_default()
    }

    pub fn finish(self) -> Result<TraceStats, TraceError> {
        self.session.finish()
    }
}
