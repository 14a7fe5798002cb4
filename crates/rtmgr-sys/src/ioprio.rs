//! I/O priorities per thread (`ioprio_get`/`ioprio_set`, IOPRIO_WHO_PROCESS):
//! DROPS §4.3 kept separate request queues for real-time and time-sharing
//! disk requests; today's kernel orders requests by I/O class (RT before BE
//! before IDLE) in the bfq and mq-deadline schedulers.

use std::io;

/// `IOPRIO_CLASS_NONE`: the thread follows its CPU nice value.
pub const CLASS_NONE: u16 = 0;
/// `IOPRIO_CLASS_RT`: served before any best-effort request.
pub const CLASS_RT: u16 = 1;
/// `IOPRIO_CLASS_BE`: the default class.
pub const CLASS_BE: u16 = 2;
/// `IOPRIO_CLASS_IDLE`: only when the disk is otherwise idle.
pub const CLASS_IDLE: u16 = 3;
const CLASS_SHIFT: u16 = 13;
const WHO_PROCESS: libc::c_int = 1;

/// A raw ioprio value from its class and level (0 = highest .. 7).
pub fn value(class: u16, level: u16) -> u16 {
    (class << CLASS_SHIFT) | (level & 7)
}

/// The class of a raw ioprio value.
pub fn class_of(raw: u16) -> u16 {
    raw >> CLASS_SHIFT
}

/// The level of a raw ioprio value.
pub fn level_of(raw: u16) -> u16 {
    raw & 7
}

/// A thread's raw ioprio (0 = the caller).
pub fn get(tid: u32) -> io::Result<u16> {
    // SAFETY: ioprio_get takes two integers and no pointers.
    let r = unsafe { libc::syscall(libc::SYS_ioprio_get, WHO_PROCESS, tid as libc::c_int) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(r as u16)
}

/// Set a thread's raw ioprio (0 = the caller). IOPRIO_CLASS_RT needs CAP_SYS_ADMIN
/// (or CAP_SYS_NICE on newer kernels).
pub fn set(tid: u32, raw: u16) -> io::Result<()> {
    // SAFETY: ioprio_set takes three integers and no pointers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_ioprio_set,
            WHO_PROCESS,
            tid as libc::c_int,
            libc::c_int::from(raw),
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_split_back_into_class_and_level() {
        let v = value(CLASS_RT, 4);
        assert_eq!((class_of(v), level_of(v)), (CLASS_RT, 4));
        assert_eq!(value(CLASS_NONE, 0), 0);
    }

    #[test]
    fn own_ioprio_reads_and_writes_back() {
        let old = get(0).unwrap();
        // Lowering to best-effort needs no privilege.
        set(0, value(CLASS_BE, 7)).unwrap();
        assert_eq!(get(0).unwrap(), value(CLASS_BE, 7));
        set(0, old).unwrap();
        assert_eq!(get(0).unwrap(), old);
    }
}
