//! What the commands' flags parse into: durations, `--trace` thresholds, CPU
//! lists, and the load engine (docs/architecture.md "Measuring": the loads;
//! the CLI parses flags and hands a library config type on).

use anyhow::{Context, Result};
use rtmgr_core::duration::{self, BareNumber};
use rtmgr_core::CpuSet;
use rtmgr_lab::load::LoadEngine;
use rtmgr_lab::measure::load::EngineChoice;
use std::time::Duration;

/// A measuring flag's duration: "100us", "1ms", "2.5s", "1m", "250000ns"; a
/// bare number is seconds; at least 1 ns.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let ns = duration::parse_ns(s, BareNumber::Seconds)?;
    if ns == 0 {
        return Err(format!("duration {:?} must be at least 1ns", s.trim()));
    }
    Ok(Duration::from_nanos(ns))
}

/// A reservation's period, budget or deadline in ns ("4ms", "250us"): the
/// unit is required, as in task sets.
pub fn parse_reservation_ns(s: &str) -> std::result::Result<u64, String> {
    Ok(duration::parse_ns(s, BareNumber::Refused)?)
}

/// `--trace[=THRESHOLD]`: without a value (or `p99.9`) the run's own p99.9;
/// else a duration ("100us"). The value is the fixed floor, if any.
pub fn parse_trace(s: &str) -> std::result::Result<TraceThreshold, String> {
    match s.trim() {
        "" | "p99.9" | "auto" => Ok(TraceThreshold(None)),
        d => parse_duration(d).map(|d| TraceThreshold(Some(d.as_nanos() as u64))),
    }
}

/// What `--trace` asked for: the samples above a fixed threshold (ns), or
/// (None) above the run's p99.9.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceThreshold(pub Option<u64>);

/// The load engine asked for (None: stress-ng when installed, else built-in);
/// the built-in loads run as this very binary's hidden `__load` subcommand.
pub fn engine_choice(requested: Option<LoadEngine>) -> Result<EngineChoice> {
    let worker =
        std::env::current_exe().context("find the rtmgr binary (for the built-in loads)")?;
    Ok(EngineChoice { requested, worker })
}

pub fn parse_cpus(s: &str) -> std::result::Result<CpuSet, String> {
    s.parse::<CpuSet>().map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("100us").unwrap(), Duration::from_micros(100));
        assert_eq!(parse_duration("1ms").unwrap(), Duration::from_millis(1));
        assert_eq!(parse_duration("2.5s").unwrap(), Duration::from_millis(2500));
        assert_eq!(parse_duration("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse_duration("1m").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("8h").unwrap(), Duration::from_secs(8 * 3600));
        assert!(parse_duration("0s").unwrap_err().contains("at least 1ns"));
        assert_eq!(parse_reservation_ns("4ms"), Ok(4_000_000));
        assert!(parse_reservation_ns("4")
            .unwrap_err()
            .contains("has no unit"));
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("fast").is_err());
    }
}
