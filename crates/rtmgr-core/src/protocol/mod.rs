//! The daemon's wire protocol (DROPS §4.1: resources are given to tasks on
//! request through a protocol): newline-delimited JSON over a Unix stream
//! socket, one request line → one response line, every message carrying the
//! protocol version `v`. Documented in docs/protocol.md. Pure: parsing and
//! validation here, sockets in rtmgr-linux (daemon) and rtmgr-rt (client).
//!
//! Every request gets a grant, a refusal with its reason and numbers, or an
//! error; the parser never panics on any input (fuzzed: fuzz/, see
//! docs/protocol.md "Fuzzing").

mod live;
mod reserve;
mod response;
#[cfg(test)]
mod tests;

pub use live::{Guest, LatencyWindow, Lending, LiveCpu, LiveStatus, LIVE_VERSION};
pub use reserve::{
    Invalid, IoClass, IrqRef, ReserveRequest, Target, ValidReserve, MAX_NAME, MAX_THREADS,
};
pub use response::{
    CpuStatus, ErrorCode, PendingStatus, RefusalKind, Reply, ReservationInfo, Response, StatusInfo,
};

use serde::{Deserialize, Serialize};

/// The newest protocol version this build speaks: 2 adds reservations for
/// an existing process (`pid`, `all_threads`).
pub const VERSION: u32 = 2;
/// The oldest it still takes: version 1 requests are served as before, and
/// answered as version 1.
pub const MIN_VERSION: u32 = 1;
/// Longest request line accepted (bytes, without the newline).
pub const MAX_MESSAGE: usize = 64 * 1024;
/// Where the daemon listens by default.
pub const DEFAULT_SOCKET: &str = "/run/rtmgr/rtmgr.sock";

/// What a client asks.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Op {
    Reserve(ReserveRequest),
    Release { id: u64 },
    List,
    Status,
}

/// Which request an answer was for (the daemon's `rtmgr_answer_seconds`
/// labels its answer times by it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerOp {
    Reserve,
    Release,
    /// Every other request, and a line that is not one.
    Other,
}

impl AnswerOp {
    pub const ALL: [AnswerOp; 3] = [AnswerOp::Reserve, AnswerOp::Release, AnswerOp::Other];

    pub fn of(op: &Op) -> AnswerOp {
        match op {
            Op::Reserve(_) => AnswerOp::Reserve,
            Op::Release { .. } => AnswerOp::Release,
            _ => AnswerOp::Other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            AnswerOp::Reserve => "reserve",
            AnswerOp::Release => "release",
            AnswerOp::Other => "other",
        }
    }
}

/// A request line: `{"v":1,"op":…,…}`.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub v: u32,
    pub op: Op,
}

impl Op {
    /// The lowest protocol version that carries this request, so a new
    /// client still talks to an older daemon unless it needs more.
    pub fn min_version(&self) -> u32 {
        match self {
            Op::Reserve(r) => r.min_version(),
            _ => MIN_VERSION,
        }
    }
}

impl Request {
    /// The request at the lowest version that carries it.
    pub fn new(op: Op) -> Self {
        Request {
            v: op.min_version(),
            op,
        }
    }

    /// One line of JSON with its newline.
    pub fn to_line(&self) -> String {
        let mut v = serde_json::to_value(&self.op).expect("requests serialize");
        if let serde_json::Value::Object(m) = &mut v {
            m.insert("v".into(), self.v.into());
        }
        let mut s = v.to_string();
        s.push('\n');
        s
    }
}

/// Why a line is not a request: an error response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoError {
    pub code: ErrorCode,
    pub message: String,
}

impl ProtoError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ProtoError {
            code,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for ProtoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}: {}", self.code, self.message)
    }
}

/// Parse one request line (without its newline). Never panics.
pub fn parse_request(line: &[u8]) -> Result<Request, ProtoError> {
    if line.len() > MAX_MESSAGE {
        return Err(ProtoError::new(
            ErrorCode::TooLarge,
            format!("request of {} bytes > {MAX_MESSAGE}", line.len()),
        ));
    }
    let text = std::str::from_utf8(line)
        .map_err(|e| ProtoError::new(ErrorCode::BadJson, format!("not UTF-8: {e}")))?;
    let mut value: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| ProtoError::new(ErrorCode::BadJson, e.to_string()))?;
    let obj = value
        .as_object_mut()
        .ok_or_else(|| ProtoError::new(ErrorCode::BadJson, "a request is a JSON object"))?;
    let v = match obj.remove("v") {
        None => {
            return Err(ProtoError::new(
                ErrorCode::UnsupportedVersion,
                format!("no protocol version \"v\" (this daemon speaks {VERSION})"),
            ))
        }
        Some(serde_json::Value::Number(n))
            if n.as_u64()
                .is_some_and(|v| (u64::from(MIN_VERSION)..=u64::from(VERSION)).contains(&v)) =>
        {
            n.as_u64().unwrap_or_default() as u32
        }
        Some(other) => {
            return Err(ProtoError::new(
                ErrorCode::UnsupportedVersion,
                format!("protocol version {other} is not supported (this daemon speaks {MIN_VERSION} to {VERSION})"),
            ))
        }
    };
    let op_name = obj
        .get("op")
        .and_then(|o| o.as_str())
        .map(str::to_string)
        .ok_or_else(|| ProtoError::new(ErrorCode::BadRequest, "no \"op\" string"))?;
    if !["reserve", "release", "list", "status"].contains(&op_name.as_str()) {
        return Err(ProtoError::new(
            ErrorCode::UnknownOp,
            format!(
                "unknown op {:?}: expected reserve, release, list or status",
                op_name.chars().take(40).collect::<String>()
            ),
        ));
    }
    let op: Op = serde_json::from_value(value)
        .map_err(|e| ProtoError::new(ErrorCode::BadRequest, format!("{op_name}: {e}")))?;
    if op.min_version() > v {
        return Err(ProtoError::new(
            ErrorCode::UnsupportedVersion,
            format!(
                "{op_name} with pid or all_threads needs protocol version {}",
                op.min_version()
            ),
        ));
    }
    Ok(Request { v, op })
}

/// Parse a response line (clients).
pub fn parse_response(line: &[u8]) -> Result<Response, String> {
    serde_json::from_slice(line).map_err(|e| format!("bad response from the daemon: {e}"))
}
