//! What a grant gets besides CPU time (DROPS §4.1: memory, I/O and cache are
//! given on request): its locked-memory allowance (counted, not set here: the
//! RLIMIT_MEMLOCK is the grant's limit), its threads' I/O class (ioprio,
//! DROPS §4.3's separate RT queue) and their resctrl group (DROPS §4.4's
//! cache partition). Journalled inside the grant record; the daemon's grant
//! pipeline (`daemon/grant/io.rs`) applies, verifies and undoes it from there.

use crate::host::{Host, HostError};
use rtmgr_sys::ioprio;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// One thread's I/O priority before and after its grant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoprioChange {
    pub tid: u32,
    pub start_time: u64,
    pub old: u16,
    pub new: u16,
}

/// The resources of one grant, with what they replace.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct GrantResources {
    /// Locked memory counted for it against MemAvailable.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub memlock_bytes: u64,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ioprio: Vec<IoprioChange>,
    /// The resctrl group its threads joined (machine path), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_group: Option<PathBuf>,
    /// What the reply says about its cache ("not available: …" too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_note: Option<String>,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

impl GrantResources {
    /// The I/O class its threads got, "rt:4" / "be:4", if any.
    pub fn io_label(&self) -> Option<String> {
        self.ioprio.first().map(|c| {
            let class = match ioprio::class_of(c.new) {
                ioprio::CLASS_RT => "rt",
                ioprio::CLASS_BE => "be",
                ioprio::CLASS_IDLE => "idle",
                _ => "none",
            };
            format!("{class}:{}", ioprio::level_of(c.new))
        })
    }
}

/// The ioprio changes for `threads` (tid, start_time) to `new`; threads
/// already at `new` are left out.
pub fn ioprio_changes(
    host: &Host,
    threads: &[(u32, u64)],
    new: u16,
) -> Result<Vec<IoprioChange>, HostError> {
    let mut out = Vec::new();
    for &(tid, start_time) in threads {
        let old = host.get_ioprio(tid)?;
        if old != new {
            out.push(IoprioChange {
                tid,
                start_time,
                old,
                new,
            });
        }
    }
    Ok(out)
}
