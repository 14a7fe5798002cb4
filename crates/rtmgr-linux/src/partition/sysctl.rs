//! Knobs that set one sysctl for the partition's lifetime (tuned's sysctl
//! plugin, restored exactly by reset): the shared part of timer_migration,
//! stat_interval and watchdog, each of which has its own file and reason.

use super::files::{FileKnob, Found, Setting};
use crate::Host;
use rtmgr_core::partition::{KnobId, PartitionPlan};

pub(super) struct Sysctl {
    pub id: KnobId,
    /// Under /proc/sys.
    pub path: &'static str,
    /// The value it takes under a plan.
    pub value: fn(&PartitionPlan) -> String,
    pub explain: &'static str,
    /// Why the file may be missing.
    pub absent: &'static str,
}

impl FileKnob for Sysctl {
    fn knob(&self) -> KnobId {
        self.id
    }

    fn reason(&self) -> &'static str {
        self.explain
    }

    fn find(&self, host: &Host, plan: &PartitionPlan) -> Found {
        let label = self.path.trim_start_matches("/proc/sys/").replace('/', ".");
        match host.read_opt(self.path) {
            None => Found::Absent(format!("no {label} on this kernel ({})", self.absent)),
            Some(old) => Found::Files(vec![Setting {
                path: self.path.into(),
                label,
                old: old.trim().to_string(),
                new: (self.value)(plan),
            }]),
        }
    }
}
