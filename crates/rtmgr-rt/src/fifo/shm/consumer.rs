//! The reading end of the cross-process RT-FIFO (ARTiS §2.2; budget-based
//! RTAI §2: a Linux task reads what the real-time task wrote): wait-free
//! `try_pop`, and a futex sleep that the producer's wake-up ends.

use super::header::off;
use super::segment::{opening_constructors, Segment};
use super::{FifoError, Role, SAFETY_POLL};
use rtmgr_sys::futex;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// The reading end: `try_pop` is wait-free; `pop_timeout` may sleep.
pub struct ShmConsumer {
    pub(super) seg: Segment,
    head: u32,
    tail_cache: u32,
    late_wakeups: u64,
}

impl ShmConsumer {
    opening_constructors!(Role::Consumer, "consumer");

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
    /// (a wake-up missed by a [`Wake::Lazy`](super::Wake::Lazy) producer, or data that arrived
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
