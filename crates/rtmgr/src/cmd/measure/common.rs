//! What `rtmgr measure …` and `rtmgr evaluate` share in the CLI: flag parsers
//! (durations, CPU lists), the load engine, the progress line, and writing the
//! JSON report and its plots where the user said.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use rtmgr_core::CpuSet;
use rtmgr_lab::experiment::Reporter;
use rtmgr_lab::load::LoadEngine;
use rtmgr_lab::measure::load::EngineChoice;
use std::path::{Path, PathBuf};
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

pub fn write_file(path: &Path, text: &str) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
}

pub fn write_json(path: &Path, report: &impl serde::Serialize) -> Result<()> {
    write_file(path, &(serde_json::to_string_pretty(report)? + "\n"))
}

/// Path with a suffix before the extension: a.svg + "-pct" → a-pct.svg.
pub fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    path.with_file_name(format!("{stem}{suffix}{ext}"))
}

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

    #[test]
    fn suffixes() {
        assert_eq!(
            with_suffix(Path::new("d/a.svg"), "-pct"),
            Path::new("d/a-pct.svg")
        );
        assert_eq!(with_suffix(Path::new("a"), "-x"), Path::new("a-x"));
    }
}
