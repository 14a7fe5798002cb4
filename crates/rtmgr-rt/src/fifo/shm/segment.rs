//! A shared-memory segment of the cross-process RT-FIFO (budget-based RTAI §2:
//! RTAI_SHM; ARTiS §2.2): named (`shm_open`) or in a descriptor, sized and
//! stamped by its creator, mapped and validated by whoever opens it, and one
//! end of it claimed per process.

use super::header::{off, Geometry};
use super::{FifoError, Role, HEADER_SIZE, MAGIC};
use rtmgr_sys::fd::{file_size, seal_size, shm_open, shm_unlink, truncate};
use rtmgr_sys::mem::SharedMapping;
use rtmgr_sys::process;
use std::ffi::CString;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};

fn shm_name(name: &str) -> Result<CString, FifoError> {
    let body = name.strip_prefix('/').unwrap_or(name);
    if body.is_empty() || body.contains('/') || body.len() > 250 {
        return Err(FifoError::InvalidArgument(
            "shm name must be one non-empty path component",
        ));
    }
    CString::new(format!("/{body}")).map_err(|_| FifoError::InvalidArgument("NUL in shm name"))
}

/// Remove a named segment (existing handles keep working).
pub fn unlink(name: &str) -> Result<(), FifoError> {
    shm_unlink(&shm_name(name)?).map_err(FifoError::os("shm_unlink"))
}

/// A fresh anonymous memory file (memfd) to create a segment in; pass it to the
/// peer over a Unix socket (SCM_RIGHTS) or across fork, then use `*_fd` calls.
pub fn memfd(name: &str) -> Result<OwnedFd, FifoError> {
    if name.contains('\0') {
        return Err(FifoError::InvalidArgument("NUL in memfd name"));
    }
    rtmgr_sys::fd::memfd(name, true).map_err(FifoError::os("memfd_create"))
}

/// A mapped, validated segment with one role claimed.
/// All shared fields are accessed through atomics, and slot access is
/// coordinated by the SPSC protocol, so a segment may move between threads.
pub(super) struct Segment {
    map: SharedMapping,
    pub(super) geo: Geometry,
    role: Role,
    pid: i32,
}

impl Segment {
    pub(super) fn u32_field(&self, o: usize) -> &AtomicU32 {
        debug_assert!(o.is_multiple_of(4) && o + 4 <= HEADER_SIZE);
        // SAFETY: o is an aligned offset inside the mapped header (page-aligned
        // base), and the field is only ever accessed atomically.
        unsafe { &*(self.map.base().as_ptr().add(o) as *const AtomicU32) }
    }

    fn pid_field(&self, role: Role) -> &AtomicI32 {
        let o = match role {
            Role::Producer => off::PRODUCER_PID,
            Role::Consumer => off::CONSUMER_PID,
        };
        // SAFETY: aligned offset inside the mapped header, accessed atomically.
        unsafe { &*(self.map.base().as_ptr().add(o) as *const AtomicI32) }
    }

    #[inline(always)]
    pub(super) fn slot(&self, i: u32) -> *mut u8 {
        debug_assert!(i < self.geo.slots());
        // SAFETY: i < slots was checked by the caller, so the slot lies inside
        // the validated mapping (total_size <= map_len).
        unsafe {
            self.map
                .base()
                .as_ptr()
                .add(HEADER_SIZE + i as usize * self.geo.record_size as usize)
        }
    }

    fn map(fd: BorrowedFd<'_>, len: usize) -> Result<SharedMapping, FifoError> {
        SharedMapping::map(fd, len).map_err(FifoError::os("mmap"))
    }

    /// Size the (empty) file and write a fresh header into it.
    fn create(fd: BorrowedFd<'_>, geo: Geometry, role: Role) -> Result<Self, FifoError> {
        let total = geo.total_size();
        let len = usize::try_from(total).map_err(|_| FifoError::Capacity(geo.capacity))?;
        truncate(fd, total).map_err(FifoError::os("ftruncate"))?;
        // A memfd made with sealing allowed (see `memfd`) is sealed at this
        // size, so no peer can shrink it under a mapping (SIGBUS). Files that
        // cannot be sealed (shm_open) refuse with EINVAL: nothing to do.
        let _ = seal_size(fd);
        let map = Self::map(fd, len)?;
        let base = map.base();
        let fixed = geo.encode();
        // SAFETY: the mapping is `len` >= HEADER_SIZE bytes; nobody validates
        // it before the magic (bytes 0..8) is stored last, with release order.
        unsafe {
            std::ptr::write_bytes(base.as_ptr(), 0, HEADER_SIZE);
            std::ptr::copy_nonoverlapping(
                fixed.as_ptr().add(8),
                base.as_ptr().add(8),
                off::FIXED_END - 8,
            );
            (*(base.as_ptr() as *const AtomicU64)).store(MAGIC, Ordering::Release);
        }
        let seg = Segment {
            map,
            geo,
            role,
            pid: 0,
        };
        seg.claim(role)
    }

    /// Map and validate an existing segment.
    fn open(fd: BorrowedFd<'_>, expect_record_size: u32, role: Role) -> Result<Self, FifoError> {
        let size = file_size(fd).map_err(FifoError::os("fstat"))?;
        if size < HEADER_SIZE as u64 {
            return Err(FifoError::TooSmall {
                size,
                need: HEADER_SIZE as u64,
            });
        }
        let len = usize::try_from(size).map_err(|_| FifoError::Corrupt("segment too large"))?;
        let map = Self::map(fd, len)?;
        let base = map.base();
        let mut seg = Segment {
            map,
            geo: Geometry {
                record_size: 1,
                capacity: 1,
            },
            role,
            pid: 0,
        };
        let mut fixed = [0u8; off::FIXED_END];
        // SAFETY: the mapping is at least HEADER_SIZE bytes. Acquire on the
        // magic orders the reads of the other fixed fields after it.
        unsafe {
            let m = (*(base.as_ptr() as *const AtomicU64)).load(Ordering::Acquire);
            fixed[..8].copy_from_slice(&m.to_ne_bytes());
            std::ptr::copy_nonoverlapping(base.as_ptr().add(8), fixed.as_mut_ptr().add(8), 24);
        }
        seg.geo = Geometry::decode(&fixed, size, expect_record_size)?;
        // From here on only the validated copy of the geometry is used.
        seg.claim(role)
    }

    /// Take the role's pid slot: free, ours, or left by a dead process.
    fn claim(mut self, role: Role) -> Result<Self, FifoError> {
        let me = process::pid();
        let f = self.pid_field(role);
        let mut cur = 0;
        loop {
            match f.compare_exchange(cur, me, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => break,
                Err(other) => {
                    let dead = other != me && process::is_gone(other);
                    if other == 0 || dead {
                        cur = other;
                        continue;
                    }
                    return Err(FifoError::Busy { role, pid: other });
                }
            }
        }
        self.pid = me;
        Ok(self)
    }

    pub(super) fn index(&self, o: usize, what: &'static str) -> Result<u32, FifoError> {
        let i = self.u32_field(o).load(Ordering::Acquire);
        if i >= self.geo.slots() {
            return Err(FifoError::Corrupt(what));
        }
        Ok(i)
    }

    #[inline(always)]
    pub(super) fn next(&self, i: u32) -> u32 {
        if i + 1 == self.geo.slots() {
            0
        } else {
            i + 1
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.pid != 0 {
            let _ = self.pid_field(self.role).compare_exchange(
                self.pid,
                0,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
        // The mapping goes when `map` drops, after this: no reference into
        // it outlives the segment.
    }
}

fn shm_fd(name: &str, create: bool) -> Result<OwnedFd, FifoError> {
    shm_open(&shm_name(name)?, create).map_err(FifoError::os("shm_open"))
}

fn create_named(name: &str, geo: Geometry, role: Role) -> Result<Segment, FifoError> {
    let fd = shm_fd(name, true)?;
    Segment::create(fd_ref(&fd), geo, role).inspect_err(|_| {
        let _ = unlink(name);
    })
}

pub(super) fn fd_ref(fd: &OwnedFd) -> BorrowedFd<'_> {
    use std::os::fd::AsFd;
    fd.as_fd()
}
/// The public ways to open an end, the same for both: `create`, `open`,
/// `create_fd`, `open_fd`, and `with` (any of them; the C API's way).
/// `$role` is the end's `Role`, `$end` its name for the docs.
macro_rules! opening_constructors {
    ($role:expr, $end:literal) => {
        #[doc = concat!("Create the named segment `name` (fails if it exists) and be its ", $end, ".")]
        pub fn create(name: &str, record_size: u32, capacity: u32) -> Result<Self, FifoError> {
            Self::with(
                $crate::fifo::shm::segment::Opening::CreateNamed(name),
                record_size,
                capacity,
            )
        }
        #[doc = concat!("Open the existing named segment as its ", $end, " (0 = any record size).")]
        pub fn open(name: &str, record_size: u32) -> Result<Self, FifoError> {
            Self::with(
                $crate::fifo::shm::segment::Opening::OpenNamed(name),
                record_size,
                0,
            )
        }
        /// Create a segment in the empty file `fd` (e.g. from [`memfd`](super::memfd)).
        pub fn create_fd(
            fd: ::std::os::fd::BorrowedFd<'_>,
            record_size: u32,
            capacity: u32,
        ) -> Result<Self, FifoError> {
            Self::with(
                $crate::fifo::shm::segment::Opening::CreateFd(fd),
                record_size,
                capacity,
            )
        }
        #[doc = concat!("Open the segment in `fd` as its ", $end, ".")]
        pub fn open_fd(
            fd: ::std::os::fd::BorrowedFd<'_>,
            record_size: u32,
        ) -> Result<Self, FifoError> {
            Self::with(
                $crate::fifo::shm::segment::Opening::OpenFd(fd),
                record_size,
                0,
            )
        }

        /// Open this end in any of the four ways (`capacity` only when creating).
        pub(crate) fn with(
            o: $crate::fifo::shm::segment::Opening<'_>,
            record_size: u32,
            capacity: u32,
        ) -> Result<Self, FifoError> {
            Self::from_segment(o.segment(record_size, capacity, $role)?)
        }
    };
}
pub(super) use opening_constructors;

/// How an end gets its segment: the four ways both ends share.
pub(crate) enum Opening<'a> {
    CreateNamed(&'a str),
    OpenNamed(&'a str),
    CreateFd(BorrowedFd<'a>),
    OpenFd(BorrowedFd<'a>),
}

impl Opening<'_> {
    /// `capacity` is used only when creating.
    pub(super) fn segment(
        self,
        record_size: u32,
        capacity: u32,
        role: Role,
    ) -> Result<Segment, FifoError> {
        match self {
            Opening::CreateNamed(name) => {
                create_named(name, Geometry::new(record_size, capacity)?, role)
            }
            Opening::OpenNamed(name) => {
                Segment::open(fd_ref(&shm_fd(name, false)?), record_size, role)
            }
            Opening::CreateFd(fd) => {
                Segment::create(fd, Geometry::new(record_size, capacity)?, role)
            }
            Opening::OpenFd(fd) => Segment::open(fd, record_size, role),
        }
    }
}
