//! The daemon client's C API (`include/rtmgr.h`): `rtmgr_reserve()` asks
//! `rtmgr serve` for W every P for the calling thread, `rtmgr_release()`
//! gives it back; the message of a refusal or error is available from
//! `rtmgr_reserve_last_error()`. A reservation also ends when the process does.

use super::{Client, ClientError, ReserveRequest};
use std::cell::RefCell;
use std::ffi::{c_char, CStr, CString};

/// Result of `rtmgr_reserve` / `rtmgr_release`.
#[allow(non_camel_case_types)]
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtmgrReserveStatus {
    /// Granted (or released).
    RTMGR_RESERVE_OK = 0,
    /// Refused: admission, policy, rate, not served; the message has the numbers.
    RTMGR_RESERVE_REFUSED = 1,
    /// Bad argument (NULL `out`, unknown class, ...).
    RTMGR_RESERVE_EINVAL = -1,
    /// No daemon listens on the socket ($RTMGR_SOCKET or /run/rtmgr/rtmgr.sock).
    RTMGR_RESERVE_ENODAEMON = -2,
    /// The daemon answered with an error (bad request, a thread exited, ...).
    RTMGR_RESERVE_EDAEMON = -3,
    /// Talking to the daemon failed.
    RTMGR_RESERVE_EIO = -4,
}

use RtmgrReserveStatus::*;

/// A granted reservation.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RtmgrReservation {
    /// Give it to `rtmgr_release`.
    pub id: u64,
    /// The RT CPU the thread now runs on.
    pub cpu: u32,
    /// 1: SCHED_DEADLINE (hard); 0: SCHED_FIFO at `priority` (soft).
    pub hard: i32,
    pub priority: i32,
    pub period_ns: u64,
    pub budget_ns: u64,
    pub deadline_ns: u64,
}

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(msg: String) {
    let c = CString::new(msg.replace('\0', " ")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = c);
}

fn status_of(e: ClientError) -> RtmgrReserveStatus {
    let st = match &e {
        ClientError::NoDaemon { .. } => RTMGR_RESERVE_ENODAEMON,
        ClientError::Refused { .. } => RTMGR_RESERVE_REFUSED,
        ClientError::Daemon { .. } => RTMGR_RESERVE_EDAEMON,
        ClientError::Io(_) | ClientError::Protocol(_) => RTMGR_RESERVE_EIO,
    };
    set_error(e.to_string());
    st
}

/// The message of the calling thread's last refusal or error (never NULL;
/// valid until its next `rtmgr_reserve`/`rtmgr_release` call).
#[no_mangle]
pub extern "C" fn rtmgr_reserve_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// Reserve `budget_ns` every `period_ns` for the calling thread, done within
/// `deadline_ns` of each release (0: the period). `class`: "rt0" (hard,
/// SCHED_DEADLINE; NULL means this) or "rt1[:PRIO]" (soft, SCHED_FIFO).
/// `cpu`: an RT CPU, or -1 for any. On success fills `*out`.
///
/// # Safety
/// `class` is NULL or a NUL-terminated string; `out` points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_reserve(
    period_ns: u64,
    budget_ns: u64,
    deadline_ns: u64,
    class: *const c_char,
    cpu: i32,
    out: *mut RtmgrReservation,
) -> RtmgrReserveStatus {
    if out.is_null() {
        set_error("rtmgr_reserve: out is NULL".into());
        return RTMGR_RESERVE_EINVAL;
    }
    let class = if class.is_null() {
        "rt0".to_string()
    } else {
        // SAFETY: the caller passes a NUL-terminated string.
        match unsafe { CStr::from_ptr(class) }.to_str() {
            Ok(s) => s.to_string(),
            Err(_) => {
                set_error("rtmgr_reserve: class is not UTF-8".into());
                return RTMGR_RESERVE_EINVAL;
            }
        }
    };
    let mut r = ReserveRequest::new(period_ns, budget_ns);
    r.deadline_ns = (deadline_ns != 0).then_some(deadline_ns);
    r.class = class;
    r.cpu = u32::try_from(cpu).ok();
    match Client::connect().and_then(|mut c| c.reserve(r)) {
        Ok(g) => {
            let priority = g
                .class
                .split_once(':')
                .and_then(|(_, p)| p.parse().ok())
                .unwrap_or(0);
            let res = RtmgrReservation {
                id: g.id,
                cpu: g.cpu,
                hard: i32::from(g.policy == "SCHED_DEADLINE"),
                priority,
                period_ns: g.period_ns,
                budget_ns: g.budget_ns,
                deadline_ns: g.deadline_ns,
            };
            // SAFETY: checked non-NULL; the caller gives writable memory.
            unsafe { out.write(res) };
            RTMGR_RESERVE_OK
        }
        Err(e) => status_of(e),
    }
}

/// Give a reservation back.
#[no_mangle]
pub extern "C" fn rtmgr_release(id: u64) -> RtmgrReserveStatus {
    match Client::connect().and_then(|mut c| c.release(id)) {
        Ok(()) => RTMGR_RESERVE_OK,
        Err(e) => status_of(e),
    }
}
