//! Latency statistics (DESIGN.md "Measuring"; McKenney §3): percentiles from HDR
//! histograms, reported only where the sample count supports them.
//! Filled in by the measurement issue (#3).
