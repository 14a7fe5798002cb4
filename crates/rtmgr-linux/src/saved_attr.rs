//! A thread's scheduling attributes as a journal keeps them (DESIGN.md: the
//! old value of everything journalled before it changes): the grants journal
//! and the partition journal's starvation boosts both save and restore them.

use rtmgr_sys::sched::SchedAttr;
use serde::{Deserialize, Serialize};

/// A thread's scheduling attributes as journalled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SavedAttr {
    pub policy: u32,
    pub flags: u64,
    pub nice: i32,
    pub priority: u32,
    pub runtime: u64,
    pub deadline: u64,
    pub period: u64,
}

impl From<SchedAttr> for SavedAttr {
    fn from(a: SchedAttr) -> Self {
        SavedAttr {
            policy: a.policy,
            flags: a.flags,
            nice: a.nice,
            priority: a.priority,
            runtime: a.runtime,
            deadline: a.deadline,
            period: a.period,
        }
    }
}

impl From<SavedAttr> for SchedAttr {
    fn from(a: SavedAttr) -> Self {
        SchedAttr {
            policy: a.policy,
            flags: a.flags,
            nice: a.nice,
            priority: a.priority,
            runtime: a.runtime,
            deadline: a.deadline,
            period: a.period,
        }
    }
}
