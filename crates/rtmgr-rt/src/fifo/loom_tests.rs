//! loom model checks of the in-process RT-FIFOs (ring and Valois list): every
//! interleaving of one producer and one consumer through full and empty.
//! Run: `RUSTFLAGS="--cfg loom" cargo test -p rtmgr-rt --release --lib fifo_loom`

use super::list::list_channel;
use super::ring::{channel, Full};
use loom::sync::Arc;
use loom::thread;

const N: usize = 3;

/// Push 0..N through a queue of capacity 2 (so it fills), pop all in order,
/// and check every value is dropped exactly once (`Arc` counts).
fn check<P, C>(
    make: fn(usize) -> (P, C),
    push: fn(&mut P, Arc<usize>) -> Result<(), Full<Arc<usize>>>,
    pop: fn(&mut C) -> Option<Arc<usize>>,
) where
    P: Send + 'static,
    C: Send + 'static,
{
    loom::model(move || {
        let (mut p, mut c) = make(2);
        let vals: Vec<Arc<usize>> = (0..N).map(Arc::new).collect();
        let sent = vals.clone();
        let t = thread::spawn(move || {
            for v in sent {
                let mut v = v;
                while let Err(Full(back)) = push(&mut p, v) {
                    v = back;
                    thread::yield_now();
                }
            }
        });
        let mut got = 0;
        while got < N {
            match pop(&mut c) {
                Some(v) => {
                    assert_eq!(*v, got);
                    got += 1;
                }
                None => thread::yield_now(),
            }
        }
        t.join().unwrap();
        assert!(pop(&mut c).is_none());
        drop(c);
        for v in &vals {
            assert_eq!(Arc::strong_count(v), 1);
        }
    });
}

#[test]
fn fifo_loom_ring() {
    check(channel, |p, v| p.push(v), |c| c.pop());
}

#[test]
fn fifo_loom_list() {
    check(list_channel, |p, v| p.push(v), |c| c.pop());
}

/// Values left in the queue when both ends drop are dropped once, whichever end goes last.
#[test]
fn fifo_loom_ring_drop_leftovers() {
    loom::model(|| {
        let v = Arc::new(7usize);
        let (mut p, c) = channel(2);
        let v2 = v.clone();
        let t = thread::spawn(move || {
            p.push(v2).unwrap();
        });
        drop(c);
        t.join().unwrap();
        assert_eq!(Arc::strong_count(&v), 1);
    });
}
