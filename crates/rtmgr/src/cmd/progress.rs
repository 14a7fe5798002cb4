//! The engines' progress on the terminal while a measurement runs
//! (docs/architecture.md "Measuring": runs take minutes; notes go above the line).

use indicatif::{ProgressBar, ProgressStyle};
use rtmgr_lab::experiment::Reporter;
use std::time::Duration;

/// The engines' progress on a terminal line (hidden when stderr is not a
/// terminal); notes go to stderr above it.
pub struct Bar(ProgressBar);

impl Bar {
    pub fn new(total: Duration) -> Bar {
        let pb = ProgressBar::new(total.as_millis().max(1) as u64);
        pb.set_style(
            ProgressStyle::with_template("{elapsed_precise} [{bar:30}] ETA {eta} {msg}")
                .expect("valid template")
                .progress_chars("=> "),
        );
        Bar(pb)
    }
}

impl Reporter for Bar {
    fn progress(&mut self, elapsed: Duration, message: &str) {
        self.0.set_position(elapsed.as_millis() as u64);
        self.0.set_message(message.to_string());
    }
    fn note(&mut self, line: &str) {
        self.0.suspend(|| eprintln!("{line}"));
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}
