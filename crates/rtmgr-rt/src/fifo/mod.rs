//! The RT-FIFO (ARTiS §2.2; budget-based RTAI §2, RTAI_FIFO/RTAI_SHM): a
//! wait-free single-producer/single-consumer channel through which a real-time
//! task hands data to ordinary tasks without locks, allocation or system calls.
//!
//! * [`ring`] — in-process queue for `T: Send` (the one to use).
//! * [`list`] — the seed's Valois list with a dummy node and preallocated
//!   nodes, kept as the measured alternative.
//! * [`shm`] — cross-process channel of fixed-size byte records in shared
//!   memory; the consumer may sleep on a futex, the producer never blocks.
//! * [`capi`] — the `rtf_*` C API (`include/rtmgr.h`), after RTAI's `rtf_*`.
//!
//! # Ring or list? (decided by measurement)
//!
//! The seed's list is wait-free with one reader and one writer, but every
//! hand-off touches a node (`next` pointer + value) that was last written by
//! the other CPU, and the producer writes the previous node's `next`, so each
//! value costs at least two cache-line transfers, and the node chain defeats
//! the prefetcher. The ring keeps values contiguous and lets each side cache
//! the other's index, so the shared index lines move only when one side
//! catches up with the other. Measured with
//! `cargo bench -p rtmgr-rt --bench fifo_xproc -- --rt` (pinned threads on
//! two CPUs, u64 values, capacity 1024, 2 vCPU VM; docs/fifo.md):
//! the ring moves 2.1–2.4× as many values per second as the list in every run;
//! hand-off latency p50 is the same (~100 ns). The ring is what
//! [`ring::channel`] and [`shm`] use.
//!
//! # loom
//! `RUSTFLAGS="--cfg loom" cargo test -p rtmgr-rt --release --lib fifo_loom`
//! model-checks both in-process queues.

pub mod list;
pub mod ring;
mod sync;

pub mod capi;
/// cbindgen:ignore
pub mod shm;

#[cfg(all(test, loom))]
mod loom_tests;

pub use list::{list_channel, ListConsumer, ListProducer};
pub use ring::{channel, Consumer, Full, Producer};
