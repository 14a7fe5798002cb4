//! The NRT side's memory and I/O (DROPS §4.4: Linux runs on its share of
//! main memory; §4.3: time-sharing requests queue behind real-time ones):
//! find the memory and io/blkio hierarchies and the NRT cgroups in them, and
//! the control files a config would set there — read-only; `mod.rs` applies.

use crate::host::Host;
use rtmgr_core::admission::memory::fmt_bytes;
use rtmgr_core::resources::controllers::{self, Hierarchy};
use rtmgr_core::resources::{MemoryKnob, ResourcesConfig};
use std::path::PathBuf;

/// One control file to set.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    pub path: PathBuf,
    pub value: String,
}

/// What one resource will do here: files to set and a line for `status`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Found {
    pub settings: Vec<Setting>,
    pub line: String,
}

fn hierarchy(host: &Host, v1: &str, v2: &str) -> Option<Hierarchy> {
    let mi = host.read_opt("/proc/self/mountinfo")?;
    let probe = controllers::find(&mi, v1, v2, "");
    let v2_root = match &probe {
        Some(h) => return Some(h.clone()),
        None => controllers::find(&mi, v1, v2, v2),
    };
    let ctl = v2_root
        .as_ref()
        .and_then(|h| host.read_opt(h.mount().join("cgroup.controllers")))?;
    controllers::find(&mi, v1, v2, &ctl)
}

/// The NRT cgroups of a hierarchy: the configured ones (each must exist),
/// or every top-level cgroup that is not rtmgr's.
fn nrt_cgroups(host: &Host, h: &Hierarchy, cfg: &ResourcesConfig) -> Result<Vec<PathBuf>, String> {
    if let Some(named) = &cfg.nrt_cgroups {
        return named
            .iter()
            .map(|n| {
                let d = h.mount().join(n);
                if host.exists(d.join("cgroup.procs")) {
                    Ok(d)
                } else {
                    Err(format!(
                        "[resources] nrt_cgroups: {} is not a cgroup",
                        d.display()
                    ))
                }
            })
            .collect();
    }
    let mut out: Vec<PathBuf> = host
        .list_dir(h.mount())
        .unwrap_or_default()
        .into_iter()
        .filter(|n| !n.starts_with(crate::partition::CGROUP_PREFIX))
        .map(|n| h.mount().join(n))
        .filter(|d| host.exists(d.join("cgroup.procs")))
        .collect();
    out.sort();
    Ok(out)
}

fn names(dirs: &[PathBuf]) -> String {
    dirs.iter()
        .map(|d| d.file_name().unwrap_or_default().to_string_lossy())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The NRT memory limit: which files, or why not.
pub fn memory(host: &Host, cfg: &ResourcesConfig) -> Result<Found, String> {
    let Some(bytes) = cfg.nrt_memory_bytes()? else {
        return Ok(Found {
            settings: Vec::new(),
            line: "NRT memory: not limited (no nrt_memory_limit)".into(),
        });
    };
    let Some(h) = hierarchy(host, "memory", "memory") else {
        return Ok(unavailable(
            "NRT memory",
            "no memory controller (neither a v1 memory mount nor v2 offering memory)",
        ));
    };
    let dirs = nrt_cgroups(host, &h, cfg)?;
    if dirs.is_empty() {
        return Ok(unavailable(
            "NRT memory",
            &format!(
                "{} has no NRT cgroup below its root (the root cannot be limited); name some in [resources] nrt_cgroups",
                h.mount().display()
            ),
        ));
    }
    let file = controllers::memory_file(&h, cfg.nrt_memory_knob == MemoryKnob::Max);
    let settings: Vec<Setting> = dirs
        .iter()
        .map(|d| Setting {
            path: d.join(file),
            value: bytes.to_string(),
        })
        .filter(|s| host.exists(&s.path))
        .collect();
    if settings.is_empty() {
        return Ok(unavailable(
            "NRT memory",
            &format!("no {file} in {}", names(&dirs)),
        ));
    }
    Ok(Found {
        line: format!(
            "NRT memory: {} each held under {} ({file})",
            names(&dirs),
            fmt_bytes(bytes)
        ),
        settings,
    })
}

/// The NRT I/O weight: which files, or why not.
pub fn io_weight(host: &Host, cfg: &ResourcesConfig) -> Result<Found, String> {
    let Some(w) = cfg.nrt_io_weight else {
        return Ok(Found {
            settings: Vec::new(),
            line: "NRT I/O weight: left as it is (no nrt_io_weight)".into(),
        });
    };
    let Some(h) = hierarchy(host, "blkio", "io") else {
        return Ok(unavailable("NRT I/O weight", "no io/blkio controller"));
    };
    let dirs = nrt_cgroups(host, &h, cfg)?;
    let mut settings = Vec::new();
    for d in &dirs {
        if let Some(f) = controllers::io_weight_files(&h)
            .iter()
            .find(|f| host.exists(d.join(f)))
        {
            settings.push(Setting {
                path: d.join(f),
                value: controllers::io_weight_value(f, w),
            });
        }
    }
    if settings.is_empty() {
        return Ok(unavailable(
            "NRT I/O weight",
            &format!(
                "no weight file ({}) in the NRT cgroups of {} (weights need the bfq scheduler or io.cost); ioprio classes still apply",
                controllers::io_weight_files(&h).join(", "),
                h.mount().display()
            ),
        ));
    }
    Ok(Found {
        line: format!("NRT I/O weight: {} at {w} (RT side 100)", names(&dirs)),
        settings,
    })
}

fn unavailable(what: &str, why: &str) -> Found {
    Found {
        settings: Vec::new(),
        line: format!("{what}: not available: {why}"),
    }
}

/// MemAvailable, bytes (None when /proc/meminfo has none).
pub fn mem_available(host: &Host) -> Option<u64> {
    let text = host.read_opt("/proc/meminfo")?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}
