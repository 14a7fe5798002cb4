//! The machine-wide lock (an flock on /run/lock/rtmgr.lock) for everything
//! that changes the partition, IRQs or runs latency measurements. It lives in
//! `rtmgr_sys::lock`, where rtmgr-rt's tests take it too.

pub use rtmgr_sys::lock::{MachineLock, DEFAULT_LOCK_PATH};
