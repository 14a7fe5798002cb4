//! The RT-FIFO's C API (`include/rtmgr.h`), in the spirit of RTAI's `rtf_*`
//! calls (budget-based RTAI §2, RTAI_FIFO): create/open a named shared-memory
//! FIFO of fixed-size records, push without blocking, pop with a timeout, close.

use super::shm::{self, FifoError, Opening, ShmConsumer, ShmProducer, Wake};
use std::ffi::{c_char, c_int, c_void, CStr};
use std::os::fd::BorrowedFd;
use std::time::Duration;

/// Result of every `rtf_*` call: 0 is success, positive values are normal
/// outcomes (full, empty, timed out), negative values are errors.
#[allow(non_camel_case_types)]
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtfStatus {
    /// Success.
    RTF_OK = 0,
    /// `rtf_push`: the FIFO is full, the record was not written.
    RTF_FULL = 1,
    /// `rtf_pop` with timeout 0: the FIFO is empty.
    RTF_EMPTY = 2,
    /// `rtf_pop`: nothing arrived before the timeout.
    RTF_TIMEDOUT = 3,
    /// Bad argument (NULL pointer, bad name, zero size, wrong record length, wrong role).
    RTF_EINVAL = -1,
    /// A system call failed; `errno` tells which error.
    RTF_EOS = -2,
    /// The segment is not an RT-FIFO (or its creator has not finished writing the header).
    RTF_EMAGIC = -3,
    /// The segment has another layout version.
    RTF_EVERSION = -4,
    /// The segment carries records of another size than the caller asked for.
    RTF_ERECORDSIZE = -5,
    /// The header or an index in the segment is inconsistent, or the file is too small.
    RTF_ECORRUPT = -6,
    /// The requested end (producer or consumer) is held by another live process.
    RTF_EBUSY = -7,
}

/// Which end of the FIFO a handle is.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtfRole {
    /// Writes records (`rtf_push`); typically the real-time task.
    RTF_PRODUCER = 0,
    /// Reads records (`rtf_pop`); typically an ordinary task.
    RTF_CONSUMER = 1,
}

/// How a producer wakes a sleeping consumer (see `rtf_set_wake`).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtfWake {
    /// Default: a full fence per push; a sleeping consumer is never missed.
    RTF_WAKE_FENCED = 0,
    /// No fence on push (cheaper); in a rare race the consumer wakes on its
    /// 10 ms safety poll instead of at once.
    RTF_WAKE_LAZY = 1,
}

/// An open FIFO end (opaque).
pub enum RtfFifo {
    Producer(ShmProducer),
    Consumer(ShmConsumer),
}

fn status(e: &FifoError) -> RtfStatus {
    use RtfStatus::*;
    match e {
        FifoError::Os { source, .. } => {
            if let Some(code) = source.raw_os_error() {
                rtmgr_sys::errno::set(code);
            }
            RTF_EOS
        }
        FifoError::InvalidArgument(_) | FifoError::RecordLength { .. } | FifoError::Capacity(_) => {
            RTF_EINVAL
        }
        FifoError::BadMagic => RTF_EMAGIC,
        FifoError::Version { .. } => RTF_EVERSION,
        FifoError::RecordSize { .. } => RTF_ERECORDSIZE,
        FifoError::TooSmall { .. }
        | FifoError::HeaderSize { .. }
        | FifoError::Geometry { .. }
        | FifoError::Corrupt(_) => RTF_ECORRUPT,
        FifoError::Busy { .. } => RTF_EBUSY,
    }
}

/// Store the handle or the error's status.
///
/// # Safety
/// `out` must be NULL or valid for a pointer write.
unsafe fn finish(r: Result<RtfFifo, FifoError>, out: *mut *mut RtfFifo) -> RtfStatus {
    match r {
        Ok(f) => {
            // SAFETY: the caller checked `out` is non-NULL and writable.
            unsafe { *out = Box::into_raw(Box::new(f)) };
            RtfStatus::RTF_OK
        }
        Err(e) => status(&e),
    }
}

/// # Safety
/// `name` must be NULL or a NUL-terminated string.
unsafe fn name_arg<'a>(name: *const c_char) -> Option<&'a str> {
    if name.is_null() {
        return None;
    }
    // SAFETY: per the caller's contract.
    unsafe { CStr::from_ptr(name) }.to_str().ok()
}

/// The end `role` asks for, opened the way `o` says: one place for the four
/// `rtf_create*`/`rtf_open*` calls.
fn open_end(
    o: Opening<'_>,
    record_size: u32,
    capacity: u32,
    role: RtfRole,
) -> Result<RtfFifo, FifoError> {
    match role {
        RtfRole::RTF_PRODUCER => ShmProducer::with(o, record_size, capacity).map(RtfFifo::Producer),
        RtfRole::RTF_CONSUMER => ShmConsumer::with(o, record_size, capacity).map(RtfFifo::Consumer),
    }
}
/// Create the shared-memory FIFO `name` (`"/x"` or `"x"`, one path component;
/// it appears as /dev/shm/x) holding up to `capacity` records of `record_size`
/// bytes, and open it as `role`. Fails with `RTF_EOS`/`EEXIST` if it exists.
/// On success stores a handle in `*out`; free it with `rtf_close`.
///
/// # Safety
/// `name` must be a NUL-terminated string; `out` must be valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn rtf_create(
    name: *const c_char,
    record_size: u32,
    capacity: u32,
    role: RtfRole,
    out: *mut *mut RtfFifo,
) -> RtfStatus {
    // SAFETY: per this function's contract.
    unsafe {
        open_named(name, out, |n| {
            open_end(Opening::CreateNamed(n), record_size, capacity, role)
        })
    }
}

/// Open the existing FIFO `name` as `role`. `record_size` is the record size
/// the caller expects (0: accept any; query it with `rtf_record_size`). The
/// header is validated: magic, version, record size, capacity and file size.
///
/// # Safety
/// `name` must be a NUL-terminated string; `out` must be valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn rtf_open(
    name: *const c_char,
    record_size: u32,
    role: RtfRole,
    out: *mut *mut RtfFifo,
) -> RtfStatus {
    // SAFETY: per this function's contract.
    unsafe {
        open_named(name, out, |n| {
            open_end(Opening::OpenNamed(n), record_size, 0, role)
        })
    }
}

/// `rtf_create` and `rtf_open`: the name and `out` checked, then `open` run
/// on the name and its handle stored in `*out`.
///
/// # Safety
/// `name` must be NULL or a NUL-terminated string; `out` must be NULL or
/// valid for writing a pointer.
unsafe fn open_named(
    name: *const c_char,
    out: *mut *mut RtfFifo,
    open: impl FnOnce(&str) -> Result<RtfFifo, FifoError>,
) -> RtfStatus {
    // SAFETY: per the caller's contract.
    let Some(name) = (unsafe { name_arg(name) }) else {
        return RtfStatus::RTF_EINVAL;
    };
    if out.is_null() {
        return RtfStatus::RTF_EINVAL;
    }
    let r = open(name);
    // SAFETY: out checked non-NULL; valid per the caller's contract.
    unsafe { finish(r, out) }
}

/// Like `rtf_create`, in the empty file `fd` (e.g. from `memfd_create`, to be
/// passed to the peer over a Unix socket or across fork). `fd` stays the caller's.
///
/// # Safety
/// `fd` must be an open descriptor; `out` must be valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn rtf_create_fd(
    fd: c_int,
    record_size: u32,
    capacity: u32,
    role: RtfRole,
    out: *mut *mut RtfFifo,
) -> RtfStatus {
    // SAFETY: per this function's contract.
    unsafe {
        open_fd(fd, out, |fd| {
            open_end(Opening::CreateFd(fd), record_size, capacity, role)
        })
    }
}

/// Like `rtf_open`, on the segment in `fd`. `fd` stays the caller's.
///
/// # Safety
/// `fd` must be an open descriptor; `out` must be valid for writing a pointer.
#[no_mangle]
pub unsafe extern "C" fn rtf_open_fd(
    fd: c_int,
    record_size: u32,
    role: RtfRole,
    out: *mut *mut RtfFifo,
) -> RtfStatus {
    // SAFETY: per this function's contract.
    unsafe {
        open_fd(fd, out, |fd| {
            open_end(Opening::OpenFd(fd), record_size, 0, role)
        })
    }
}

/// `rtf_create_fd` and `rtf_open_fd`: `fd` and `out` checked, then `open`
/// run on the borrowed descriptor and its handle stored in `*out`.
///
/// # Safety
/// `fd` must be negative or open for the duration of the call; `out` must be
/// NULL or valid for writing a pointer.
unsafe fn open_fd(
    fd: c_int,
    out: *mut *mut RtfFifo,
    open: impl FnOnce(BorrowedFd<'_>) -> Result<RtfFifo, FifoError>,
) -> RtfStatus {
    if out.is_null() || fd < 0 {
        return RtfStatus::RTF_EINVAL;
    }
    // SAFETY: the caller guarantees fd is open for the duration of the call.
    let r = open(unsafe { BorrowedFd::borrow_raw(fd) });
    // SAFETY: out checked non-NULL; valid per the caller's contract.
    unsafe { finish(r, out) }
}

/// Append one record of exactly `len` == record size bytes. Never blocks and
/// never allocates; makes a system call (one futex wake) only when the consumer
/// sleeps in `rtf_pop`. Returns `RTF_OK`, or `RTF_FULL` (record not written).
///
/// # Safety
/// `f` must be a producer handle from `rtf_create`/`rtf_open` not yet closed;
/// `rec` must be readable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn rtf_push(f: *mut RtfFifo, rec: *const c_void, len: usize) -> RtfStatus {
    // SAFETY: per contract, f is NULL or a live handle used by this thread only.
    let Some(RtfFifo::Producer(p)) = (unsafe { f.as_mut() }) else {
        return RtfStatus::RTF_EINVAL;
    };
    if rec.is_null() {
        return RtfStatus::RTF_EINVAL;
    }
    // SAFETY: rec is readable for len bytes per contract.
    let rec = unsafe { std::slice::from_raw_parts(rec as *const u8, len) };
    match p.try_push(rec) {
        Ok(true) => RtfStatus::RTF_OK,
        Ok(false) => RtfStatus::RTF_FULL,
        Err(e) => status(&e),
    }
}

/// Choose how this producer wakes a sleeping consumer (default
/// `RTF_WAKE_FENCED`). `RTF_EINVAL` for a consumer handle.
///
/// # Safety
/// `f` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rtf_set_wake(f: *mut RtfFifo, wake: RtfWake) -> RtfStatus {
    // SAFETY: per contract, f is NULL or a live handle used by this thread only.
    let Some(RtfFifo::Producer(p)) = (unsafe { f.as_mut() }) else {
        return RtfStatus::RTF_EINVAL;
    };
    p.set_wake(match wake {
        RtfWake::RTF_WAKE_FENCED => Wake::Fenced,
        RtfWake::RTF_WAKE_LAZY => Wake::Lazy,
    });
    RtfStatus::RTF_OK
}

/// Take the oldest record into `buf` (`len` == record size bytes).
/// `timeout_ns` 0: don't wait (`RTF_EMPTY` when empty); > 0: sleep at most that
/// long (`RTF_TIMEDOUT`); < 0: sleep until a record arrives. Returns `RTF_OK`
/// when a record was copied.
///
/// # Safety
/// `f` must be a consumer handle not yet closed; `buf` writable for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn rtf_pop(
    f: *mut RtfFifo,
    buf: *mut c_void,
    len: usize,
    timeout_ns: i64,
) -> RtfStatus {
    // SAFETY: per contract, f is NULL or a live handle used by this thread only.
    let Some(RtfFifo::Consumer(c)) = (unsafe { f.as_mut() }) else {
        return RtfStatus::RTF_EINVAL;
    };
    if buf.is_null() {
        return RtfStatus::RTF_EINVAL;
    }
    // SAFETY: buf is writable for len bytes per contract.
    let buf = unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, len) };
    let r = match timeout_ns {
        0 => c.try_pop(buf).map(|ok| {
            if ok {
                RtfStatus::RTF_OK
            } else {
                RtfStatus::RTF_EMPTY
            }
        }),
        t => {
            let timeout = (t > 0).then(|| Duration::from_nanos(t as u64));
            c.pop_timeout(buf, timeout).map(|ok| {
                if ok {
                    RtfStatus::RTF_OK
                } else {
                    RtfStatus::RTF_TIMEDOUT
                }
            })
        }
    };
    r.unwrap_or_else(|e| status(&e))
}

/// Record size in bytes of an open FIFO (0 for NULL).
///
/// # Safety
/// `f` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rtf_record_size(f: *const RtfFifo) -> u32 {
    // SAFETY: per contract.
    unsafe { either_end(f, |p| p.record_size(), |c| c.record_size()) }
}

/// Capacity in records of an open FIFO (0 for NULL).
///
/// # Safety
/// `f` must be NULL or a live handle.
#[no_mangle]
pub unsafe extern "C" fn rtf_capacity(f: *const RtfFifo) -> u32 {
    // SAFETY: per contract.
    unsafe { either_end(f, |p| p.capacity(), |c| c.capacity()) }
}

/// A figure of whichever end `f` is (0 for NULL).
///
/// # Safety
/// `f` must be NULL or a live handle.
unsafe fn either_end(
    f: *const RtfFifo,
    producer: impl FnOnce(&ShmProducer) -> u32,
    consumer: impl FnOnce(&ShmConsumer) -> u32,
) -> u32 {
    // SAFETY: per the caller's contract.
    match unsafe { f.as_ref() } {
        Some(RtfFifo::Producer(p)) => producer(p),
        Some(RtfFifo::Consumer(c)) => consumer(c),
        None => 0,
    }
}

/// Close a handle: unmap the segment and free the end for another process.
/// The segment itself stays until `rtf_unlink`. NULL is accepted.
///
/// # Safety
/// `f` must be NULL or a handle from `rtf_create`/`rtf_open*`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn rtf_close(f: *mut RtfFifo) -> RtfStatus {
    if !f.is_null() {
        // SAFETY: f came from Box::into_raw in `finish` and is closed once.
        drop(unsafe { Box::from_raw(f) });
    }
    RtfStatus::RTF_OK
}

/// Remove the named FIFO from /dev/shm (open handles keep working).
///
/// # Safety
/// `name` must be a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn rtf_unlink(name: *const c_char) -> RtfStatus {
    // SAFETY: per contract.
    match unsafe { name_arg(name) } {
        None => RtfStatus::RTF_EINVAL,
        Some(n) => shm::unlink(n).map_or_else(|e| status(&e), |()| RtfStatus::RTF_OK),
    }
}

/// A static, human-readable description of a status code.
#[no_mangle]
pub extern "C" fn rtf_strerror(status: c_int) -> *const c_char {
    let s: &'static CStr = match status {
        0 => c"success",
        1 => c"FIFO full",
        2 => c"FIFO empty",
        3 => c"timed out",
        -1 => c"invalid argument",
        -2 => c"system call failed (see errno)",
        -3 => c"not an RT-FIFO segment (bad magic)",
        -4 => c"unsupported RT-FIFO layout version",
        -5 => c"record size mismatch",
        -6 => c"corrupt RT-FIFO segment",
        -7 => c"FIFO end held by another live process",
        _ => c"unknown RT-FIFO status",
    };
    s.as_ptr()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ptr;

    #[test]
    fn fifo_capi_roundtrip_and_errors() {
        let name = format!("rtmgr-capi-unit-{}\0", std::process::id());
        let n = name.as_ptr() as *const c_char;
        let (mut p, mut c) = (ptr::null_mut(), ptr::null_mut());
        // SAFETY: valid NUL-terminated name and out pointers; handles closed below.
        unsafe {
            assert_eq!(
                rtf_create(n, 8, 2, RtfRole::RTF_PRODUCER, &mut p),
                RtfStatus::RTF_OK
            );
            assert_eq!(
                rtf_open(n, 4, RtfRole::RTF_CONSUMER, &mut c),
                RtfStatus::RTF_ERECORDSIZE
            );
            assert_eq!(
                rtf_open(n, 0, RtfRole::RTF_CONSUMER, &mut c),
                RtfStatus::RTF_OK
            );
            assert_eq!(rtf_record_size(c), 8);
            assert_eq!(rtf_capacity(p), 2);
            let v = 7u64;
            let vp = &v as *const u64 as *const c_void;
            assert_eq!(
                rtf_push(c, vp, 8),
                RtfStatus::RTF_EINVAL,
                "consumer cannot push"
            );
            assert_eq!(rtf_push(p, vp, 4), RtfStatus::RTF_EINVAL, "wrong length");
            assert_eq!(rtf_push(p, vp, 8), RtfStatus::RTF_OK);
            assert_eq!(rtf_push(p, vp, 8), RtfStatus::RTF_OK);
            assert_eq!(rtf_push(p, vp, 8), RtfStatus::RTF_FULL);
            assert_eq!(
                rtf_set_wake(c, RtfWake::RTF_WAKE_LAZY),
                RtfStatus::RTF_EINVAL
            );
            assert_eq!(rtf_set_wake(p, RtfWake::RTF_WAKE_LAZY), RtfStatus::RTF_OK);
            let mut out = 0u64;
            let op = &mut out as *mut u64 as *mut c_void;
            assert_eq!(rtf_pop(c, op, 8, 0), RtfStatus::RTF_OK);
            assert_eq!(rtf_pop(c, op, 8, -1), RtfStatus::RTF_OK);
            assert_eq!(out, 7);
            assert_eq!(rtf_pop(c, op, 8, 0), RtfStatus::RTF_EMPTY);
            assert_eq!(rtf_pop(c, op, 8, 1_000_000), RtfStatus::RTF_TIMEDOUT);
            assert_eq!(
                rtf_create(n, 8, 2, RtfRole::RTF_PRODUCER, &mut p),
                RtfStatus::RTF_EOS
            );
            assert_eq!(rtmgr_sys::errno::get(), libc::EEXIST);
            assert_eq!(rtf_close(p), RtfStatus::RTF_OK);
            assert_eq!(rtf_close(c), RtfStatus::RTF_OK);
            assert_eq!(rtf_close(ptr::null_mut()), RtfStatus::RTF_OK);
            assert_eq!(rtf_unlink(n), RtfStatus::RTF_OK);
            assert_eq!(
                rtf_open(n, 0, RtfRole::RTF_CONSUMER, &mut c),
                RtfStatus::RTF_EOS
            );
            assert_eq!(rtmgr_sys::errno::get(), libc::ENOENT);
            assert_eq!(
                rtf_open(ptr::null(), 0, RtfRole::RTF_CONSUMER, &mut c),
                RtfStatus::RTF_EINVAL
            );
        }
        for s in -8..=4 {
            // SAFETY: rtf_strerror returns a static NUL-terminated string.
            assert!(!unsafe { CStr::from_ptr(rtf_strerror(s)) }
                .to_bytes()
                .is_empty());
        }
    }
}
