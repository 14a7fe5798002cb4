//! Thin, async-signal-safe wrappers over the system calls the periodic tasks
//! use (budget-based RTAI §3.3): clocks, absolute sleeps, per-thread POSIX
//! timers with `SIGEV_THREAD_ID`, signal handlers, `sched_setattr`.

use std::io;

pub const SCHED_DEADLINE: u32 = 6;
pub const SCHED_FLAG_RESET_ON_FORK: u64 = 0x01;
pub const SCHED_FLAG_DL_OVERRUN: u64 = 0x04;

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; clock_gettime is async-signal-safe.
    unsafe { libc::clock_gettime(id, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC in ns.
pub fn mono_ns() -> u64 {
    clock(libc::CLOCK_MONOTONIC)
}

/// The calling thread's CPU time in ns (precise: read from the scheduler).
pub fn thread_cpu_ns() -> u64 {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// The calling process's CPU time in ns (all threads).
pub fn process_cpu_ns() -> u64 {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn ts(ns: u64) -> libc::timespec {
    libc::timespec {
        tv_sec: (ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (ns % 1_000_000_000) as libc::c_long,
    }
}

/// Sleep until CLOCK_MONOTONIC reaches `abs_ns` (restarts after signals).
pub fn sleep_until(abs_ns: u64) {
    let t = ts(abs_ns);
    loop {
        // SAFETY: valid timespec; clock_nanosleep is async-signal-safe.
        let rc = unsafe {
            libc::clock_nanosleep(
                libc::CLOCK_MONOTONIC,
                libc::TIMER_ABSTIME,
                &t,
                std::ptr::null_mut(),
            )
        };
        if rc != libc::EINTR {
            return;
        }
    }
}

pub fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// A POSIX timer on CLOCK_MONOTONIC that sends `signo` with `value` to one thread.
pub struct ThreadTimer(libc::timer_t);

// SAFETY: a timer_t is a kernel handle; the owning task uses it from its own
// thread and its signal handler only.
unsafe impl Send for ThreadTimer {}

impl ThreadTimer {
    pub fn new(tid: i32, signo: i32, value: *mut libc::c_void) -> io::Result<Self> {
        // SAFETY: sigevent is plain data; zero is a valid start.
        let mut sev: libc::sigevent = unsafe { std::mem::zeroed() };
        sev.sigev_notify = libc::SIGEV_THREAD_ID;
        sev.sigev_signo = signo;
        sev.sigev_value = libc::sigval { sival_ptr: value };
        sev.sigev_notify_thread_id = tid;
        let mut id: libc::timer_t = std::ptr::null_mut();
        // SAFETY: valid sigevent and output pointer.
        if unsafe { libc::timer_create(libc::CLOCK_MONOTONIC, &mut sev, &mut id) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self(id))
    }

    /// Arm for the absolute time `abs_ns` (0 disarms), repeating every
    /// `interval_ns` if non-zero. Async-signal-safe.
    pub fn arm_abs(&self, abs_ns: u64, interval_ns: u64) {
        let spec = libc::itimerspec {
            it_interval: ts(interval_ns),
            it_value: ts(abs_ns),
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
    let zero = ts(0);
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

/// sched_setattr for the calling thread.
pub fn set_attr(
    policy: u32,
    flags: u64,
    prio: u32,
    runtime: u64,
    deadline: u64,
    period: u64,
) -> io::Result<()> {
    let attr = libc::sched_attr {
        size: std::mem::size_of::<libc::sched_attr>() as u32,
        sched_policy: policy,
        sched_flags: flags,
        sched_nice: 0,
        sched_priority: prio,
        sched_runtime: runtime,
        sched_deadline: deadline,
        sched_period: period,
    };
    // SAFETY: the kernel reads `attr.size` bytes from a valid struct.
    let rc = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr as *const _, 0) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's policy and (nice, priority), to restore later.
#[derive(Debug, Clone, Copy)]
pub struct SavedSched {
    policy: i32,
    prio: i32,
    nice: i32,
    affinity: libc::cpu_set_t,
}

pub fn save_sched() -> io::Result<SavedSched> {
    // SAFETY: plain syscalls on the calling thread with valid out-pointers.
    unsafe {
        let policy = libc::sched_getscheduler(0);
        if policy < 0 {
            return Err(io::Error::last_os_error());
        }
        let mut p = libc::sched_param { sched_priority: 0 };
        libc::sched_getparam(0, &mut p);
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
        let mut affinity: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut affinity) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(SavedSched {
            policy: policy & !libc::SCHED_RESET_ON_FORK,
            prio: p.sched_priority,
            nice,
            affinity,
        })
    }
}

pub fn restore_sched(s: &SavedSched) -> io::Result<()> {
    set_attr(s.policy as u32, 0, s.prio as u32, 0, 0, 0)?;
    // SAFETY: plain syscalls on the calling thread.
    unsafe {
        if s.policy == libc::SCHED_OTHER || s.policy == libc::SCHED_BATCH {
            libc::setpriority(libc::PRIO_PROCESS, 0, s.nice);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &s.affinity) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

pub fn set_fifo(prio: u8) -> io::Result<()> {
    set_attr(
        libc::SCHED_FIFO as u32,
        SCHED_FLAG_RESET_ON_FORK,
        prio as u32,
        0,
        0,
        0,
    )
}

pub fn pin_to(cpu: u32) -> io::Result<()> {
    if cpu as usize >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: zeroed cpu_set_t is the empty set; cpu < CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

pub fn mlockall() -> io::Result<()> {
    // SAFETY: no pointers involved.
    if unsafe { libc::mlockall(libc::MCL_CURRENT | libc::MCL_FUTURE) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

pub fn sched_yield() {
    // SAFETY: no preconditions.
    unsafe { libc::sched_yield() };
}

/// Number of online CPUs.
pub fn online_cpus() -> u32 {
    // SAFETY: no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as u32
}
