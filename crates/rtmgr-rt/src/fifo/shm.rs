//! The cross-process RT-FIFO (budget-based RTAI §2: RTAI_FIFO/RTAI_SHM hand
//! data from real-time to Linux tasks; ARTiS §2.2: one writer, one reader,
//! wait-free): fixed-size byte records in a shared-memory ring.
//!
//! The segment (POSIX `shm_open` by name, or any fd such as a memfd passed
//! over a Unix socket or inherited across fork) holds a versioned header and
//! the slots; it contains no pointers. Layout (offsets in bytes, native endian):
//!
//! | offset | field | written by |
//! |---|---|---|
//! | 0 | magic `RTMGRFIF` (u64, written last at creation) | creator |
//! | 8 | version (u32) · 12 header size (u32) | creator |
//! | 16 | record size (u32) · 20 capacity (u32) · 24 total size (u64) | creator |
//! | 128 | tail (u32) · 132 producer pid (i32) | producer |
//! | 256 | head (u32) · 260 consumer pid (i32) | consumer |
//! | 384 | waiting (u32, futex word; its own line: the producer reads it on every push) | consumer (set), producer (clear) |
//! | 512 | `capacity + 1` slots of `record size` bytes | both |
//!
//! Opening validates magic, version, header size, record size, capacity and
//! that the mapping is as large as the header says; indices read from the
//! segment are bounds-checked on every use, so a corrupt or hostile peer can
//! make calls fail but never makes this side read or write out of bounds.
//!
//! Blocking: the consumer sets `waiting`, re-checks `tail`, and sleeps on a
//! shared futex (at most [`SAFETY_POLL`] at a time). The producer publishes
//! `tail`, then reads `waiting`, and makes the `FUTEX_WAKE` system call only
//! when that flag was set. With [`Wake::Fenced`] (default) both sides use
//! sequentially consistent operations (Dekker-style: one always sees the
//! other); [`Wake::Lazy`] drops the producer's fence, see there.

use rtmgr_sys::fd::{file_size, seal_size, shm_open, shm_unlink, truncate};
use rtmgr_sys::mem::SharedMapping;
use rtmgr_sys::{futex, process};
use std::ffi::CString;
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// `RTMGRFIF` as a native-endian u64.
pub const MAGIC: u64 = u64::from_ne_bytes(*b"RTMGRFIF");
/// Layout version this code reads and writes.
pub const VERSION: u32 = 1;
/// Size of the header; the slots start here.
pub const HEADER_SIZE: usize = 512;
/// Largest record accepted (a sanity bound for headers read from outside).
pub const MAX_RECORD_SIZE: u32 = 1 << 20;
/// Largest capacity accepted.
pub const MAX_CAPACITY: u32 = 1 << 28;
/// A sleeping consumer re-checks the FIFO at least this often, so that a
/// wake-up missed under [`Wake::Lazy`] delays it by at most this much.
pub const SAFETY_POLL: Duration = Duration::from_millis(10);

/// How the producer tells a sleeping consumer that data arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wake {
    /// Publish `tail` with a sequentially consistent exchange, then read the
    /// consumer's `waiting` flag: a sleeping consumer is never missed, but
    /// every push pays a full fence (it waits for the `tail` cache line).
    #[default]
    Fenced,
    /// Publish `tail` with a plain release store and read `waiting` without a
    /// fence: cheapest push; in a rare race (the consumer goes to sleep while
    /// the new `tail` is still in the producer's store buffer) the consumer
    /// wakes on its [`SAFETY_POLL`] timeout instead, and counts a late wake-up.
    Lazy,
}

/// Which end of the channel a handle is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Producer,
    Consumer,
}

/// Everything that can go wrong creating, opening or using a segment.
#[derive(Debug, thiserror::Error)]
pub enum FifoError {
    #[error("{op}: {source}")]
    Os {
        op: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    #[error("segment is {size} bytes, smaller than {need}")]
    TooSmall { size: u64, need: u64 },
    #[error("segment has no RT-FIFO magic (not an RT-FIFO, or its creator has not finished)")]
    BadMagic,
    #[error("segment has layout version {found}, this library reads version {VERSION}")]
    Version { found: u32 },
    #[error("segment header size is {found}, expected {HEADER_SIZE}")]
    HeaderSize { found: u32 },
    #[error("segment has {found}-byte records, caller expects {expected}")]
    RecordSize { found: u32, expected: u32 },
    #[error("segment capacity {0} is out of range (1..={MAX_CAPACITY})")]
    Capacity(u32),
    #[error("segment header says {header} bytes, its geometry needs {computed}")]
    Geometry { header: u64, computed: u64 },
    #[error("segment is corrupt: {0}")]
    Corrupt(&'static str),
    #[error("the {role:?} end is already held by live process {pid}")]
    Busy { role: Role, pid: i32 },
    #[error("record is {got} bytes, the channel carries {want}-byte records")]
    RecordLength { got: usize, want: usize },
}

impl FifoError {
    fn os(op: &'static str) -> impl FnOnce(io::Error) -> Self {
        move |source| FifoError::Os { op, source }
    }
}

/// Byte offsets of the header fields (the table in the module doc).
mod off {
    pub const MAGIC: usize = 0;
    pub const VERSION: usize = 8;
    pub const HEADER_SIZE: usize = 12;
    pub const RECORD_SIZE: usize = 16;
    pub const CAPACITY: usize = 20;
    pub const TOTAL_SIZE: usize = 24;
    /// End of the immutable part.
    pub const FIXED_END: usize = 32;
    pub const TAIL: usize = 128;
    pub const PRODUCER_PID: usize = 132;
    pub const HEAD: usize = 256;
    pub const CONSUMER_PID: usize = 260;
    /// Not on the `head` line, which the consumer writes on every pop.
    pub const WAITING: usize = 384;
}

/// Validated shape of a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub record_size: u32,
    pub capacity: u32,
}

impl Geometry {
    /// Check the arguments of a new segment.
    pub fn new(record_size: u32, capacity: u32) -> Result<Self, FifoError> {
        if record_size == 0 || record_size > MAX_RECORD_SIZE {
            return Err(FifoError::InvalidArgument("record size must be 1..=1 MiB"));
        }
        if capacity == 0 || capacity > MAX_CAPACITY {
            return Err(FifoError::Capacity(capacity));
        }
        Ok(Geometry {
            record_size,
            capacity,
        })
    }

    /// Number of slots (one stays empty so that full ≠ empty).
    pub fn slots(&self) -> u32 {
        self.capacity + 1
    }

    /// Bytes of the whole segment.
    pub fn total_size(&self) -> u64 {
        HEADER_SIZE as u64 + u64::from(self.slots()) * u64::from(self.record_size)
    }

    /// The immutable header prefix for this geometry.
    pub fn encode(&self) -> [u8; off::FIXED_END] {
        let mut b = [0u8; off::FIXED_END];
        b[off::MAGIC..off::MAGIC + 8].copy_from_slice(&MAGIC.to_ne_bytes());
        b[off::VERSION..off::VERSION + 4].copy_from_slice(&VERSION.to_ne_bytes());
        b[off::HEADER_SIZE..off::HEADER_SIZE + 4]
            .copy_from_slice(&(HEADER_SIZE as u32).to_ne_bytes());
        b[off::RECORD_SIZE..off::RECORD_SIZE + 4].copy_from_slice(&self.record_size.to_ne_bytes());
        b[off::CAPACITY..off::CAPACITY + 4].copy_from_slice(&self.capacity.to_ne_bytes());
        b[off::TOTAL_SIZE..off::TOTAL_SIZE + 8].copy_from_slice(&self.total_size().to_ne_bytes());
        b
    }

    /// Validate the immutable header prefix of a segment whose mapping is
    /// `map_len` bytes long. `expect_record_size` 0 accepts any record size.
    pub fn decode(
        b: &[u8; off::FIXED_END],
        map_len: u64,
        expect_record_size: u32,
    ) -> Result<Self, FifoError> {
        let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_ne_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        if map_len < HEADER_SIZE as u64 {
            return Err(FifoError::TooSmall {
                size: map_len,
                need: HEADER_SIZE as u64,
            });
        }
        if u64_at(off::MAGIC) != MAGIC {
            return Err(FifoError::BadMagic);
        }
        let version = u32_at(off::VERSION);
        if version != VERSION {
            return Err(FifoError::Version { found: version });
        }
        let hs = u32_at(off::HEADER_SIZE);
        if hs as usize != HEADER_SIZE {
            return Err(FifoError::HeaderSize { found: hs });
        }
        let record_size = u32_at(off::RECORD_SIZE);
        if expect_record_size != 0 && record_size != expect_record_size {
            return Err(FifoError::RecordSize {
                found: record_size,
                expected: expect_record_size,
            });
        }
        if record_size == 0 || record_size > MAX_RECORD_SIZE {
            return Err(FifoError::Corrupt("record size out of range"));
        }
        let capacity = u32_at(off::CAPACITY);
        let g = Geometry::new(record_size, capacity)?;
        let header = u64_at(off::TOTAL_SIZE);
        if header != g.total_size() {
            return Err(FifoError::Geometry {
                header,
                computed: g.total_size(),
            });
        }
        if map_len < header {
            return Err(FifoError::TooSmall {
                size: map_len,
                need: header,
            });
        }
        Ok(g)
    }
}

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
struct Segment {
    map: SharedMapping,
    geo: Geometry,
    role: Role,
    pid: i32,
}

impl Segment {
    fn u32_field(&self, o: usize) -> &AtomicU32 {
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
    fn slot(&self, i: u32) -> *mut u8 {
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

    fn index(&self, o: usize, what: &'static str) -> Result<u32, FifoError> {
        let i = self.u32_field(o).load(Ordering::Acquire);
        if i >= self.geo.slots() {
            return Err(FifoError::Corrupt(what));
        }
        Ok(i)
    }

    #[inline(always)]
    fn next(&self, i: u32) -> u32 {
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

fn fd_ref(fd: &OwnedFd) -> BorrowedFd<'_> {
    use std::os::fd::AsFd;
    fd.as_fd()
}

/// The writing end: never blocks; `try_push` is wait-free and makes a system
/// call only when the consumer sleeps.
pub struct ShmProducer {
    seg: Segment,
    tail: u32,
    head_cache: u32,
    /// Number of futex wake-ups issued (for tests and benchmarks).
    wakeups: u64,
    wake: Wake,
}

/// The reading end: `try_pop` is wait-free; `pop_timeout` may sleep.
pub struct ShmConsumer {
    seg: Segment,
    head: u32,
    tail_cache: u32,
    late_wakeups: u64,
}

/// How an end gets its segment: the four ways both ends share.
pub(crate) enum Opening<'a> {
    CreateNamed(&'a str),
    OpenNamed(&'a str),
    CreateFd(BorrowedFd<'a>),
    OpenFd(BorrowedFd<'a>),
}

impl Opening<'_> {
    /// `capacity` is used only when creating.
    fn segment(self, record_size: u32, capacity: u32, role: Role) -> Result<Segment, FifoError> {
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

impl ShmProducer {
    const ROLE: Role = Role::Producer;

    /// Create the named segment `name` (fails if it exists) and be its producer.
    pub fn create(name: &str, record_size: u32, capacity: u32) -> Result<Self, FifoError> {
        Self::with(Opening::CreateNamed(name), record_size, capacity)
    }
    /// Open the existing named segment as its producer (0 = any record size).
    pub fn open(name: &str, record_size: u32) -> Result<Self, FifoError> {
        Self::with(Opening::OpenNamed(name), record_size, 0)
    }
    /// Create a segment in the empty file `fd` (e.g. from [`memfd`]).
    pub fn create_fd(
        fd: BorrowedFd<'_>,
        record_size: u32,
        capacity: u32,
    ) -> Result<Self, FifoError> {
        Self::with(Opening::CreateFd(fd), record_size, capacity)
    }
    /// Open the segment in `fd` as its producer.
    pub fn open_fd(fd: BorrowedFd<'_>, record_size: u32) -> Result<Self, FifoError> {
        Self::with(Opening::OpenFd(fd), record_size, 0)
    }

    /// Open this end in any of the four ways (`capacity` only when creating).
    pub(crate) fn with(o: Opening<'_>, record_size: u32, capacity: u32) -> Result<Self, FifoError> {
        Self::from_segment(o.segment(record_size, capacity, Self::ROLE)?)
    }

    fn from_segment(seg: Segment) -> Result<Self, FifoError> {
        let tail = seg.index(off::TAIL, "tail index out of range")?;
        let head_cache = seg.index(off::HEAD, "head index out of range")?;
        Ok(ShmProducer {
            seg,
            tail,
            head_cache,
            wakeups: 0,
            wake: Wake::default(),
        })
    }

    /// Append one record (exactly `record_size` bytes). `Ok(false)` when full.
    #[inline]
    pub fn try_push(&mut self, rec: &[u8]) -> Result<bool, FifoError> {
        let want = self.seg.geo.record_size as usize;
        if rec.len() != want {
            return Err(FifoError::RecordLength {
                got: rec.len(),
                want,
            });
        }
        let next = self.seg.next(self.tail);
        if next == self.head_cache {
            self.head_cache = self.seg.index(off::HEAD, "head index out of range")?;
            if next == self.head_cache {
                return Ok(false);
            }
        }
        // SAFETY: slot `tail` < slots is outside head..tail: the consumer does
        // not read it until the store below publishes it; rec has `want` bytes.
        unsafe { std::ptr::copy_nonoverlapping(rec.as_ptr(), self.seg.slot(self.tail), want) };
        self.tail = next;
        let waiting = self.seg.u32_field(off::WAITING);
        let announced = match self.wake {
            // SeqCst exchange, then SeqCst load of `waiting`: pairs with the
            // consumer's SeqCst store of `waiting` then load of `tail`.
            Wake::Fenced => {
                self.seg.u32_field(off::TAIL).swap(next, Ordering::SeqCst);
                waiting.load(Ordering::SeqCst)
            }
            Wake::Lazy => {
                self.seg.u32_field(off::TAIL).store(next, Ordering::Release);
                waiting.load(Ordering::Relaxed)
            }
        };
        if announced != 0 && waiting.swap(0, Ordering::SeqCst) != 0 {
            let _ = futex::wake(waiting, 1);
            self.wakeups += 1;
        }
        Ok(true)
    }

    /// Records the queue holds at most.
    pub fn capacity(&self) -> u32 {
        self.seg.geo.capacity
    }
    /// Bytes per record.
    pub fn record_size(&self) -> u32 {
        self.seg.geo.record_size
    }
    /// Choose the wake-up protocol (default [`Wake::Fenced`]).
    pub fn set_wake(&mut self, wake: Wake) {
        self.wake = wake;
    }
    /// How many futex wake-ups this handle has made.
    pub fn wakeups(&self) -> u64 {
        self.wakeups
    }
}

impl ShmConsumer {
    const ROLE: Role = Role::Consumer;

    /// Create the named segment `name` (fails if it exists) and be its consumer.
    pub fn create(name: &str, record_size: u32, capacity: u32) -> Result<Self, FifoError> {
        Self::with(Opening::CreateNamed(name), record_size, capacity)
    }
    /// Open the existing named segment as its consumer (0 = any record size).
    pub fn open(name: &str, record_size: u32) -> Result<Self, FifoError> {
        Self::with(Opening::OpenNamed(name), record_size, 0)
    }
    /// Create a segment in the empty file `fd` (e.g. from [`memfd`]).
    pub fn create_fd(
        fd: BorrowedFd<'_>,
        record_size: u32,
        capacity: u32,
    ) -> Result<Self, FifoError> {
        Self::with(Opening::CreateFd(fd), record_size, capacity)
    }
    /// Open the segment in `fd` as its consumer.
    pub fn open_fd(fd: BorrowedFd<'_>, record_size: u32) -> Result<Self, FifoError> {
        Self::with(Opening::OpenFd(fd), record_size, 0)
    }

    /// Open this end in any of the four ways (`capacity` only when creating).
    pub(crate) fn with(o: Opening<'_>, record_size: u32, capacity: u32) -> Result<Self, FifoError> {
        Self::from_segment(o.segment(record_size, capacity, Self::ROLE)?)
    }

    fn from_segment(seg: Segment) -> Result<Self, FifoError> {
        let head = seg.index(off::HEAD, "head index out of range")?;
        let tail_cache = seg.index(off::TAIL, "tail index out of range")?;
        Ok(ShmConsumer {
            seg,
            head,
            tail_cache,
            late_wakeups: 0,
        })
    }

    /// Take the oldest record into `buf` (exactly `record_size` bytes).
    /// `Ok(false)` when empty. Wait-free, no system call.
    #[inline]
    pub fn try_pop(&mut self, buf: &mut [u8]) -> Result<bool, FifoError> {
        let want = self.seg.geo.record_size as usize;
        if buf.len() != want {
            return Err(FifoError::RecordLength {
                got: buf.len(),
                want,
            });
        }
        Ok(self.try_pop_with(|rec| buf.copy_from_slice(rec))?.is_some())
    }

    /// Zero-copy pop: run `f` on the oldest record in place, then release its
    /// slot. `Ok(None)` when empty. If this process dies inside `f`, the record
    /// is still in the FIFO and the next consumer gets it again.
    #[inline]
    pub fn try_pop_with<R>(&mut self, f: impl FnOnce(&[u8]) -> R) -> Result<Option<R>, FifoError> {
        if self.head == self.tail_cache {
            self.tail_cache = self.seg.index(off::TAIL, "tail index out of range")?;
            if self.head == self.tail_cache {
                return Ok(None);
            }
        }
        // SAFETY: slot `head` < slots lies inside the mapping and is in
        // head..tail: published by the producer's store of `tail`, which we
        // acquired, and not written again until we store the new `head`.
        let rec = unsafe {
            std::slice::from_raw_parts(self.seg.slot(self.head), self.seg.geo.record_size as usize)
        };
        let r = f(rec);
        self.head = self.seg.next(self.head);
        self.seg
            .u32_field(off::HEAD)
            .store(self.head, Ordering::Release);
        Ok(Some(r))
    }

    /// Sleep until a record is waiting (`Ok(true)`) or `timeout` (`None`:
    /// forever) has passed (`Ok(false)`). Spins on nothing: if empty, it
    /// announces itself in `waiting` and sleeps on the futex.
    pub fn wait(&mut self, timeout: Option<Duration>) -> Result<bool, FifoError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if self.head != self.tail_cache {
                return Ok(true);
            }
            self.tail_cache = self.seg.index(off::TAIL, "tail index out of range")?;
            if self.head != self.tail_cache {
                return Ok(true);
            }
            let remaining = match deadline {
                None => None,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(r) if !r.is_zero() => Some(r),
                    _ => return Ok(false),
                },
            };
            let waiting = self.seg.u32_field(off::WAITING);
            // SeqCst store, then SeqCst load of `tail`: pairs with the
            // producer's SeqCst exchange of `tail`, then load of `waiting`.
            waiting.store(1, Ordering::SeqCst);
            let tail = self.seg.u32_field(off::TAIL).load(Ordering::SeqCst);
            if tail != self.head {
                waiting.store(0, Ordering::Relaxed);
                continue;
            }
            let nap = remaining.map_or(SAFETY_POLL, |r| r.min(SAFETY_POLL));
            // Returns on wake, timeout, EINTR, or EAGAIN (producer already cleared the flag).
            let timed_out = matches!(futex::wait(waiting, 1, Some(nap)),
                Err(e) if e.raw_os_error() == Some(libc::ETIMEDOUT));
            waiting.store(0, Ordering::Relaxed);
            if timed_out && self.seg.u32_field(off::TAIL).load(Ordering::Acquire) != self.head {
                // Data arrived but no wake-up came: the Lazy race (see `Wake`).
                self.late_wakeups += 1;
            }
        }
    }

    /// Take the oldest record, sleeping up to `timeout` (`None`: forever)
    /// until one arrives. `Ok(false)` on timeout.
    pub fn pop_timeout(
        &mut self,
        buf: &mut [u8],
        timeout: Option<Duration>,
    ) -> Result<bool, FifoError> {
        if self.wait(timeout)? {
            self.try_pop(buf)
        } else {
            Ok(false)
        }
    }

    /// How often a sleep ended on the safety-poll timeout with data waiting
    /// (a wake-up missed by a [`Wake::Lazy`] producer, or data that arrived
    /// just as the timeout expired; the latter is the only cause with `Fenced`).
    pub fn late_wakeups(&self) -> u64 {
        self.late_wakeups
    }

    /// Records waiting right now.
    pub fn len(&mut self) -> Result<u32, FifoError> {
        self.tail_cache = self.seg.index(off::TAIL, "tail index out of range")?;
        let n = self.seg.geo.slots();
        Ok((self.tail_cache + n - self.head) % n)
    }
    /// True when no record is waiting right now.
    pub fn is_empty(&mut self) -> Result<bool, FifoError> {
        Ok(self.len()? == 0)
    }
    /// Records the queue holds at most.
    pub fn capacity(&self) -> u32 {
        self.seg.geo.capacity
    }
    /// Bytes per record.
    pub fn record_size(&self) -> u32 {
        self.seg.geo.record_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn pair(rs: u32, cap: u32) -> (ShmProducer, ShmConsumer, OwnedFd) {
        let fd = memfd("rtf-test").unwrap();
        let p = ShmProducer::create_fd(fd_ref(&fd), rs, cap).unwrap();
        let c = ShmConsumer::open_fd(fd_ref(&fd), rs).unwrap();
        (p, c, fd)
    }

    #[test]
    fn fifo_shm_push_pop_full_empty() {
        let (mut p, mut c, _fd) = pair(8, 3);
        let mut buf = [0u8; 8];
        assert!(!c.try_pop(&mut buf).unwrap());
        for i in 0u64..3 {
            assert!(p.try_push(&i.to_ne_bytes()).unwrap());
        }
        assert!(!p.try_push(&9u64.to_ne_bytes()).unwrap());
        assert_eq!(c.len().unwrap(), 3);
        for i in 0u64..3 {
            assert!(c.try_pop(&mut buf).unwrap());
            assert_eq!(u64::from_ne_bytes(buf), i);
        }
        assert!(c.is_empty().unwrap());
        assert!(matches!(
            p.try_push(&[1]),
            Err(FifoError::RecordLength { got: 1, want: 8 })
        ));
        assert_eq!(p.wakeups(), 0, "no consumer slept, so no system call");
    }

    #[test]
    fn fifo_shm_memfd_is_sealed_against_shrinking() {
        let (_p, _c, fd) = pair(8, 4);
        let e = truncate(fd_ref(&fd), 10).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EPERM));
    }

    #[test]
    fn fifo_shm_roles_are_exclusive_and_released() {
        let (p, c, fd) = pair(4, 2);
        assert!(matches!(
            ShmConsumer::open_fd(fd_ref(&fd), 4),
            Err(FifoError::Busy {
                role: Role::Consumer,
                ..
            })
        ));
        assert!(matches!(
            ShmProducer::open_fd(fd_ref(&fd), 4),
            Err(FifoError::Busy {
                role: Role::Producer,
                ..
            })
        ));
        drop(c);
        drop(p);
        ShmConsumer::open_fd(fd_ref(&fd), 4).unwrap();
    }

    #[test]
    fn fifo_shm_reopen_keeps_position_and_data() {
        let (mut p, c, fd) = pair(4, 8);
        for i in 0u32..5 {
            p.try_push(&i.to_ne_bytes()).unwrap();
        }
        drop(c);
        let mut c = ShmConsumer::open_fd(fd_ref(&fd), 0).unwrap();
        let mut buf = [0u8; 4];
        for i in 0u32..5 {
            assert!(c.try_pop(&mut buf).unwrap());
            assert_eq!(u32::from_ne_bytes(buf), i);
        }
    }

    #[test]
    fn fifo_shm_blocking_pop_wakes_and_times_out() {
        let (mut p, mut c, _fd) = pair(8, 4);
        let mut buf = [0u8; 8];
        let t0 = Instant::now();
        assert!(!c
            .pop_timeout(&mut buf, Some(Duration::from_millis(20)))
            .unwrap());
        assert!(t0.elapsed() >= Duration::from_millis(20));
        let h = std::thread::spawn(move || {
            let mut buf = [0u8; 8];
            let ok = c
                .pop_timeout(&mut buf, Some(Duration::from_secs(10)))
                .unwrap();
            (ok, u64::from_ne_bytes(buf))
        });
        std::thread::sleep(Duration::from_millis(50));
        p.try_push(&42u64.to_ne_bytes()).unwrap();
        assert_eq!(h.join().unwrap(), (true, 42));
        assert_eq!(p.wakeups(), 1, "one sleeping consumer, one wake-up");
    }

    #[test]
    fn fifo_shm_lazy_wake_still_delivers() {
        let (mut p, mut c, _fd) = pair(8, 4);
        p.set_wake(Wake::Lazy);
        let h = std::thread::spawn(move || {
            let mut buf = [0u8; 8];
            let ok = c
                .pop_timeout(&mut buf, Some(Duration::from_secs(10)))
                .unwrap();
            (ok, u64::from_ne_bytes(buf), c.late_wakeups())
        });
        std::thread::sleep(Duration::from_millis(50));
        p.try_push(&7u64.to_ne_bytes()).unwrap();
        let (ok, v, late) = h.join().unwrap();
        assert_eq!((ok, v), (true, 7));
        assert_eq!(
            p.wakeups() + late,
            1,
            "woken by the producer or by the safety poll"
        );
    }

    #[test]
    fn fifo_shm_corrupt_index_is_an_error() {
        let (mut p, mut c, _fd) = pair(4, 2);
        c.seg.u32_field(off::TAIL).store(1000, Ordering::Relaxed);
        let mut buf = [0u8; 4];
        assert!(matches!(c.try_pop(&mut buf), Err(FifoError::Corrupt(_))));
        p.seg.u32_field(off::HEAD).store(77, Ordering::Relaxed);
        p.head_cache = 1; // force a reload (next == head_cache)
        p.tail = 0;
        assert!(matches!(p.try_push(&[0; 4]), Err(FifoError::Corrupt(_))));
    }

    proptest! {
        #[test]
        fn fifo_header_roundtrip(rs in 1u32..=MAX_RECORD_SIZE, cap in 1u32..=MAX_CAPACITY, extra in 0u64..4096) {
            let g = Geometry::new(rs, cap).unwrap();
            prop_assert_eq!(Geometry::decode(&g.encode(), g.total_size() + extra, rs).unwrap(), g);
            prop_assert_eq!(Geometry::decode(&g.encode(), g.total_size(), 0).unwrap(), g);
        }

        #[test]
        fn fifo_header_any_byte_change_is_rejected(rs in 1u32..=4096, cap in 1u32..=100_000, at in 0usize..32, x in 1u8..=255) {
            let g = Geometry::new(rs, cap).unwrap();
            let mut b = g.encode();
            b[at] ^= x;
            prop_assert!(Geometry::decode(&b, u64::MAX, rs).is_err());
        }

        #[test]
        fn fifo_header_short_mapping_is_rejected(rs in 1u32..=4096, cap in 1u32..=100_000, short in 1u64..100_000) {
            let g = Geometry::new(rs, cap).unwrap();
            let len = g.total_size().saturating_sub(short);
            let is_too_small = matches!(Geometry::decode(&g.encode(), len, rs), Err(FifoError::TooSmall { .. }));
            prop_assert!(is_too_small);
        }

        #[test]
        fn fifo_header_wrong_record_size_is_rejected(rs in 1u32..=4096, other in 1u32..=4096, cap in 1u32..=1000) {
            prop_assume!(rs != other);
            let g = Geometry::new(rs, cap).unwrap();
            let is_rs = matches!(Geometry::decode(&g.encode(), g.total_size(), other), Err(FifoError::RecordSize { .. }));
            prop_assert!(is_rs);
        }

        #[test]
        fn fifo_header_random_bytes_never_accepted_inconsistently(b in proptest::array::uniform32(any::<u8>()), len in any::<u64>()) {
            if let Ok(g) = Geometry::decode(&b, len, 0) {
                prop_assert!(g.total_size() <= len);
                prop_assert_eq!(g.encode(), b);
            }
        }
    }
}
