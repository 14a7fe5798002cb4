//! The built-in kernel-lock load (ARTiS §3.1 "kernel locks load"; stress-ng
//! `futex` and `flock`): per load CPU two threads contend for a fair futex
//! mutex (every hand-over goes through the kernel, on one CPU as on many),
//! and two more, with all the others, for the locks of one file — a
//! whole-file `flock` and a byte-range OFD `fcntl` lock, each thread with its
//! own open file description, so they contend as processes would.

use super::{Counter, Env, Workers};
use rtmgr_sys::filelock::{flock_exclusive, ofd_lock_range};
use rtmgr_sys::futex;
use std::hint::black_box;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(super) const FUTEX: &str = "futex-mutex";
const FUTEX_OP: &str = "a fair futex mutex taken from the other thread of a pair and handed back (a futex wait and a futex wake)";
pub(super) const FILE: &str = "file-lock";
const FILE_OP: &str = "an flock and an OFD fcntl byte-range lock, each taken and released, on a file shared by every lock thread";

pub(super) fn start(instances: usize, w: &mut Workers) -> std::io::Result<()> {
    let futex_ops = w.counter(FUTEX, FUTEX_OP);
    for _ in 0..instances {
        let mutex = Arc::new(TicketMutex::default());
        for _ in 0..2 {
            let (mutex, ops) = (mutex.clone(), futex_ops.clone());
            w.spawn(FUTEX, move |env| {
                contend_futex(&mutex, &ops, env);
                Ok(())
            })?;
        }
    }
    let file_ops = w.counter(FILE, FILE_OP);
    let path = w.env().dir().join("locks.lock");
    std::fs::File::create(&path)?;
    for _ in 0..2 * instances {
        let file = std::fs::OpenOptions::new().write(true).open(&path)?;
        let ops = file_ops.clone();
        w.spawn(FILE, move |env| contend_file(&file, &ops, env))?;
    }
    Ok(())
}

/// A fair mutex on futexes (a ticket lock): the holder's unlock hands it to
/// the longest waiter, so two threads that both want it take turns, each
/// turn a futex wake by one and a futex wait by the other. Waits time out so
/// a stop is never missed.
#[derive(Default)]
struct TicketMutex {
    next: AtomicU32,
    serving: AtomicU32,
}

impl TicketMutex {
    /// False when the load stopped before the lock was ours.
    fn lock(&self, env: &Env) -> bool {
        let ticket = self.next.fetch_add(1, Ordering::Relaxed);
        loop {
            let serving = self.serving.load(Ordering::Acquire);
            if serving == ticket {
                return true;
            }
            if env.stopped() {
                return false;
            }
            let _ = futex::wait(&self.serving, serving, Some(Duration::from_millis(100)));
        }
    }

    fn unlock(&self) {
        self.serving.fetch_add(1, Ordering::Release);
        let _ = futex::wake(&self.serving, u32::MAX);
    }
}

/// What a holder does with a lock: a little work.
fn critical_section(n: u64) {
    let mut x = n;
    for _ in 0..64 {
        x = black_box(x.wrapping_mul(31).wrapping_add(7));
    }
}

fn contend_futex(mutex: &TicketMutex, ops: &Counter, env: &Env) {
    let mut n = 0u64;
    while mutex.lock(env) {
        critical_section(n);
        mutex.unlock();
        ops.add(1);
        n += 1;
    }
}

fn contend_file(file: &std::fs::File, ops: &Counter, env: &Env) -> std::io::Result<()> {
    let mut n = 0u64;
    while !env.stopped() {
        flock_exclusive(file, true)?;
        critical_section(n);
        flock_exclusive(file, false)?;
        ofd_lock_range(file, 0, 1, true)?;
        critical_section(n + 1);
        ofd_lock_range(file, 0, 1, false)?;
        ops.add(1);
        n += 2;
    }
    Ok(())
}
