//! `[rtkit]` of the daemon's TOML: rtkit's own limits (its command-line
//! options, same defaults) and how rtmgr counts an rtkit thread against the
//! RT CPUs' capacity (an rtkit request names no period or budget).

use rtmgr_core::admission::{Demand, Kind};
use serde::Deserialize;

/// `[rtkit]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RtkitSection {
    /// Own org.freedesktop.RealtimeKit1 (also `rtmgr serve --rtkit`).
    #[serde(default)]
    pub enabled: bool,
    /// D-Bus address of the bus (default: the system bus).
    pub bus: Option<String>,
    /// Highest SCHED_FIFO priority granted (rtkit `--max-realtime-priority`).
    #[serde(default = "default_max_priority")]
    pub max_realtime_priority: u8,
    /// Lowest nice level granted (rtkit `--min-nice-level`).
    #[serde(default = "default_min_nice")]
    pub min_nice_level: i32,
    /// The client's hard RLIMIT_RTTIME must be set and at most this (µs).
    #[serde(default = "default_rttime_usec_max")]
    pub rttime_usec_max: u64,
    /// rtkit's per-user and global limits.
    #[serde(default = "default_users_max")]
    pub users_max: u32,
    #[serde(default = "default_processes_per_user_max")]
    pub processes_per_user_max: u32,
    #[serde(default = "default_threads_per_user_max")]
    pub threads_per_user_max: u32,
    #[serde(default = "default_actions_burst_sec")]
    pub actions_burst_sec: u32,
    #[serde(default = "default_actions_per_burst_max")]
    pub actions_per_burst_max: u32,
    /// What one rtkit thread is counted as by admission: an RT1+ (soft)
    /// reservation of `budget_us` every `period_us` at its priority.
    #[serde(default = "default_period_us")]
    pub period_us: u64,
    #[serde(default = "default_budget_us")]
    pub budget_us: u64,
}

fn default_max_priority() -> u8 {
    20
}
fn default_min_nice() -> i32 {
    -15
}
fn default_rttime_usec_max() -> u64 {
    200_000
}
fn default_users_max() -> u32 {
    2048
}
fn default_processes_per_user_max() -> u32 {
    15
}
fn default_threads_per_user_max() -> u32 {
    25
}
fn default_actions_burst_sec() -> u32 {
    20
}
fn default_actions_per_burst_max() -> u32 {
    25
}
fn default_period_us() -> u64 {
    10_000
}
fn default_budget_us() -> u64 {
    1_000
}

impl Default for RtkitSection {
    fn default() -> Self {
        toml::from_str("").expect("defaults")
    }
}

impl RtkitSection {
    /// The admission demand of one rtkit thread at `priority`.
    pub fn demand(&self, priority: u8) -> Result<Demand, String> {
        Demand::new(
            self.period_us.saturating_mul(1000),
            self.budget_us.saturating_mul(1000),
            None,
            Kind::Soft { priority },
        )
        .map_err(|e| format!("[rtkit] period_us/budget_us: {e}"))
    }

    pub fn validate(&self) -> Result<(), String> {
        if !(1..=rtmgr_core::class::RT1_MAX_PRIORITY).contains(&self.max_realtime_priority) {
            return Err(format!(
                "[rtkit] max_realtime_priority {} must be within 1..{}",
                self.max_realtime_priority,
                rtmgr_core::class::RT1_MAX_PRIORITY
            ));
        }
        if !(-20..=19).contains(&self.min_nice_level) {
            return Err(format!(
                "[rtkit] min_nice_level {} must be within -20..19",
                self.min_nice_level
            ));
        }
        if self.rttime_usec_max == 0 || self.actions_burst_sec == 0 {
            return Err("[rtkit] rttime_usec_max and actions_burst_sec must be > 0".into());
        }
        self.demand(self.max_realtime_priority).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_rtkits() {
        let d = RtkitSection::default();
        assert!(!d.enabled);
        assert_eq!(d.max_realtime_priority, 20);
        assert_eq!(d.min_nice_level, -15);
        assert_eq!(d.rttime_usec_max, 200_000);
        assert_eq!((d.processes_per_user_max, d.threads_per_user_max), (15, 25));
        assert_eq!((d.actions_burst_sec, d.actions_per_burst_max), (20, 25));
        assert!(d.validate().is_ok());
        assert_eq!(d.demand(5).unwrap().utilisation(), 0.1);
    }

    #[test]
    fn bad_values_are_refused() {
        let parse = |t: &str| toml::from_str::<RtkitSection>(t).unwrap().validate();
        assert!(parse("max_realtime_priority = 99").is_err());
        assert!(parse("min_nice_level = -21").is_err());
        assert!(
            parse("budget_us = 20000").is_err(),
            "budget over the period"
        );
        assert!(toml::from_str::<RtkitSection>("bogus = 1").is_err());
    }
}
