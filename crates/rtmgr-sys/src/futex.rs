//! Futexes on a word that other processes may map too (the cross-process
//! RT-FIFO's sleeping consumer, ARTiS §2.2): wait while the word holds a value,
//! wake waiters. Not private futexes: the peer may be another process.

use crate::io_err;
use rustix::thread::futex::{self, Flags};
use rustix::time::Timespec;
use std::io;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleep while `word` holds `expected`, at most `timeout` (None: forever).
/// Returns Ok on a wake-up; ETIMEDOUT, EINTR, or EAGAIN (the word no longer
/// held `expected`) as errors.
pub fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>) -> io::Result<()> {
    let ts = timeout.map(|d| Timespec {
        tv_sec: d.as_secs() as _,
        tv_nsec: d.subsec_nanos() as _,
    });
    futex::wait(word, Flags::empty(), expected, ts.as_ref()).map_err(io_err)
}

/// Wake at most `n` waiters on `word`; returns how many were woken.
pub fn wake(word: &AtomicU32, n: u32) -> io::Result<usize> {
    futex::wake(word, Flags::empty(), n).map_err(io_err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    #[test]
    fn wait_times_out_refuses_a_changed_word_and_wakes() {
        let w = Arc::new(AtomicU32::new(1));
        let e = wait(&w, 1, Some(Duration::from_millis(1))).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT));
        let e = wait(&w, 0, None).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
        let w2 = w.clone();
        let h = std::thread::spawn(move || {
            while w2.load(Ordering::SeqCst) == 1 {
                let _ = wait(&w2, 1, Some(Duration::from_millis(10)));
            }
        });
        std::thread::sleep(Duration::from_millis(20));
        w.store(0, Ordering::SeqCst);
        wake(&w, 1).unwrap();
        h.join().unwrap();
    }
}
