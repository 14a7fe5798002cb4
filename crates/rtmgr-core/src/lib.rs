//! rtmgr-core: the pure policy core of rtmgr (see DESIGN.md, "one policy, two worlds").
//! Nothing here makes a system call, reads a clock or starts a thread, so every
//! policy runs unchanged on the live machine (rtmgr-linux) and in the simulator.

pub mod balance;
pub mod budget;
pub mod class;
pub mod cpuset;
pub mod load;
pub mod partition;
pub mod plot;
pub mod procstat;
pub mod proctext;
pub mod report;
pub mod stats;

pub use cpuset::{CpuSet, CpuSetError};
