//! The daemon's resources beside CPUs and priorities (DROPS §4.1: the
//! resource manager owns memory, I/O and cache too; §4.3 separate RT/NRT I/O
//! queues; §4.4 memory partitioned between RT and time-sharing work;
//! McKenney §4–5 locked memory). `prepare` checks a `[resources]` config
//! against this machine and changes nothing; `start` journals and applies
//! the machine-wide part (NRT memory limit, NRT I/O weight, cache split) as
//! knobs in the partition journal; `for_request` decides what one grant gets
//! (locked-memory admission, ioprio); `partition::reset` undoes it all from
//! the journal (stop, reset, after `kill -9`).
//!
//! Files: `nrt.rs` (NRT cgroups and their files), `resctrl.rs` (the L3
//! partition, DROPS §4.4), `grant.rs` (what a grant asks of them — I/O
//! class, cache group — decided for the grant pipeline's steps and journalled
//! in the grant record), `knobs.rs` (the machine-wide settings as knobs: journal,
//! verify, repair; an older rtmgr's resources.jsonl).

pub mod grant;
pub mod knobs;
pub mod nrt;
pub mod resctrl;

use crate::host::{Host, HostError};
use crate::journal::Journal;
use grant::GrantResources;
use rtmgr_core::admission::memory::{fmt_bytes, MemoryBudget};
use rtmgr_core::partition::ResourceKnobId;
use rtmgr_core::protocol::{IoClass, RefusalKind, Response, ValidReserve};
use rtmgr_core::resources::ResourcesConfig;
use rtmgr_sys::ioprio;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A `[resources]` config checked against this machine; nothing changed yet.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub cfg: ResourcesConfig,
    memory: nrt::Found,
    io: nrt::Found,
    cache: resctrl::CachePlan,
    available_at_start: Option<u64>,
}

/// Check a config against this machine (named cgroups exist, a memory limit
/// leaves the machine enough); changes nothing. Err: bad config.
pub fn prepare(host: &Host, cfg: &ResourcesConfig) -> Result<Prepared, String> {
    cfg.validate()?;
    let available_at_start = nrt::mem_available(host);
    if let (Some(limit), Some(total)) = (cfg.nrt_memory_bytes()?, mem_total(host)) {
        if limit > total {
            return Err(format!(
                "[resources] nrt_memory_limit {} is more than the machine has ({})",
                fmt_bytes(limit),
                fmt_bytes(total)
            ));
        }
    }
    Ok(Prepared {
        cfg: cfg.clone(),
        memory: nrt::memory(host, cfg)?,
        io: nrt::io_weight(host, cfg)?,
        cache: resctrl::plan(host, cfg.rt_cache_share)?,
        available_at_start,
    })
}

fn mem_total(host: &Host) -> Option<u64> {
    let text = host.read_opt("/proc/meminfo")?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kb| kb * 1024)
}

/// The resources the daemon holds while it runs.
#[derive(Debug, Clone)]
pub struct Resources {
    pub cfg: ResourcesConfig,
    pub budget: MemoryBudget,
    /// resource → what is in place, or "not available: why" (for `status`).
    pub status: BTreeMap<String, String>,
    /// The partition journal its knobs are journalled in.
    pub journal: Option<PathBuf>,
    /// What its knobs keep while the daemon runs (verified on reconcile).
    pub held: Vec<knobs::Held>,
    /// The RT resctrl group and its share of the ways, when there is one.
    pub cache_group: Option<(PathBuf, f64)>,
    /// What a grant's reply says about its cache.
    pub cache_note: String,
}

impl Default for Resources {
    /// Nothing configured: every request's memory counted against what is
    /// available now only, no I/O class changed.
    fn default() -> Self {
        Resources {
            cfg: ResourcesConfig {
                io_class: "none".into(),
                ..ResourcesConfig::default()
            },
            budget: MemoryBudget {
                share: 1.0,
                available_at_start: u64::MAX,
            },
            status: BTreeMap::new(),
            journal: None,
            held: Vec::new(),
            cache_group: None,
            cache_note: "not available: no [resources] rt_cache_share".into(),
        }
    }
}

/// Undo a predecessor's leftovers (an older rtmgr's resources.jsonl too),
/// then journal in the partition journal and apply the machine-wide
/// settings. On error what was applied is undone again.
pub fn start(
    host: &Host,
    p: &Prepared,
    partition_journal: &Path,
    rt_cpus: &rtmgr_core::CpuSet,
) -> Result<Resources, HostError> {
    let mut left = knobs::restore_legacy(host, partition_journal)?;
    left.extend(knobs::undo(host, partition_journal)?);
    if !left.is_empty() {
        tracing::warn!(
            "resources left by a previous daemon not all restored: {}",
            left.join("; ")
        );
    }
    let mut status = BTreeMap::new();
    let budget = MemoryBudget {
        share: p.cfg.memlock_share,
        available_at_start: p.available_at_start.unwrap_or(0),
    };
    status.insert(
        "memlock".to_string(),
        match p.available_at_start {
            Some(a) => format!(
                "RT clients may lock {} in all ({:.0} % of MemAvailable {} at start)",
                fmt_bytes(budget.limit()),
                p.cfg.memlock_share * 100.0,
                fmt_bytes(a)
            ),
            None => "not available: no MemAvailable in /proc/meminfo; locked-memory requests are refused".into(),
        },
    );
    status.insert("nrt_memory".into(), p.memory.line.clone());
    status.insert("nrt_io_weight".into(), p.io.line.clone());
    status.insert(
        "ioprio".into(),
        match p.cfg.default_io_class() {
            Ok(Some(true)) => format!(
                "RT clients' threads get IOPRIO_CLASS_RT level {}",
                p.cfg.rt_io_level
            ),
            Ok(Some(false)) => {
                "RT clients' threads get IOPRIO_CLASS_BE unless they ask for \"rt\"".into()
            }
            _ => "RT clients' threads keep their I/O class unless they ask for one".into(),
        },
    );
    let (cache_line, cache_note) = match &p.cache {
        resctrl::CachePlan::Off => (
            "not partitioned (no rt_cache_share)".to_string(),
            "not available: the daemon partitions no cache (no [resources] rt_cache_share)".into(),
        ),
        resctrl::CachePlan::Unavailable(why) => (
            format!("not available: {why}"),
            format!("not available: {why}"),
        ),
        resctrl::CachePlan::Split { split, .. } => {
            (resctrl::describe(split), resctrl::describe(split))
        }
    };
    status.insert("cache".into(), cache_line);
    let settings: Vec<(ResourceKnobId, Vec<(PathBuf, String)>)> = [
        (ResourceKnobId::NrtMemory, &p.memory),
        (ResourceKnobId::NrtIoWeight, &p.io),
    ]
    .into_iter()
    .map(|(knob, found)| {
        let files = found.settings.iter();
        (
            knob,
            files.map(|s| (s.path.clone(), s.value.clone())).collect(),
        )
    })
    .filter(|(_, files): &(_, Vec<_>)| !files.is_empty())
    .collect();
    let mut cache_group = None;
    let mut held = Vec::new();
    let splits = matches!(p.cache, resctrl::CachePlan::Split { .. });
    if !settings.is_empty() || splits {
        let mut j = Journal::append_to(host, partition_journal)?;
        let r = (|| {
            for (knob, files) in &settings {
                knobs::put(host, &mut j, *knob, (files, None), &mut held)?;
            }
            if let resctrl::CachePlan::Split { split, domains } = &p.cache {
                let (g, h) = resctrl::apply(host, &mut j, split, domains, rt_cpus)?;
                held.extend(h);
                cache_group = Some((g, split.rt_share()));
            }
            Ok(())
        })();
        if let Err(e) = r {
            let _ = knobs::undo(host, partition_journal);
            return Err(e);
        }
    }
    Ok(Resources {
        cfg: p.cfg.clone(),
        budget,
        status,
        journal: Some(partition_journal.to_path_buf()),
        held,
        cache_group,
        cache_note,
    })
}

/// Undo the resources.jsonl an older rtmgr kept beside `partition_journal`,
/// if any (the partition journal's resource knobs go back with
/// `partition::reset`).
pub fn restore_beside(host: &Host, partition_journal: &Path) -> Result<Vec<String>, HostError> {
    knobs::restore_legacy(host, partition_journal)
}

fn refuse(msg: String) -> Response {
    Response::refused(RefusalKind::Resource, msg)
}

impl Resources {
    /// The raw I/O priority a request's threads get, if it sets one (its
    /// `io_class`, else the config's default class).
    pub fn io_target(&self, v: &ValidReserve) -> Option<u16> {
        let class = match v.io_class {
            Some(c) => Some(c == IoClass::Rt),
            None => self.cfg.default_io_class().unwrap_or(None),
        };
        class.map(|rt| {
            if rt {
                ioprio::value(ioprio::CLASS_RT, u16::from(self.cfg.rt_io_level))
            } else {
                ioprio::value(ioprio::CLASS_BE, 4)
            }
        })
    }

    /// What a grant for `threads` (tid, start time) gets: its locked memory
    /// admitted (`held` is what other grants hold; `policy_memlock` the
    /// client rule's RLIMIT_MEMLOCK), its I/O class. Nothing changes here.
    pub fn for_request(
        &self,
        host: &Host,
        v: &ValidReserve,
        threads: &[(u32, u64)],
        policy_memlock: u64,
        held: u64,
    ) -> Result<GrantResources, Response> {
        let mut out = GrantResources::default();
        if let Some(asked) = v.memlock_bytes {
            if asked > policy_memlock {
                return Err(Response::refused(
                    RefusalKind::Policy,
                    format!(
                        "locked memory: {} asked, the client's rule allows {} (memlock_bytes)",
                        fmt_bytes(asked),
                        fmt_bytes(policy_memlock)
                    ),
                ));
            }
            let now = nrt::mem_available(host).unwrap_or(0);
            self.budget
                .check(asked, held, now)
                .map_err(|r| refuse(r.to_string()))?;
            out.memlock_bytes = asked;
        }
        if let Some(new) = self.io_target(v) {
            out.ioprio = grant::ioprio_changes(host, threads, new).map_err(|e| {
                Response::error(rtmgr_core::protocol::ErrorCode::Os, format!("ioprio: {e}"))
            })?;
        }
        match (&self.cache_group, v.cache_share) {
            (Some((_, share)), Some(asked)) if asked > *share + 1e-9 => {
                return Err(refuse(format!(
                    "cache: {:.0} % of the L3 asked, the RT side has {:.0} % ({}); ask for at most that",
                    asked * 100.0,
                    share * 100.0,
                    self.cache_note
                )))
            }
            (Some((group, _)), _) => {
                out.cache_group = Some(group.clone());
                out.cache_note = Some(self.cache_note.clone());
            }
            (None, Some(_)) => out.cache_note = Some(self.cache_note.clone()),
            (None, None) => {}
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests;
