//! rtmgr-core: the manager's pure policy — every decision rtmgr makes, and
//! nothing that touches the machine.
//!
//! **What it is.** The decisions rtmgr makes, written once (docs/architecture.md
//! "Rules of the design": policies are pure and run live and in the
//! simulator): the ARTiS balancing policy ([`balance::Balancer`], ARTiS §2.3),
//! admission ([`admission`]: EDF and response-time analysis, placement),
//! budget accounting ([`budget`], budget-based RTAI §3.2), the task classes
//! and where each may run ([`class`], ARTiS §2.1), the partition description
//! and its validation ([`partition`], DROPS §4.1), the daemon's protocol
//! ([`protocol`]) and resource split ([`resources`], DROPS §4.3–4.4), latency
//! statistics ([`stats`], McKenney §3), and the parsers of the /proc and
//! tracefs text the live side reads ([`proctext`], [`trace`]).
//! The lab's pure parts (reports, plots, advice, cost) are in rtmgr-lab.
//!
//! **Central types.** [`CpuSet`]; `balance::{Observation, Move, Balancer}` —
//! the seam of the balancer: an observation in, moves out; `partition::
//! {PartitionConfig, PartitionPlan}`; `admission::Admission`;
//! `stats::{Hist, Summary}`.
//!
//! **Key decision.** Nothing here makes a system call, reads a clock, opens a
//! file or starts a thread: time and machine state come in as data. So every
//! policy runs unchanged live (rtmgr-linux) and in the deterministic simulator
//! (rtmgr-sim), and is property-tested without a machine.

pub mod admission;
pub mod balance;
pub mod budget;
pub mod capacity;
pub mod cgroupfs;
pub mod class;
pub mod cpuset;
pub mod duration;
pub mod host_preemption;
pub mod host_stall;
pub mod partition;
pub mod proctext;
pub mod protocol;
pub mod resources;
pub mod rt_permission;
pub mod stats;
pub mod trace;

pub use cpuset::{CpuSet, CpuSetError};
