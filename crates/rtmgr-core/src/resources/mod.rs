//! The rest of what DROPS's resource manager owns besides CPUs (DROPS §4.3
//! separate RT/NRT I/O queues, §4.4 memory and cache partitioned between RT
//! and time-sharing work; McKenney §4–5 locked memory): the daemon's
//! `[resources]` configuration, validated before anything changes, and where
//! each controller lives. Locked-memory admission is `admission::memory`.

pub mod cache;
pub mod controllers;
pub mod starvation;

use crate::admission::memory::parse_bytes;
use serde::Deserialize;

/// Smallest NRT memory limit accepted: less would starve the machine itself.
pub const MIN_NRT_MEMORY: u64 = 256 << 20;

/// Which cgroup memory knob holds the NRT work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum MemoryKnob {
    /// v2 `memory.high` / v1 `memory.soft_limit_in_bytes`: reclaim above it, never OOM.
    #[default]
    High,
    /// v2 `memory.max` / v1 `memory.limit_in_bytes`: a hard cap (OOM above it).
    Max,
}

/// `[resources]` of the daemon's config.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourcesConfig {
    /// Share of MemAvailable (at start) RT clients may lock in all, (0, 1].
    #[serde(default = "default_memlock_share")]
    pub memlock_share: f64,
    /// Hold NRT work under this much memory ("8G", bytes); none: leave it.
    #[serde(default)]
    pub nrt_memory_limit: Option<String>,
    #[serde(default)]
    pub nrt_memory_knob: MemoryKnob,
    /// The NRT cgroups (relative to each controller's mount) that get the
    /// memory limit and the I/O weight; default: every top-level cgroup
    /// that is not rtmgr's.
    #[serde(default)]
    pub nrt_cgroups: Option<Vec<String>>,
    /// I/O class of a grant's threads when the request names none: "rt",
    /// "be" or "none" (left as they are).
    #[serde(default = "default_io_class")]
    pub io_class: String,
    /// Level within IOPRIO_CLASS_RT, 0 (highest) .. 7.
    #[serde(default = "default_io_level")]
    pub rt_io_level: u8,
    /// io.weight (v2) / blkio weight (v1) of the NRT cgroups, below the RT
    /// side's default 100; none: leave it.
    #[serde(default)]
    pub nrt_io_weight: Option<u32>,
    /// Share of the L3 ways for the RT CPUs and clients (resctrl), (0, 1);
    /// none: no cache partition.
    #[serde(default)]
    pub rt_cache_share: Option<f64>,
}

fn default_memlock_share() -> f64 {
    0.5
}
fn default_io_class() -> String {
    "rt".into()
}
fn default_io_level() -> u8 {
    4
}

impl Default for ResourcesConfig {
    fn default() -> Self {
        ResourcesConfig {
            memlock_share: default_memlock_share(),
            nrt_memory_limit: None,
            nrt_memory_knob: MemoryKnob::default(),
            nrt_cgroups: None,
            io_class: default_io_class(),
            rt_io_level: default_io_level(),
            nrt_io_weight: None,
            rt_cache_share: None,
        }
    }
}

impl ResourcesConfig {
    /// Everything that needs no machine state; the first problem found.
    pub fn validate(&self) -> Result<(), String> {
        if !(self.memlock_share > 0.0 && self.memlock_share <= 1.0) {
            return Err(format!(
                "[resources] memlock_share {} must be within (0, 1]",
                self.memlock_share
            ));
        }
        if let Some(b) = self.nrt_memory_bytes()? {
            if b < MIN_NRT_MEMORY {
                return Err(format!(
                    "[resources] nrt_memory_limit {b} bytes is below {} MiB: the machine itself would starve",
                    MIN_NRT_MEMORY >> 20
                ));
            }
        }
        self.default_io_class()?;
        if self.rt_io_level > 7 {
            return Err(format!(
                "[resources] rt_io_level {} must be within 0..7",
                self.rt_io_level
            ));
        }
        if let Some(w) = self.nrt_io_weight {
            if !(1..=10_000).contains(&w) || w >= 100 {
                return Err(format!(
                    "[resources] nrt_io_weight {w} must be within 1..99 (below the RT side's default 100)"
                ));
            }
        }
        if let Some(s) = self.rt_cache_share {
            if !(s > 0.0 && s < 1.0) {
                return Err(format!(
                    "[resources] rt_cache_share {s} must be within (0, 1): NRT keeps the rest"
                ));
            }
        }
        for c in self.nrt_cgroups.iter().flatten() {
            if c.is_empty() || c.split('/').any(|p| p == ".." || p == ".") || c.starts_with('/') {
                return Err(format!(
                    "[resources] nrt_cgroups {c:?}: a path below the controller's mount"
                ));
            }
        }
        Ok(())
    }

    pub fn nrt_memory_bytes(&self) -> Result<Option<u64>, String> {
        self.nrt_memory_limit
            .as_deref()
            .map(|s| parse_bytes(s).map_err(|e| format!("[resources] nrt_memory_limit: {e}")))
            .transpose()
    }

    /// The I/O class a request without one gets: Some(true) rt, Some(false) be, None leave.
    pub fn default_io_class(&self) -> Result<Option<bool>, String> {
        match self.io_class.as_str() {
            "rt" => Ok(Some(true)),
            "be" => Ok(Some(false)),
            "none" => Ok(None),
            other => Err(format!(
                "[resources] io_class {other:?}: \"rt\", \"be\" or \"none\""
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<ResourcesConfig, String> {
        let c: ResourcesConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        c.validate().map(|_| c)
    }

    #[test]
    fn defaults_and_bad_values_refused() {
        let d = parse("").unwrap();
        assert_eq!(d, ResourcesConfig::default());
        assert_eq!(d.default_io_class(), Ok(Some(true)));
        let c = parse("nrt_memory_limit = \"8G\"\nnrt_memory_knob = \"max\"\nnrt_io_weight = 50\nrt_cache_share = 0.5\nnrt_cgroups = [\"system.slice\"]").unwrap();
        assert_eq!(c.nrt_memory_bytes(), Ok(Some(8 << 30)));
        assert_eq!(c.nrt_memory_knob, MemoryKnob::Max);
        for bad in [
            "memlock_share = 0",
            "memlock_share = 1.5",
            "nrt_memory_limit = \"1M\"",
            "nrt_memory_limit = \"lots\"",
            "io_class = \"fast\"",
            "rt_io_level = 8",
            "nrt_io_weight = 100",
            "nrt_io_weight = 0",
            "rt_cache_share = 1.0",
            "nrt_cgroups = [\"../etc\"]",
            "bogus = 1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
