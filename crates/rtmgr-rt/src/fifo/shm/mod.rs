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
//! shared futex (at most [`SAFETY_POLL`](crate::fifo::shm::SAFETY_POLL) at a time). The producer publishes
//! `tail`, then reads `waiting`, and makes the `FUTEX_WAKE` system call only
//! when that flag was set. With [`Wake::Fenced`](crate::fifo::shm::Wake::Fenced) (default) both sides use
//! sequentially consistent operations (Dekker-style: one always sees the
//! other); [`Wake::Lazy`](crate::fifo::shm::Wake::Lazy) drops the producer's fence, see there.
//!
//! Files: `header.rs` (the offsets above and [`Geometry`](crate::fifo::shm::Geometry), which validates a
//! header read from an untrusted segment), `segment.rs` (naming, creating,
//! mapping and opening a segment; claiming one end of it), `producer.rs` and
//! `consumer.rs` (the two ends).

mod consumer;
mod header;
mod producer;
mod segment;
#[cfg(test)]
mod tests;

pub use consumer::ShmConsumer;
pub use header::Geometry;
pub use producer::ShmProducer;
pub(crate) use segment::Opening;
pub use segment::{memfd, unlink};

use std::io;
use std::time::Duration;

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
