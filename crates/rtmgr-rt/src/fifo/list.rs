//! The seed's RT-FIFO (ARTiS §2.2, after Valois): a singly linked list that is
//! never empty thanks to a dummy node, with all nodes preallocated. Kept as the
//! measured alternative to `ring` (the benchmark and loom tests use it).
//!
//! ARTiS recycles nodes by swapping the dummy with the task structure. For a
//! generic queue the same idea reads: a popped node becomes the new dummy and
//! the old dummy goes back to the producer, which reclaims every node strictly
//! before the consumer's current dummy (no second queue needed, no CAS).

use super::ring::Full;
use super::sync::{Arc, AtomicPtr, CachePadded, Ordering, UnsafeCell};
use core::mem::MaybeUninit;
use core::ptr;

struct Node<T> {
    next: AtomicPtr<Node<T>>,
    value: UnsafeCell<MaybeUninit<T>>,
}

struct Shared<T> {
    /// The consumer's current dummy node; written only by the consumer.
    head: CachePadded<AtomicPtr<Node<T>>>,
    /// `capacity + 1` nodes, never moved (boxed slice) nor freed before drop.
    nodes: Box<[Node<T>]>,
}

// SAFETY: a node's value is handed over through the release store of the
// predecessor's `next` (producer → consumer) and the release store of `head`
// (consumer → producer); one side accesses a node at a time.
unsafe impl<T: Send> Sync for Shared<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for Shared<T> {}

impl<T> Drop for Shared<T> {
    fn drop(&mut self) {
        let mut n = self.head.load(Ordering::Relaxed);
        loop {
            // SAFETY: n points into `nodes` (the list only links our nodes) and
            // we are the last owner.
            let next = unsafe { (*n).next.load(Ordering::Relaxed) };
            if next.is_null() {
                break;
            }
            // SAFETY: nodes after the dummy hold initialised values.
            unsafe { (*next).value.with_mut(|p| (*p).assume_init_drop()) };
            n = next;
        }
    }
}

/// The writing end.
pub struct ListProducer<T> {
    shared: Arc<Shared<T>>,
    /// Last node of the list.
    tail: *mut Node<T>,
    /// Oldest node not yet reclaimed; nodes in first..head_cache are free.
    first: *mut Node<T>,
    head_cache: *mut Node<T>,
}

/// The reading end.
pub struct ListConsumer<T> {
    shared: Arc<Shared<T>>,
    head: *mut Node<T>,
}

// SAFETY: the raw pointers point into the shared, pinned node array; each end
// is used by one thread at a time (`&mut self` methods).
unsafe impl<T: Send> Send for ListProducer<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for ListConsumer<T> {}

/// Create a list FIFO holding up to `capacity` values; all nodes allocated here.
///
/// # Panics
/// If `capacity` is 0.
pub fn list_channel<T: Send>(capacity: usize) -> (ListProducer<T>, ListConsumer<T>) {
    assert!(capacity > 0, "RT-FIFO capacity must be at least 1");
    let nodes: Box<[Node<T>]> = (0..=capacity)
        .map(|_| Node {
            next: AtomicPtr::new(ptr::null_mut()),
            value: UnsafeCell::new(MaybeUninit::uninit()),
        })
        .collect();
    let base = nodes.as_ptr() as *mut Node<T>;
    // Chain node0 → node1 → … → node[capacity] (the dummy): all but the dummy are free.
    for i in 0..capacity {
        // SAFETY: i + 1 <= capacity is in bounds.
        nodes[i]
            .next
            .store(unsafe { base.add(i + 1) }, Ordering::Relaxed);
    }
    // SAFETY: capacity is in bounds.
    let dummy = unsafe { base.add(capacity) };
    let shared = Arc::new(Shared {
        head: CachePadded(AtomicPtr::new(dummy)),
        nodes,
    });
    (
        ListProducer {
            shared: shared.clone(),
            tail: dummy,
            first: base,
            head_cache: dummy,
        },
        ListConsumer {
            shared,
            head: dummy,
        },
    )
}

impl<T> ListProducer<T> {
    /// Append `value`; wait-free, no allocation.
    #[inline]
    pub fn push(&mut self, value: T) -> Result<(), Full<T>> {
        if self.first == self.head_cache {
            self.head_cache = self.shared.head.load(Ordering::Acquire);
            if self.first == self.head_cache {
                return Err(Full(value));
            }
        }
        let n = self.first;
        // SAFETY: n is strictly before the consumer's dummy, so the consumer is
        // done with it (acquire on `head`); its `next` was set by us or at creation.
        unsafe {
            self.first = (*n).next.load(Ordering::Relaxed);
            (*n).value.with_mut(|p| (*p).write(value));
            (*n).next.store(ptr::null_mut(), Ordering::Relaxed);
            // Publish: the consumer acquires `next` of its dummy/last node.
            (*self.tail).next.store(n, Ordering::Release);
        }
        self.tail = n;
        Ok(())
    }

    /// Maximum number of values the queue holds.
    pub fn capacity(&self) -> usize {
        self.shared.nodes.len() - 1
    }
}

impl<T> ListConsumer<T> {
    /// Take the oldest value; wait-free, `None` when only the dummy is left.
    #[inline]
    pub fn pop(&mut self) -> Option<T> {
        // SAFETY: head is our dummy, a node of the pinned array.
        let next = unsafe { (*self.head).next.load(Ordering::Acquire) };
        if next.is_null() {
            return None;
        }
        // SAFETY: the producer initialised next's value before its release
        // store of the pointer we acquired; next becomes the new dummy.
        let v = unsafe { (*next).value.with_mut(|p| (*p).assume_init_read()) };
        self.head = next;
        self.shared.head.store(next, Ordering::Release);
        Some(v)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_list_order_full_empty_and_reuse() {
        let (mut p, mut c) = list_channel::<u32>(2);
        assert_eq!(c.pop(), None);
        for round in 0..5 {
            p.push(round * 2).unwrap();
            p.push(round * 2 + 1).unwrap();
            assert_eq!(p.push(99), Err(Full(99)));
            assert_eq!(c.pop(), Some(round * 2));
            assert_eq!(c.pop(), Some(round * 2 + 1));
            assert_eq!(c.pop(), None);
        }
        assert_eq!(p.capacity(), 2);
    }

    #[test]
    fn fifo_list_drops_leftovers() {
        let marker = std::sync::Arc::new(());
        {
            let (mut p, mut c) = list_channel(3);
            for _ in 0..3 {
                p.push(marker.clone()).unwrap();
            }
            drop(c.pop());
        }
        assert_eq!(std::sync::Arc::strong_count(&marker), 1);
    }

    #[test]
    fn fifo_list_two_threads_in_order() {
        const N: u64 = 200_000;
        let (mut p, mut c) = list_channel::<u64>(16);
        let t = std::thread::spawn(move || {
            for i in 0..N {
                let mut v = i;
                while let Err(Full(back)) = p.push(v) {
                    v = back;
                    std::hint::spin_loop();
                }
            }
        });
        for expect in 0..N {
            let v = loop {
                if let Some(v) = c.pop() {
                    break v;
                }
            };
            assert_eq!(v, expect);
        }
        t.join().unwrap();
    }
}
