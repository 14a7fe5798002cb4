//! Why was it late? Per-sample attribution of late wake-ups from tracefs
//! events (ARTiS §3.1, McKenney §2.1; what rtla timerlat's auto-analysis
//! does, without the timerlat tracer): `attribute` splits one sample's delay
//! into causes, `summary` ranks the causes of a run's tail (both pure), and
//! `tail` runs the tracer beside the latency probe. The events themselves are
//! read by rtmgr-core's `trace` (parsing) and rtmgr-linux's `trace` (tracefs).

pub mod attribute;
pub mod summary;
pub mod tail;

pub use attribute::{attribute, attribute_in, state_before, Attribution, Cause, CpuState, Sample};
pub use rtmgr_core::trace::{event, format, parse_line, raw, syscall_name, Comm, Event, Kind};
pub use rtmgr_linux::trace::{
    list_instances, remove_stale_instances, tracefs, TraceError, TraceSession, TraceSpec,
    TraceStats,
};
pub use summary::{causes_text, summarise, tail_of_run, TailCauses};
pub use tail::{LateTx, TailTrace, TailTracer};
