//! The in-process RT-FIFO (ARTiS §2.2 semantics: one reader, one writer,
//! wait-free, no allocation after creation), as a bounded ring with cached
//! indices. Chosen over the Valois list by measurement: see the `fifo` module doc.

use super::sync::{Arc, AtomicUsize, CachePadded, Ordering, UnsafeCell};
use core::mem::MaybeUninit;

/// A push that found the queue full; gives the value back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Full<T>(pub T);

impl<T> core::fmt::Display for Full<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("RT-FIFO is full")
    }
}

impl<T: core::fmt::Debug> std::error::Error for Full<T> {}

struct Shared<T> {
    /// Next slot the consumer reads; written only by the consumer.
    head: CachePadded<AtomicUsize>,
    /// Next slot the producer writes; written only by the producer.
    tail: CachePadded<AtomicUsize>,
    /// `capacity + 1` slots: one always stays empty so full ≠ empty.
    slots: Box<[UnsafeCell<MaybeUninit<T>>]>,
}

// SAFETY: the slots are handed from one thread to the other through the
// release/acquire pair on `tail` (filled) and `head` (emptied); each slot is
// accessed by one side at a time, so sharing needs only `T: Send`.
unsafe impl<T: Send> Sync for Shared<T> {}
// SAFETY: as above; the values themselves move between threads.
unsafe impl<T: Send> Send for Shared<T> {}
// SAFETY: each end owns its side of the protocol; the raw `slots` pointer
// points into the `Arc`-owned allocation the end keeps alive.
unsafe impl<T: Send> Send for Producer<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Consumer<T> {}

/// `i` modulo `len` for `i <= len`.
#[inline(always)]
fn wrap(i: usize, len: usize) -> usize {
    if i == len {
        0
    } else {
        i
    }
}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        // Both ends are gone: drop what was pushed and never popped.
        let mut i = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        while i != tail {
            // SAFETY: slots in head..tail hold initialised values and no one
            // else can access them any more (we are the last owner).
            self.slots[i].with_mut(|p| unsafe { (*p).assume_init_drop() });
            i = wrap(i + 1, self.slots.len());
        }
    }
}

/// The writing end. Not `Clone`: exactly one producer.
pub struct Producer<T> {
    shared: Arc<Shared<T>>,
    /// `shared.slots` base and length, cached to skip the indirection and bounds check.
    slots: *const UnsafeCell<MaybeUninit<T>>,
    len: usize,
    tail: usize,
    /// The consumer's index as last seen; refreshed only when the ring looks full.
    head_cache: usize,
}

/// The reading end. Not `Clone`: exactly one consumer.
pub struct Consumer<T> {
    shared: Arc<Shared<T>>,
    /// `shared.slots` base and length, cached to skip the indirection and bounds check.
    slots: *const UnsafeCell<MaybeUninit<T>>,
    len: usize,
    head: usize,
    /// The producer's index as last seen; refreshed only when the ring looks empty.
    tail_cache: usize,
}

/// Create a queue holding up to `capacity` values (allocated here, once).
///
/// # Panics
/// If `capacity` is 0 or the storage size overflows.
pub fn channel<T: Send>(capacity: usize) -> (Producer<T>, Consumer<T>) {
    assert!(capacity > 0, "RT-FIFO capacity must be at least 1");
    let n = capacity.checked_add(1).expect("RT-FIFO capacity overflows");
    let slots = (0..n)
        .map(|_| UnsafeCell::new(MaybeUninit::uninit()))
        .collect();
    let shared = Arc::new(Shared {
        head: CachePadded(AtomicUsize::new(0)),
        tail: CachePadded(AtomicUsize::new(0)),
        slots,
    });
    let base = shared.slots.as_ptr();
    let len = shared.slots.len();
    (
        Producer {
            shared: shared.clone(),
            slots: base,
            len,
            tail: 0,
            head_cache: 0,
        },
        Consumer {
            shared,
            slots: base,
            len,
            head: 0,
            tail_cache: 0,
        },
    )
}

impl<T> Producer<T> {
    /// Append `value`; wait-free, never allocates, never blocks.
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), Full<T>> {
        let next = wrap(self.tail + 1, self.len);
        if next == self.head_cache {
            self.head_cache = self.shared.head.load(Ordering::Acquire);
            if next == self.head_cache {
                return Err(Full(value));
            }
        }
        // SAFETY: tail < len, so the slot is inside the live allocation; it is
        // outside head..tail, so the consumer does not touch it until the
        // release store below publishes it.
        unsafe { (*self.slots.add(self.tail)).with_mut(|p| (*p).write(value)) };
        self.tail = next;
        self.shared.tail.store(next, Ordering::Release);
        Ok(())
    }

    /// How many more values fit right now (a lower bound: the consumer may pop meanwhile).
    pub fn free_slots(&mut self) -> usize {
        self.head_cache = self.shared.head.load(Ordering::Acquire);
        let n = self.shared.slots.len();
        (self.head_cache + n - self.tail - 1) % n
    }

    /// Maximum number of values the queue holds.
    pub fn capacity(&self) -> usize {
        self.shared.slots.len() - 1
    }

    /// True when the consumer end has been dropped.
    pub fn is_abandoned(&self) -> bool {
        Arc::strong_count(&self.shared) < 2
    }
}

impl<T> Consumer<T> {
    /// Take the oldest value; wait-free, `None` when empty.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        if self.head == self.tail_cache {
            self.tail_cache = self.shared.tail.load(Ordering::Acquire);
            if self.head == self.tail_cache {
                return None;
            }
        }
        // SAFETY: head < len, inside the live allocation; the slot is in
        // head..tail: initialised by the producer and published by its release
        // store, which our acquire load observed.
        let v = unsafe { (*self.slots.add(self.head)).with_mut(|p| (*p).assume_init_read()) };
        self.head = wrap(self.head + 1, self.len);
        self.shared.head.store(self.head, Ordering::Release);
        Some(v)
    }

    /// How many values are waiting right now (a lower bound: the producer may push meanwhile).
    pub fn len(&mut self) -> usize {
        self.tail_cache = self.shared.tail.load(Ordering::Acquire);
        let n = self.shared.slots.len();
        (self.tail_cache + n - self.head) % n
    }

    /// True when nothing is waiting right now.
    pub fn is_empty(&mut self) -> bool {
        self.len() == 0
    }

    /// Maximum number of values the queue holds.
    pub fn capacity(&self) -> usize {
        self.shared.slots.len() - 1
    }

    /// True when the producer end has been dropped.
    pub fn is_abandoned(&self) -> bool {
        Arc::strong_count(&self.shared) < 2
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_ring_order_full_empty() {
        let (mut p, mut c) = channel::<u32>(3);
        assert_eq!(c.pop(), None);
        assert_eq!(p.free_slots(), 3);
        for i in 0..3 {
            p.push(i).unwrap();
        }
        assert_eq!(p.push(9), Err(Full(9)));
        assert_eq!(c.len(), 3);
        assert_eq!(c.pop(), Some(0));
        p.push(3).unwrap();
        assert_eq!(
            (c.pop(), c.pop(), c.pop(), c.pop()),
            (Some(1), Some(2), Some(3), None)
        );
        assert_eq!(p.capacity(), 3);
    }

    #[test]
    fn fifo_ring_drops_leftovers_once() {
        let marker = std::sync::Arc::new(());
        {
            let (mut p, mut c) = channel(4);
            for _ in 0..4 {
                p.push(marker.clone()).unwrap();
            }
            drop(c.pop());
            assert_eq!(std::sync::Arc::strong_count(&marker), 4);
            assert!(!c.is_abandoned());
            drop(p);
            assert!(c.is_abandoned());
        }
        assert_eq!(std::sync::Arc::strong_count(&marker), 1);
    }

    #[test]
    fn fifo_ring_two_threads_in_order() {
        const N: u64 = 200_000;
        let (mut p, mut c) = channel::<u64>(64);
        let t = std::thread::spawn(move || {
            for i in 0..N {
                let mut v = i;
                while let Err(Full(back)) = p.push(v) {
                    v = back;
                    std::hint::spin_loop();
                }
            }
        });
        let mut expect = 0;
        while expect < N {
            if let Some(v) = c.pop() {
                assert_eq!(v, expect);
                expect += 1;
            }
        }
        t.join().unwrap();
        assert_eq!(c.pop(), None);
    }
}
