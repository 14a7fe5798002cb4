//! The built-in kernel-lock load (ARTiS §3.1 "kernel locks load"; stress-ng
//! `futex` and `flock`): per load CPU two threads contend for one futex mutex
//! shared by all of them, and two more for the locks of one file — a
//! whole-file `flock` and a byte-range OFD `fcntl` lock, each thread with its
//! own open file description, so they contend as processes would. A holder
//! yields the CPU inside every 8th critical section, so waiters sleep in the
//! kernel even when the load has a single CPU.

use super::{Counter, Env, Workers};
use rtmgr_sys::filelock::{flock_exclusive, ofd_lock_range};
use rtmgr_sys::futex;
use std::hint::black_box;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub(super) const FUTEX: &str = "futex-mutex";
const FUTEX_OP: &str = "a lock and unlock of a futex mutex contended by every lock thread";
pub(super) const FILE: &str = "file-lock";
const FILE_OP: &str = "an flock and an OFD fcntl byte-range lock, each taken and released, on a file shared by every lock thread";

pub(super) fn start(instances: usize, w: &mut Workers) -> std::io::Result<()> {
    let futex_ops = w.counter(FUTEX, FUTEX_OP);
    let mutex = Arc::new(FutexMutex::default());
    for _ in 0..2 * instances {
        let (mutex, ops) = (mutex.clone(), futex_ops.clone());
        w.spawn(FUTEX, move |env| {
            contend_futex(&mutex, &ops, env);
            Ok(())
        })?;
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

/// A mutex on one futex word: 0 free, 1 held, 2 held with waiters (Drepper,
/// "Futexes Are Tricky", mutex 3). Waits time out so a stop is never missed.
#[derive(Default)]
struct FutexMutex {
    word: AtomicU32,
}

impl FutexMutex {
    fn lock(&self) {
        if self
            .word
            .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
        {
            return;
        }
        while self.word.swap(2, Ordering::Acquire) != 0 {
            let _ = futex::wait(&self.word, 2, Some(Duration::from_millis(100)));
        }
    }

    fn unlock(&self) {
        if self.word.swap(0, Ordering::Release) == 2 {
            let _ = futex::wake(&self.word, 1);
        }
    }
}

/// What a holder does with the lock: a little work, and every 8th time it
/// gives up the CPU while holding it.
fn critical_section(n: u64) {
    let mut x = n;
    for _ in 0..64 {
        x = black_box(x.wrapping_mul(31).wrapping_add(7));
    }
    if n.is_multiple_of(8) {
        std::thread::yield_now();
    }
}

fn contend_futex(mutex: &FutexMutex, ops: &Counter, env: &Env) {
    let mut n = 0u64;
    while !env.stopped() {
        mutex.lock();
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
