//! Knobs that set one sysctl for the partition's lifetime (tuned's sysctl
//! plugin, restored exactly by reset): the shared part of timer_migration,
//! stat_interval and watchdog, each of which has its own file and reason.

use super::files::{self, Found, Setting};
use super::knob::{ApplyCx, Knob, PreviewCx};
use super::Result;
use crate::Host;
use rtmgr_core::partition::{KnobId, KnobReport, PartitionPlan};
use std::path::PathBuf;

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

impl Sysctl {
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

impl Knob for Sysctl {
    fn id(&self) -> KnobId {
        self.id
    }

    fn explain(&self) -> &'static str {
        self.explain
    }

    fn preview(&self, cx: &PreviewCx<'_>) -> KnobReport {
        files::preview(cx, self.id, self.find(cx.host, cx.plan))
    }

    fn apply(&self, cx: &mut ApplyCx<'_>) -> Result<()> {
        let found = self.find(cx.host, cx.plan);
        files::apply(cx, self.id, found)
    }

    fn watched(&self, _host: &Host) -> Vec<PathBuf> {
        vec![PathBuf::from(self.path)]
    }
}
