//! Why was it late? Per-sample attribution of late wake-ups from tracefs
//! events (ARTiS §3.1, McKenney §2.1; what rtla timerlat's auto-analysis
//! does, without the timerlat tracer): `event` parses the text trace, `raw`
//! decodes binary ring-buffer pages with the layouts `format` reads,
//! `attribute` splits one sample's delay into causes, `summary` ranks the
//! causes of a run's tail. Pure: text and numbers in, causes out.

pub mod attribute;
pub mod event;
pub mod format;
pub mod raw;
pub mod summary;

pub use attribute::{attribute, attribute_in, state_before, Attribution, Cause, CpuState, Sample};
pub use event::{parse_line, Comm, Event, Kind};
pub use summary::{causes_text, summarise, tail_of_run, TailCauses};
