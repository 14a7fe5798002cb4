//! rtmgr-linux: everything rtmgr does to or reads from the running kernel.
//!
//! **What it is.** The OS side of rtmgr (docs/architecture.md: the only crate, with the
//! syscall layer, that touches the machine): the partition and its exact
//! undo ([`partition`], one knob per file, journalled first in [`journal`];
//! ARTiS §2.1, DROPS §4.1), tasks in their class ([`launch`], [`classify`];
//! ARTiS §2.4), the live balancer ([`balance`]: /proc observer, mover,
//! latency guard; ARTiS §2.3), the daemon `rtmgr serve` ([`daemon`], DROPS
//! §4.1), its resources ([`resources`]), and `rtmgr status` ([`status`]).
//! The lab (measurement, experiments) is rtmgr-lab, which builds on this
//! crate; nothing here imports it.
//!
//! **Central types.** [`Host`] — the machine: a root path and a kernel
//! backend; `partition::{Applied, PartitionGuard}`; `journal::Record`;
//! `balance::{LiveConfig, LiveReport}`; `daemon::Manager`.
//!
//! **Key decision.** The machine is a `Host`: a root path under which its
//! files are named, and a kernel that is either the running one or (feature
//! `fake`, tests) a fake one that emulates the side effects rtmgr relies on in
//! a temporary tree. `std::fs` is used only in [`host`] and in the few files
//! docs/architecture.md's checker lists (rtmgr's own state, /proc files held
//! open). The same code paths run on fake cgroup v1/v2 trees and on the real
//! machine, and production code never asks which it has. Decisions are
//! rtmgr-core's; this crate observes, applies, and undoes.

pub mod balance;
pub mod cgroup;
pub mod classify;
pub mod cpus;
pub mod daemon;
pub mod drift;
#[cfg(any(test, feature = "fake"))]
pub mod fake;
pub mod host;
pub mod host_preemption;
pub mod irq;
pub mod journal;
pub mod launch;
pub mod lock;
pub mod machine_access;
pub mod partition;
pub mod preload;
pub mod probe;
pub mod resource_records;
pub mod resources;
pub mod rt_thread;
pub mod sched;
#[cfg(any(test, feature = "fake"))]
pub mod snapshot;
pub mod status;
pub mod step;
pub mod tasks;
pub mod trace;
pub mod unmovable;

pub use host::{Host, HostError};

/// The one wall clock (rtmgr-sys) under its old name, for the daemon's and the
/// balancer's callers until their modules are rewritten (issue 29); new code
/// calls `rtmgr_sys::time::unix_now_s`.
pub(crate) use rtmgr_sys::time::unix_now_s as now_unix_s;
