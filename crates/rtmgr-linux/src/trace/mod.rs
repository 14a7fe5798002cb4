//! Tracing the RT CPUs with tracefs (ARTiS §2.2, §3.1): a private instance
//! per use (`tracefs`), and the tail tracer that explains late wake-ups of
//! the latency probe (`tail`). The parsing and attribution are pure, in
//! `rtmgr_core::trace`.

pub mod tail;
pub mod tracefs;

pub use tail::{LateTx, TailTrace, TailTracer};
pub use tracefs::{
    list_instances, remove_stale_instances, TraceError, TraceSession, TraceSpec, TraceStats,
};
