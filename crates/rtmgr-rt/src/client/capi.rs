//! The daemon client's C API (`include/rtmgr.h`): `rtmgr_reserve()` asks
//! `rtmgr serve` for W every P for the calling thread, `rtmgr_release()`
//! gives it back; `rtmgr_reserve_with()` asks for locked memory, an I/O
//! class and a cache share too (DROPS §4.3–4.4); the message of a refusal or error is available from
//! `rtmgr_reserve_last_error()`. A reservation also ends when the process does.

use super::{Client, ClientError, ReservationInfo, ReserveRequest};
use rtmgr_core::protocol::IoClass;
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

/// The I/O class a reservation asks for, or got.
#[allow(non_camel_case_types)]
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RtmgrIoClass {
    /// Asked: the daemon's default. Got: the class was left as it was.
    #[default]
    RTMGR_IO_DEFAULT = 0,
    /// IOPRIO_CLASS_RT: served before best-effort I/O.
    RTMGR_IO_RT = 1,
    /// IOPRIO_CLASS_BE: with the time-sharing work.
    RTMGR_IO_BE = 2,
}

/// Everything a reservation may ask for. Fill it with
/// `rtmgr_reserve_request_init` first, then change what you need.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RtmgrReserveRequest {
    pub period_ns: u64,
    pub budget_ns: u64,
    /// 0: the period.
    pub deadline_ns: u64,
    /// "rt0" (hard, SCHED_DEADLINE; NULL means this) or "rt1[:PRIO]" (soft).
    pub class_name: *const c_char,
    /// An RT CPU, or -1 for any.
    pub cpu: i32,
    /// The I/O class of the calling thread.
    pub io_class: RtmgrIoClass,
    /// Locked memory needed, bytes (0: none asked); RLIMIT_MEMLOCK is raised to it.
    pub memlock_bytes: u64,
    /// Share of the L3 cache needed, 0..1 (negative: none asked).
    pub cache_share: f64,
}

/// The resources beside CPU time a grant gave.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RtmgrGrantedResources {
    /// Locked memory reserved for the client (0: none asked).
    pub memlock_bytes: u64,
    /// The I/O class the thread got (RTMGR_IO_DEFAULT: unchanged).
    pub io_class: RtmgrIoClass,
    /// Its level within the class (0 highest .. 7).
    pub io_level: i32,
    /// 1: the thread joined the RT cache group; 0: no cache partition here.
    pub cache_partitioned: i32,
}

/// Fill `*req` for W every P for the calling thread: D = P, class rt0, any
/// RT CPU, no locked memory, the daemon's I/O class, no cache share.
///
/// # Safety
/// `req` is NULL (nothing done) or points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_reserve_request_init(
    req: *mut RtmgrReserveRequest,
    period_ns: u64,
    budget_ns: u64,
) {
    if req.is_null() {
        return;
    }
    // SAFETY: checked non-NULL; the caller gives writable memory.
    unsafe { req.write(RtmgrReserveRequest::new(period_ns, budget_ns)) };
}

/// Reserve `budget_ns` every `period_ns` for the calling thread, done within
/// `deadline_ns` of each release (0: the period). `class`: "rt0" (hard,
/// SCHED_DEADLINE; NULL means this) or "rt1[:PRIO]" (soft, SCHED_FIFO).
/// `cpu`: an RT CPU, or -1 for any. On success fills `*out`.
/// (`rtmgr_reserve_with` asks for locked memory, I/O class and cache too.)
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
    let req = RtmgrReserveRequest {
        deadline_ns,
        class_name: class,
        cpu,
        ..RtmgrReserveRequest::new(period_ns, budget_ns)
    };
    // SAFETY: the caller's promises are `rtmgr_reserve_with`'s.
    unsafe { rtmgr_reserve_with(&req, out, std::ptr::null_mut()) }
}

impl RtmgrReserveRequest {
    fn new(period_ns: u64, budget_ns: u64) -> Self {
        RtmgrReserveRequest {
            period_ns,
            budget_ns,
            deadline_ns: 0,
            class_name: std::ptr::null(),
            cpu: -1,
            io_class: RtmgrIoClass::RTMGR_IO_DEFAULT,
            memlock_bytes: 0,
            cache_share: -1.0,
        }
    }

    /// The protocol request, or why it is not one.
    ///
    /// # Safety
    /// `class_name` is NULL or a NUL-terminated string.
    unsafe fn protocol_request(&self) -> Result<ReserveRequest, String> {
        let mut r = ReserveRequest::new(self.period_ns, self.budget_ns);
        if !self.class_name.is_null() {
            // SAFETY: the caller passes a NUL-terminated string.
            r.class = unsafe { CStr::from_ptr(self.class_name) }
                .to_str()
                .map_err(|_| "class is not UTF-8".to_string())?
                .to_string();
        }
        r.deadline_ns = (self.deadline_ns != 0).then_some(self.deadline_ns);
        r.cpu = u32::try_from(self.cpu).ok();
        r.memlock_bytes = (self.memlock_bytes != 0).then_some(self.memlock_bytes);
        r.io_class = match self.io_class {
            RtmgrIoClass::RTMGR_IO_DEFAULT => None,
            RtmgrIoClass::RTMGR_IO_RT => Some(IoClass::Rt.as_str().into()),
            RtmgrIoClass::RTMGR_IO_BE => Some(IoClass::Be.as_str().into()),
        };
        if self.cache_share.is_nan() {
            return Err("cache_share is NaN (negative: none asked)".into());
        }
        r.cache_share = (self.cache_share >= 0.0).then_some(self.cache_share);
        Ok(r)
    }
}

/// What the grant gave beside CPU time, read from its reply.
fn granted_resources(g: &ReservationInfo) -> RtmgrGrantedResources {
    let (io_class, io_level) = match g.io_class.as_deref().and_then(|l| l.split_once(':')) {
        Some(("rt", level)) => (RtmgrIoClass::RTMGR_IO_RT, level.parse().unwrap_or(0)),
        Some(("be", level)) => (RtmgrIoClass::RTMGR_IO_BE, level.parse().unwrap_or(0)),
        _ => (RtmgrIoClass::RTMGR_IO_DEFAULT, 0),
    };
    RtmgrGrantedResources {
        memlock_bytes: g.memlock_reserved.unwrap_or(0),
        io_class,
        io_level,
        cache_partitioned: i32::from(
            g.cache
                .as_deref()
                .is_some_and(|c| !c.starts_with("not available")),
        ),
    }
}

/// Reserve what `*req` asks for the calling thread: CPU time, and locked
/// memory, an I/O class and a cache share when asked. On success fills
/// `*out` and, when `resources` is not NULL, `*resources`. A resource the
/// machine cannot give is refused (RTMGR_RESERVE_REFUSED) with the numbers
/// in `rtmgr_reserve_last_error()`; nothing is reserved then.
///
/// # Safety
/// `req` points to a request filled by `rtmgr_reserve_request_init` (its
/// `class_name` NULL or a NUL-terminated string); `out` points to writable
/// memory; `resources` is NULL or points to writable memory.
#[no_mangle]
pub unsafe extern "C" fn rtmgr_reserve_with(
    req: *const RtmgrReserveRequest,
    out: *mut RtmgrReservation,
    resources: *mut RtmgrGrantedResources,
) -> RtmgrReserveStatus {
    if req.is_null() || out.is_null() {
        set_error("rtmgr_reserve: req or out is NULL".into());
        return RTMGR_RESERVE_EINVAL;
    }
    // SAFETY: checked non-NULL; the caller passes an initialised request.
    let r = match unsafe { (*req).protocol_request() } {
        Ok(r) => r,
        Err(e) => {
            set_error(format!("rtmgr_reserve: {e}"));
            return RTMGR_RESERVE_EINVAL;
        }
    };
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
            if !resources.is_null() {
                // SAFETY: non-NULL; the caller gives writable memory.
                unsafe { resources.write(granted_resources(&g)) };
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_initialised_request_asks_for_cpu_time_only() {
        let mut req = RtmgrReserveRequest::new(0, 0);
        // SAFETY: a valid, writable request.
        unsafe { rtmgr_reserve_request_init(&mut req, 10_000_000, 1_000_000) };
        // SAFETY: class_name is NULL.
        let r = unsafe { req.protocol_request() }.unwrap();
        assert_eq!(r, ReserveRequest::new(10_000_000, 1_000_000));
    }

    #[test]
    fn the_resource_fields_reach_the_protocol_request() {
        let class = CString::new("rt1:20").unwrap();
        let req = RtmgrReserveRequest {
            class_name: class.as_ptr(),
            cpu: 1,
            io_class: RtmgrIoClass::RTMGR_IO_RT,
            memlock_bytes: 4 << 20,
            cache_share: 0.25,
            ..RtmgrReserveRequest::new(10_000_000, 1_000_000)
        };
        // SAFETY: class_name is a NUL-terminated string.
        let r = unsafe { req.protocol_request() }.unwrap();
        let want = ReserveRequest {
            cpu: Some(1),
            ..ReserveRequest::new(10_000_000, 1_000_000)
                .with_class("rt1:20")
                .with_io_class(IoClass::Rt)
                .with_memlock(4 << 20)
                .with_cache_share(0.25)
        };
        assert_eq!(r, want);
        let nan = RtmgrReserveRequest {
            cache_share: f64::NAN,
            ..req
        };
        // SAFETY: as above.
        assert!(unsafe { nan.protocol_request() }.is_err());
    }

    #[test]
    fn null_arguments_are_einval_with_a_message() {
        let mut out = RtmgrReservation::default();
        // SAFETY: NULL request is the case under test; out is writable.
        let st = unsafe { rtmgr_reserve_with(std::ptr::null(), &mut out, std::ptr::null_mut()) };
        assert_eq!(st, RTMGR_RESERVE_EINVAL);
        // SAFETY: never NULL, NUL-terminated.
        let msg = unsafe { CStr::from_ptr(rtmgr_reserve_last_error()) };
        assert!(msg.to_str().unwrap().contains("NULL"));
    }

    #[test]
    fn the_reply_s_resources_are_read_back() {
        let mut g = ReservationInfo {
            id: 1,
            pid: 1,
            uid: 0,
            name: None,
            cpu: 1,
            class: "rt0".into(),
            policy: "SCHED_DEADLINE".into(),
            period_ns: 1,
            budget_ns: 1,
            deadline_ns: 1,
            threads: vec![1],
            irq: None,
            response_ns: None,
            rttime_us: 0,
            memlock_bytes: 0,
            memlock_reserved: Some(1 << 20),
            io_class: Some("rt:4".into()),
            cache: Some("L3: RT CPUs and clients 4 of 12 ways".into()),
            asleep: Vec::new(),
            stopped: Vec::new(),
            pending: Vec::new(),
        };
        let r = granted_resources(&g);
        assert_eq!(
            (r.memlock_bytes, r.io_class, r.io_level, r.cache_partitioned),
            (1 << 20, RtmgrIoClass::RTMGR_IO_RT, 4, 1)
        );
        g.io_class = None;
        g.cache = Some("not available: no /sys/fs/resctrl".into());
        g.memlock_reserved = None;
        let r = granted_resources(&g);
        assert_eq!(
            (r.memlock_bytes, r.io_class, r.cache_partitioned),
            (0, RtmgrIoClass::RTMGR_IO_DEFAULT, 0)
        );
    }
}
