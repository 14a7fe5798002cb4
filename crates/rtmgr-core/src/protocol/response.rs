//! Responses: a grant, a refusal with its reason and numbers, an error, or
//! the answer to release/list/status. `{"v":1,"result":…,…}`.

use crate::admission::CpuRefusal;
use serde::{Deserialize, Serialize};

/// A response line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Response {
    pub v: u32,
    #[serde(flatten)]
    pub reply: Reply,
}

impl Response {
    pub fn new(reply: Reply) -> Self {
        Response {
            v: super::VERSION,
            reply,
        }
    }

    /// The same answer in the version the request spoke.
    pub fn in_version(mut self, v: u32) -> Self {
        self.v = v;
        self
    }

    /// One line of JSON with its newline.
    pub fn to_line(&self) -> String {
        let mut s = serde_json::to_string(self).expect("responses serialize");
        s.push('\n');
        s
    }

    pub fn error(code: ErrorCode, message: impl Into<String>) -> Self {
        Response::new(Reply::Error {
            code,
            message: message.into(),
        })
    }

    pub fn refused(reason: RefusalKind, message: impl Into<String>) -> Self {
        Response::new(Reply::Refused {
            reason,
            message: message.into(),
            cpus: Vec::new(),
            retry_after_ms: None,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Reply {
    /// The reservation is in effect.
    Granted {
        reservation: Box<ReservationInfo>,
    },
    /// Nothing was changed, for this reason.
    Refused {
        reason: RefusalKind,
        message: String,
        /// Admission refusals: why each CPU tried said no, with the numbers.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        cpus: Vec<CpuRefusal>,
        /// Rate refusals: when to ask again.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        retry_after_ms: Option<u64>,
    },
    Released {
        id: u64,
    },
    List {
        reservations: Vec<ReservationInfo>,
    },
    Status {
        status: Box<StatusInfo>,
    },
    /// The request could not be handled; nothing was changed.
    Error {
        code: ErrorCode,
        message: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RefusalKind {
    /// Admission control: the RT CPUs cannot take it (`cpus` has the numbers).
    Admission,
    /// The daemon's [[client]] policy does not allow it.
    Policy,
    /// Too many requests in this burst.
    Rate,
    /// Part of the request is not served by this version.
    NotServed,
    /// A named thread is not the caller's.
    Permission,
    /// An IRQ that cannot be steered (unknown, left alone by the partition, taken).
    Irq,
    /// Memory or cache the machine cannot give (the message has the numbers).
    Resource,
}

impl RefusalKind {
    /// Every kind, so a counter by kind can start with each at 0.
    pub const ALL: [RefusalKind; 7] = [
        RefusalKind::Admission,
        RefusalKind::Policy,
        RefusalKind::Rate,
        RefusalKind::NotServed,
        RefusalKind::Permission,
        RefusalKind::Irq,
        RefusalKind::Resource,
    ];
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    BadJson,
    TooLarge,
    UnsupportedVersion,
    UnknownOp,
    BadRequest,
    InvalidRequest,
    NotFound,
    /// A named thread or the caller exited during the grant.
    Gone,
    /// The daemon is stopping.
    ShuttingDown,
    /// The kernel refused a step of the grant; everything was undone.
    Os,
}

/// A reservation as `list` and a grant show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReservationInfo {
    pub id: u64,
    pub pid: u32,
    pub uid: u32,
    #[serde(default)]
    pub name: Option<String>,
    pub cpu: u32,
    /// "rt0" or "rt1:PRIO".
    pub class: String,
    /// "SCHED_DEADLINE" or "SCHED_FIFO".
    pub policy: String,
    pub period_ns: u64,
    pub budget_ns: u64,
    pub deadline_ns: u64,
    pub threads: Vec<u32>,
    #[serde(default)]
    pub irq: Option<u32>,
    /// Soft reservations: worst-case response time found by admission.
    #[serde(default)]
    pub response_ns: Option<u64>,
    /// RLIMIT_RTTIME (µs) and RLIMIT_MEMLOCK (bytes) set on the client.
    pub rttime_us: u64,
    pub memlock_bytes: u64,
    /// Locked memory counted for it against MemAvailable (issue 13).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memlock_reserved: Option<u64>,
    /// The I/O class its threads got, e.g. "rt:4" (None: left as it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub io_class: Option<String>,
    /// Its cache: the L3 ways it shares, or why it has none ("not available: …").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache: Option<String>,
    /// In a `granted` reply: the threads that were asleep (`S`, `D`) when
    /// granted. Their policy and bandwidth are in place already; each first
    /// runs under it, on its RT CPU, when it wakes (docs/protocol.md "When
    /// the policy takes effect"). Absent: none (and in `list`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub asleep: Vec<u32>,
    /// In a `granted` reply: the threads that were stopped (`T`, `t`, e.g.
    /// SIGSTOP) when granted: granted as the sleeping ones, they run when
    /// continued.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stopped: Vec<u32>,
    /// A hard reservation's threads that the kernel refused SCHED_DEADLINE
    /// where they waited (another CPU's run queue): placed on the RT CPU
    /// and at SCHED_FIFO 1 until each is first seen on its RT CPU's run
    /// queue, when the daemon sets SCHED_DEADLINE (docs/protocol.md "When
    /// the policy takes effect"). Absent: none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<u32>,
}

/// A pending thread in `status` (see `ReservationInfo::pending`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingStatus {
    pub tid: u32,
    /// Its reservation.
    pub id: u64,
    pub cpu: u32,
    /// Why it is still at SCHED_FIFO 1 although on its RT CPU (the kernel
    /// refused SCHED_DEADLINE there), if it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// One RT CPU in `status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CpuStatus {
    pub cpu: u32,
    pub online: bool,
    pub utilisation: f64,
    pub deadline_utilisation: f64,
    pub reservations: usize,
}

/// `status`: what the daemon owns and what it has done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct StatusInfo {
    pub daemon_pid: u32,
    pub uptime_s: f64,
    pub rt_cpus: String,
    pub nrt_cpus: String,
    pub layout: String,
    /// "per-cpu" when each RT CPU is its own root domain, else why not.
    pub root_domains: String,
    pub cap: f64,
    pub deadline_share: f64,
    pub placement: String,
    pub cpus: Vec<CpuStatus>,
    pub reservations: usize,
    pub requests: u64,
    pub granted: u64,
    pub refused: u64,
    pub errors: u64,
    pub balancer: String,
    /// Drift repaired since start: name → count.
    pub drift: std::collections::BTreeMap<String, u64>,
    /// Hard grants' threads found runnable without running for several
    /// periods and put back by setting their policy again, since start
    /// (docs/serve.md "Stranded threads"; absent from older daemons: 0).
    #[serde(default)]
    pub stranded_repaired: u64,
    /// Hard grants' threads granted at SCHED_FIFO 1 pending SCHED_DEADLINE
    /// since start (absent from older daemons: 0).
    #[serde(default)]
    pub pending_fallbacks: u64,
    /// Times the kernel refused a pending thread SCHED_DEADLINE on its RT
    /// CPU (EBUSY) since start.
    #[serde(default)]
    pub pending_refused: u64,
    /// Hard grants' threads held at SCHED_FIFO 1 until the 0-lag time of
    /// the SCHED_DEADLINE server they spent in an earlier grant, since
    /// start (docs/serve.md "Stranded threads"; 0 from older daemons).
    #[serde(default)]
    pub pending_held: u64,
    /// Windows of `loop_share::WINDOW_NS` in which the request loop used
    /// up its SCHED_FIFO budget and ran the rest at SCHED_OTHER, since
    /// start (docs/serve.md "What it does while it runs"; 0 from older
    /// daemons).
    #[serde(default)]
    pub loop_yields: u64,
    /// The threads pending now.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<PendingStatus>,
    /// Memory, I/O, cache and the starvation guard: resource → what is in
    /// place, or "not available: why" (issue 13).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub resources: std::collections::BTreeMap<String, String>,
    /// Live figures per RT CPU for `rtmgr top` (absent from older daemons).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<super::LiveStatus>,
}
