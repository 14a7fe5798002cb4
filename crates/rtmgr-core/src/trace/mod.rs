//! Reading tracefs events (ARTiS §2.2, §3.1): `event` parses the text trace,
//! `raw` decodes binary ring-buffer pages with the layouts `format` reads.
//! Pure: text and bytes in, events out. The balancer's entry watch reads
//! them live; the lab's tail attribution (rtmgr-lab `trace`) explains late
//! wake-ups with them.

pub mod event;
pub mod format;
pub mod raw;

pub use event::{parse_line, syscall_name, Comm, Event, Kind};
