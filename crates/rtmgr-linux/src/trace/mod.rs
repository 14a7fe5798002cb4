//! Tracing the RT CPUs with tracefs (ARTiS §2.2, §3.1): a private instance
//! per use (`tracefs`), read by the balancer's entry watch and by the lab's
//! tail tracer (rtmgr-lab `trace::tail`). The event parsing is pure, in
//! `rtmgr_core::trace`.

pub mod tracefs;

pub use tracefs::{
    list_instances, remove_stale_instances, remove_stale_instances_said, TraceError, TraceSession,
    TraceSpec, TraceStats,
};
