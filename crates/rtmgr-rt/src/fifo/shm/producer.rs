//! The writing end of the cross-process RT-FIFO (ARTiS §2.2: the real-time
//! side never blocks): wait-free `try_push`, and a futex wake-up only when the
//! consumer announced that it sleeps.

use super::header::off;
use super::segment::{opening_constructors, Segment};
use super::{FifoError, Role, Wake};
use rtmgr_sys::futex;
use std::sync::atomic::Ordering;

/// The writing end: never blocks; `try_push` is wait-free and makes a system
/// call only when the consumer sleeps.
pub struct ShmProducer {
    pub(super) seg: Segment,
    pub(super) tail: u32,
    pub(super) head_cache: u32,
    /// Number of futex wake-ups issued (for tests and benchmarks).
    wakeups: u64,
    wake: Wake,
}

impl ShmProducer {
    opening_constructors!(Role::Producer, "producer");

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
