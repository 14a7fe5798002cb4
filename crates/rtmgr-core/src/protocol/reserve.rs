//! The reserve request (DROPS §4.1: CPU time, interrupts, memory, I/O and
//! cache are given on request; budget-based RTAI §3: W every P): its fields,
//! and their validation into an admission demand. Locked memory, I/O class
//! and cache share (DROPS §4.3–4.4, issue 13) are validated here and served
//! by the daemon's resources (memory admission, ioprio, resctrl).

use super::{ErrorCode, ProtoError, RefusalKind};
use crate::admission::{taskset::kind_of_class, Demand};
use crate::class::TaskClass;
use serde::{Deserialize, Serialize};

/// Most threads one reservation may name.
pub const MAX_THREADS: usize = 64;
/// Longest reservation name.
pub const MAX_NAME: usize = 64;

/// An IRQ by number or by the name /proc/interrupts shows (e.g. "virtio3-rx").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum IrqRef {
    Number(u32),
    Name(String),
}

/// `{"v":1,"op":"reserve",…}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReserveRequest {
    pub period_ns: u64,
    pub budget_ns: u64,
    /// D ≤ P; default P.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ns: Option<u64>,
    /// "rt0" (hard: SCHED_DEADLINE) or "rt1[:PRIO]" (soft: SCHED_FIFO).
    #[serde(default = "default_class")]
    pub class: String,
    /// An RT CPU, or none for any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<u32>,
    /// Thread ids of the calling process (of `pid` when given); empty = its
    /// main thread.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<u32>,
    /// An existing process to reserve for instead of the caller (protocol
    /// v2): root's, or the caller's own when its rule has `existing_processes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    /// With `pid`: every thread it has at the grant (protocol v2).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_threads: bool,
    /// A label shown by `rtmgr reservations`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// An IRQ to steer to the reservation's CPU.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub irq: Option<IrqRef>,
    /// Locked memory the client needs, bytes: counted against MemAvailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memlock_bytes: Option<u64>,
    /// I/O class of the threads, "rt" or "be" (default: the daemon's config).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_class: Option<String>,
    /// Share of the last-level cache, 0..1: the threads join the RT cache
    /// group when its share is at least this (where resctrl exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_share: Option<f64>,
}

fn default_class() -> String {
    "rt0".into()
}

impl ReserveRequest {
    /// A request for the calling thread with D = P, class rt0.
    pub fn new(period_ns: u64, budget_ns: u64) -> Self {
        ReserveRequest {
            period_ns,
            budget_ns,
            deadline_ns: None,
            class: default_class(),
            cpu: None,
            threads: Vec::new(),
            pid: None,
            all_threads: false,
            name: None,
            irq: None,
            memlock_bytes: None,
            io_class: None,
            cache_share: None,
        }
    }

    /// Builder: for the existing process `pid`, its threads `tids` (empty:
    /// its main thread).
    pub fn for_process(mut self, pid: u32, tids: Vec<u32>) -> Self {
        self.pid = Some(pid);
        self.threads = tids;
        self
    }

    /// Builder: for every thread of the existing process `pid`.
    pub fn for_all_threads_of(mut self, pid: u32) -> Self {
        self.pid = Some(pid);
        self.all_threads = true;
        self
    }

    /// The protocol version this request needs: 2 when it names a process.
    pub fn min_version(&self) -> u32 {
        if self.pid.is_some() || self.all_threads {
            2
        } else {
            1
        }
    }

    /// Builder: the class, "rt0" or "rt1[:PRIO]".
    pub fn with_class(mut self, class: impl Into<String>) -> Self {
        self.class = class.into();
        self
    }

    /// Builder: locked memory the client needs (bytes), counted against
    /// MemAvailable and the client's rule.
    pub fn with_memlock(mut self, bytes: u64) -> Self {
        self.memlock_bytes = Some(bytes);
        self
    }

    /// Builder: the I/O class of the reservation's threads.
    pub fn with_io_class(mut self, class: IoClass) -> Self {
        self.io_class = Some(class.as_str().into());
        self
    }

    /// Builder: the share of the last-level cache the threads need, 0..1.
    pub fn with_cache_share(mut self, share: f64) -> Self {
        self.cache_share = Some(share);
        self
    }
}

/// A reserve request that passed validation.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidReserve {
    pub demand: Demand,
    pub class: TaskClass,
    pub cpu: Option<u32>,
    /// Empty = the caller's (the target's) main thread, unless `target`
    /// asks for all its threads.
    pub threads: Vec<u32>,
    /// An existing process instead of the caller.
    pub target: Option<Target>,
    pub name: Option<String>,
    pub irq: Option<IrqRef>,
    pub memlock_bytes: Option<u64>,
    pub io_class: Option<IoClass>,
    pub cache_share: Option<f64>,
}

/// The existing process a reservation is for (`rtmgr reserve --pid`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub pid: u32,
    /// Every thread it has at the grant.
    pub all_threads: bool,
}

/// The I/O class a reservation's threads get (ioprio).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoClass {
    /// IOPRIO_CLASS_RT: served before best-effort requests.
    Rt,
    /// IOPRIO_CLASS_BE: left with the time-sharing work.
    Be,
}

impl IoClass {
    /// Its name on the wire: "rt" or "be".
    pub fn as_str(self) -> &'static str {
        match self {
            IoClass::Rt => "rt",
            IoClass::Be => "be",
        }
    }
}

impl std::str::FromStr for IoClass {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "rt" => Ok(IoClass::Rt),
            "be" => Ok(IoClass::Be),
            _ => Err(format!("io_class {s:?}: \"rt\" or \"be\"")),
        }
    }
}

/// Either an error (the request is malformed) or a refusal (well-formed,
/// but asks what this daemon does not serve).
#[derive(Debug, Clone, PartialEq)]
pub enum Invalid {
    Error(ProtoError),
    Refused(RefusalKind, String),
}

impl ReserveRequest {
    /// Check everything that needs no machine state.
    pub fn validate(&self) -> Result<ValidReserve, Invalid> {
        let bad = |m: String| Invalid::Error(ProtoError::new(ErrorCode::InvalidRequest, m));
        let class: TaskClass = self.class.parse().map_err(|e| bad(format!("class: {e}")))?;
        let kind = kind_of_class(class).map_err(bad)?;
        let demand = Demand::new(self.period_ns, self.budget_ns, self.deadline_ns, kind)
            .map_err(|e| bad(e.to_string()))?;
        if self.threads.len() > MAX_THREADS {
            return Err(bad(format!(
                "{} threads named; at most {MAX_THREADS} per reservation",
                self.threads.len()
            )));
        }
        let mut seen = self.threads.clone();
        seen.sort_unstable();
        seen.dedup();
        if seen.len() != self.threads.len() {
            return Err(bad("a thread is named twice".into()));
        }
        if seen.contains(&0) || seen.iter().any(|&t| t > i32::MAX as u32) {
            return Err(bad("thread ids are positive kernel thread ids".into()));
        }
        let target = match (self.pid, self.all_threads) {
            (None, true) => return Err(bad("all_threads needs a pid".into())),
            (Some(pid), _) if pid == 0 || pid > i32::MAX as u32 => {
                return Err(bad(format!("pid {pid} is not a process id")))
            }
            (Some(_), true) if !self.threads.is_empty() => {
                return Err(bad("all_threads or threads, not both".into()))
            }
            (Some(pid), all_threads) => Some(Target { pid, all_threads }),
            (None, false) => None,
        };
        if let Some(n) = &self.name {
            if n.chars().count() > MAX_NAME || n.chars().any(char::is_control) {
                return Err(bad(format!(
                    "name: at most {MAX_NAME} characters, no control characters"
                )));
            }
        }
        if let Some(IrqRef::Name(n)) = &self.irq {
            if n.is_empty() || n.len() > MAX_NAME || n.chars().any(char::is_control) {
                return Err(bad(
                    "irq name: 1..64 characters, no control characters".into()
                ));
            }
        }
        if let Some(s) = self.cache_share {
            if !(s.is_finite() && (0.0..=1.0).contains(&s)) {
                return Err(bad(format!("cache_share {s} is not within 0..1")));
            }
        }
        let io_class = match &self.io_class {
            Some(c) => Some(c.parse::<IoClass>().map_err(bad)?),
            None => None,
        };
        Ok(ValidReserve {
            demand,
            class,
            cpu: self.cpu,
            threads: self.threads.clone(),
            target,
            name: self.name.clone(),
            irq: self.irq.clone(),
            memlock_bytes: self.memlock_bytes,
            io_class,
            cache_share: self.cache_share,
        })
    }
}
