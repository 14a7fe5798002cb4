//! Tests of the cross-process RT-FIFO through both ends in one process
//! (ARTiS §2.2: order, full/empty, exclusive ends, blocking, corruption).

use super::header::off;
use super::segment::fd_ref;
use super::*;
use rtmgr_sys::fd::truncate;
use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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
