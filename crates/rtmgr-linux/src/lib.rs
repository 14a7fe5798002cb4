//! rtmgr-linux: everything rtmgr does to or reads from the running kernel
//! (DESIGN.md: the only crate that touches the OS). Every file access goes
//! through a `Host` rooted at a path, so tests run against fake sysfs/procfs/
//! cgroup trees as well as the real machine.

pub mod balance;
pub mod cgroup;
pub mod classify;
pub mod cpus;
pub mod experiment;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod host;
pub mod irq;
pub mod journal;
pub mod launch;
pub mod lock;
pub mod measure;
pub mod partition;
pub mod preload;
pub mod sched;
pub mod snapshot;
pub mod status;
pub mod tasks;

pub use host::{Host, HostError};
