//! The experiment engines behind `rtmgr measure …` and `rtmgr evaluate`
//! (docs/architecture.md "Measuring"; McKenney §2–3, ARTiS §3.1–3.2, DROPS §5.3,
//! budget-based RTAI §4). Each takes a library config type and a `Reporter`
//! for progress, and returns the report body; the CLI parses flags, prints and
//! writes files.

pub mod background_balancer;
pub mod compare;
pub mod error;
pub mod evaluate;
pub mod exec;
pub mod latency;
pub mod long_run;
pub mod own_partition;
pub mod periodicity;
pub mod segment_session;
pub mod session;
pub mod trace_cost;

pub use error::{bad_input, Context, Error, Result};
pub use session::Session;

use crate::measure::probe::Progress;
use std::time::Duration;

/// Where an engine says how it is getting on.
pub trait Reporter {
    /// The live progress line: time elapsed of the planned run, and what runs.
    fn progress(&mut self, _elapsed: Duration, _message: &str) {}
    /// A line for the user (stderr).
    fn note(&mut self, line: &str) {
        eprintln!("{line}");
    }
}

/// A reporter that keeps quiet about progress and prints notes.
pub struct Quiet;
impl Reporter for Quiet {}

/// The probe's running figures, as the progress line shows them.
pub fn progress_line(p: &Progress) -> String {
    format!(
        "n={} p99={} µs max={} µs missed={}",
        p.samples,
        crate::report::us(p.p99_ns),
        crate::report::us(p.max_ns),
        p.missed
    )
}
