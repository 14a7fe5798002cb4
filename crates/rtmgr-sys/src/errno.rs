//! The calling thread's `errno`, for the code that must keep it intact (a
//! signal handler saves and restores it) or report through it (the C ABI of
//! rtmgr-rt, after RTAI's `rtf_*` calls). Async-signal-safe.

/// The calling thread's errno now.
pub fn get() -> i32 {
    // SAFETY: __errno_location returns this thread's errno slot, valid for
    // the thread's lifetime.
    unsafe { *libc::__errno_location() }
}

/// Set the calling thread's errno.
pub fn set(code: i32) {
    // SAFETY: as in `get`.
    unsafe { *libc::__errno_location() = code };
}

#[cfg(test)]
mod tests {
    #[test]
    fn set_then_get() {
        super::set(libc::ENOENT);
        assert_eq!(super::get(), libc::ENOENT);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ENOENT)
        );
    }
}
