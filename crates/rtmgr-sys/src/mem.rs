//! Memory: locking the process in RAM (McKenney §2.1: mlockall, so no page
//! fault delays an RT task) and shared mappings of a file descriptor (the
//! cross-process RT-FIFO segment, ARTiS §2.2 / budget-based RTAI §2 RTAI_SHM).

use crate::io_err;
use rustix::mm::{MapFlags, MlockAllFlags, ProtFlags};
use std::io;
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;

/// Lock all current and future memory of the calling process.
pub fn mlockall() -> io::Result<()> {
    rustix::mm::mlockall(MlockAllFlags::CURRENT | MlockAllFlags::FUTURE).map_err(io_err)
}

/// A read-write `MAP_SHARED` mapping of a file, unmapped on drop. It hands out
/// a raw base pointer: what lives in the mapping, and who else writes it, is
/// the caller's protocol (another process may map the same file).
#[derive(Debug)]
pub struct SharedMapping {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping belongs to the process, not to a thread; this type only
// owns the address range (no access happens through it).
unsafe impl Send for SharedMapping {}

impl SharedMapping {
    /// Map the first `len` bytes of `fd`, pre-faulted (`MAP_POPULATE`).
    pub fn map(fd: BorrowedFd<'_>, len: usize) -> io::Result<Self> {
        // SAFETY: a fresh mapping at an address the kernel chooses: it cannot
        // overlap memory Rust already uses.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED | MapFlags::POPULATE,
                fd,
                0,
            )
        }
        .map_err(io_err)?;
        let base = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "mmap returned NULL"))?;
        Ok(SharedMapping { base, len })
    }

    /// The first byte (page-aligned); valid for `len()` bytes while `self` lives.
    pub fn base(&self) -> NonNull<u8> {
        self.base
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for SharedMapping {
    fn drop(&mut self) {
        // SAFETY: unmapping the range we mapped; pointers derived from `base`
        // must not outlive `self` (the contract of `base`).
        let _ = unsafe { rustix::mm::munmap(self.base.as_ptr().cast(), self.len) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn two_mappings_of_one_file_share_bytes() {
        let fd = crate::fd::memfd("rtmgr-sys-test", false).unwrap();
        crate::fd::truncate(fd.as_fd(), 4096).unwrap();
        let a = SharedMapping::map(fd.as_fd(), 4096).unwrap();
        let b = SharedMapping::map(fd.as_fd(), 4096).unwrap();
        assert_eq!(a.len(), 4096);
        // SAFETY: both mappings are 4096 bytes long and live here.
        unsafe {
            a.base().as_ptr().add(100).write(42);
            assert_eq!(b.base().as_ptr().add(100).read(), 42);
        }
    }
}
