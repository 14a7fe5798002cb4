//! What the commands' flags parse into: durations, `--trace` thresholds, CPU
//! lists, and the load engine (docs/architecture.md "Measuring": the loads;
//! the CLI parses flags and hands a library config type on).

use anyhow::{Context, Result};
use rtmgr_core::CpuSet;
use rtmgr_lab::load::LoadEngine;
use rtmgr_lab::measure::load::EngineChoice;
use std::time::Duration;

/// Parse "100us", "1ms", "2.5s", "1m", "250000ns"; a bare number is seconds.
pub fn parse_duration(s: &str) -> std::result::Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let v: f64 = num
        .parse()
        .map_err(|_| format!("bad duration {s:?}: expected e.g. 100us, 1ms, 10s"))?;
    let ns = match unit.trim() {
        "ns" => v,
        "us" | "µs" => v * 1e3,
        "ms" => v * 1e6,
        "" | "s" => v * 1e9,
        "m" | "min" => v * 60e9,
        "h" => v * 3600e9,
        u => {
            return Err(format!(
                "bad duration unit {u:?} in {s:?}: use ns, us, ms, s, m or h"
            ))
        }
    };
    if !(ns.is_finite() && ns >= 1.0) {
        return Err(format!("duration {s:?} must be at least 1ns"));
    }
    Ok(Duration::from_nanos(ns as u64))
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
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("10 parsecs").is_err());
        assert!(parse_duration("fast").is_err());
    }
}
