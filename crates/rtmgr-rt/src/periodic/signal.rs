//! The signal and timer plumbing of the periodic tasks' budget enforcement
//! (budget-based RTAI §3.3: the budget timer's signal, SIGBUDGET): per-thread
//! POSIX timers with `SIGEV_THREAD_ID`, handler installation, blocking and
//! draining a signal. Everything else goes through `rtmgr_sys`.

use rtmgr_sys::time::libc_timespec;
use rtmgr_sys::{Nanos, Tid};
use std::io;

// The hard mode's kernel constants. include/rtmgr.h has exported them since
// its first version (cbindgen reads them here), so they stay; they are
// rtmgr_sys's values.
pub const SCHED_DEADLINE: u32 = 6;
pub const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;
pub const SCHED_FLAG_DL_OVERRUN: u64 = 0x04;
const _: () = assert!(
    SCHED_DEADLINE == rtmgr_sys::sched::SCHED_DEADLINE
        && SCHED_FLAG_RESET_ON_FORK == rtmgr_sys::sched::SCHED_FLAG_RESET_ON_FORK
        && SCHED_FLAG_DL_OVERRUN == rtmgr_sys::sched::SCHED_FLAG_DL_OVERRUN
);

/// A POSIX timer on CLOCK_MONOTONIC that sends `signo` with `value` to one thread.
pub struct ThreadTimer(libc::timer_t);

// SAFETY: a timer_t is a kernel handle; the owning task uses it from its own
// thread and its signal handler only.
unsafe impl Send for ThreadTimer {}

impl ThreadTimer {
    pub fn new(tid: Tid, signo: i32, value: *mut libc::c_void) -> io::Result<Self> {
        // SAFETY: sigevent is plain data; zero is a valid start.
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = signo;
        sev.sigev_value = libc::sigval { sival_ptr: value };
        sev.sigev_notify_thread_id = tid as i32;
        let mut id: libc::timer_t = std::ptr::null_mut();
        // SAFETY: valid sigevent and output pointer.
        if unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut id) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self(id))
    }

    /// Arm for the absolute time `abs_ns` (0 disarms), repeating every
    /// `interval_ns` if non-zero. Async-signal-safe.
    pub fn arm_abs(&self, abs_ns: Nanos, interval_ns: Nanos) {
        let spec = libc::itimerspec {
            it_interval: libc_timespec(interval_ns),
            it_value: libc_timespec(abs_ns),
        };
        // SAFETY: valid timer id and itimerspec.
        unsafe { libc::timer_settime(self.0, libc::TIMER_ABSTIME, &spec, std::ptr::null_mut()) };
    }

    pub fn disarm(&self) {
        self.arm_abs(0, 0);
    }
}

impl Drop for ThreadTimer {
    fn drop(&mut self) {
        // SAFETY: the id came from timer_create and is deleted once.
        unsafe { libc::timer_delete(self.0) };
    }
}

pub type SigAction = extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

/// Install `handler` for `signo` (SA_SIGINFO | SA_RESTART).
pub fn install_handler(signo: i32, handler: SigAction) -> io::Result<()> {
    // SAFETY: sigaction is plain data.
    let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
    sa.sa_sigaction = handler as usize;
    sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
    // SAFETY: sa_mask is a valid sigset_t.
    unsafe { libc::sigemptyset(&mut sa.sa_mask) };
    // SAFETY: valid sigaction; the handler is a valid extern "C" fn.
    if unsafe { libc::sigaction(signo, &sa, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Block or unblock `signo` in the calling thread.
pub fn block_signal(signo: i32, block: bool) {
    // SAFETY: a zeroed sigset_t is then initialised by sigemptyset.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigset pointers.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signo);
        let how = if block {
            libc::SIG_BLOCK
        } else {
            libc::SIG_UNBLOCK
        };
        libc::pthread_sigmask(how, &set, std::ptr::null_mut());
    }
}

/// Discard pending instances of a (blocked) signal for the calling thread.
pub fn drain_signal(signo: i32) {
    // SAFETY: as in block_signal.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    let zero = libc_timespec(0);
    // SAFETY: valid pointers; sigtimedwait with a zero timeout never blocks.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signo);
        while libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) == signo {}
    }
}

pub fn sigrtmin() -> i32 {
    libc::SIGRTMIN()
}
pub fn sigrtmax() -> i32 {
    libc::SIGRTMAX()
}
