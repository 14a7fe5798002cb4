//! The names of the things a partition changes (one knob each, as tuned has one
//! plugin per knob), stable in configs, journals and reports, so a partition can
//! be applied with any subset of them (ARTiS §2.1, McKenney §2.1: what must be
//! moved off or shut down on a real-time CPU; tuned's realtime profile).

use serde::{Deserialize, Serialize};

/// One knob of a partition. The order is the order `apply` runs them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KnobId {
    /// The RT and NRT cpusets (the partition itself).
    Cgroups,
    /// Movable tasks (and kernel threads, per `kernel_threads`) off the RT CPUs.
    Tasks,
    /// A running irqbalance bans the RT CPUs through its socket (or the
    /// partition refuses to start beside it).
    Irqbalance,
    /// Every IRQ's affinity to the NRT CPUs.
    Irqs,
    /// Where new IRQs go (`/proc/irq/default_smp_affinity`).
    Defaults,
    /// Every workqueue cpumask: the unbound one, each per-queue one, writeback.
    Workqueues,
    /// Receive and transmit packet steering of every network interface.
    Rps,
    /// Where block I/O completions run (`rq_affinity`).
    Block,
    /// `kernel.timer_migration = 0`.
    TimerMigration,
    /// `vm.stat_interval` as tuned's realtime profile sets it.
    StatInterval,
    /// `kernel.watchdog_cpumask` = the NRT CPUs.
    Watchdog,
    /// Deep idle states of the RT CPUs disabled.
    Cpuidle,
    /// The `performance` frequency governor on the RT CPUs.
    Cpufreq,
    /// The PREEMPT_DYNAMIC model (`--preempt`), for the partition's lifetime.
    Preempt,
    /// cgroup2's `favordynmods` mount option (`--favordynmods`), for the
    /// partition's lifetime: a cpuset attach stops waiting for an RCU grace
    /// period after an idle spell.
    Favordynmods,
}

impl KnobId {
    /// Every knob, in apply order.
    pub const ALL: [KnobId; 15] = [
        KnobId::Cgroups,
        KnobId::Tasks,
        KnobId::Irqbalance,
        KnobId::Irqs,
        KnobId::Defaults,
        KnobId::Workqueues,
        KnobId::Rps,
        KnobId::Block,
        KnobId::TimerMigration,
        KnobId::StatInterval,
        KnobId::Watchdog,
        KnobId::Cpuidle,
        KnobId::Cpufreq,
        KnobId::Preempt,
        KnobId::Favordynmods,
    ];

    /// The stable name (config, journal, crash-test point, report).
    pub fn name(self) -> &'static str {
        match self {
            KnobId::Cgroups => "cgroups",
            KnobId::Tasks => "tasks",
            KnobId::Irqbalance => "irqbalance",
            KnobId::Irqs => "irqs",
            KnobId::Defaults => "defaults",
            KnobId::Workqueues => "workqueues",
            KnobId::Rps => "rps",
            KnobId::Block => "block",
            KnobId::TimerMigration => "timer_migration",
            KnobId::StatInterval => "stat_interval",
            KnobId::Watchdog => "watchdog",
            KnobId::Cpuidle => "cpuidle",
            KnobId::Cpufreq => "cpufreq",
            KnobId::Preempt => "preempt",
            KnobId::Favordynmods => "favordynmods",
        }
    }

    pub fn all() -> Vec<KnobId> {
        Self::ALL.to_vec()
    }
}

impl std::fmt::Display for KnobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A machine-wide `[resources]` setting of the daemon, kept as a knob in the
/// partition journal beside the partition's own (DROPS §4.1, §4.3, §4.4: the
/// manager owns memory, I/O and cache too; stalld's throttling and boosts).
/// The order is the order the daemon applies them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResourceKnobId {
    /// The NRT cgroups' memory limit (`nrt_memory_limit`).
    NrtMemory,
    /// The NRT cgroups' I/O weight (`nrt_io_weight`).
    NrtIoWeight,
    /// The resctrl L3 split (`rt_cache_share`).
    Cache,
    /// RT throttling lifted while the starvation guard runs.
    RtThrottling,
    /// The starvation guard's temporary SCHED_DEADLINE boosts.
    StarvationBoosts,
}

impl ResourceKnobId {
    pub const ALL: [ResourceKnobId; 5] = [
        ResourceKnobId::NrtMemory,
        ResourceKnobId::NrtIoWeight,
        ResourceKnobId::Cache,
        ResourceKnobId::RtThrottling,
        ResourceKnobId::StarvationBoosts,
    ];

    /// The stable name (journal, metrics, logs); never a partition knob's.
    pub fn name(self) -> &'static str {
        match self {
            ResourceKnobId::NrtMemory => "nrt_memory",
            ResourceKnobId::NrtIoWeight => "nrt_io_weight",
            ResourceKnobId::Cache => "cache",
            ResourceKnobId::RtThrottling => "rt_throttling",
            ResourceKnobId::StarvationBoosts => "starvation_boosts",
        }
    }

    /// The resource knob of a journalled name.
    pub fn named(name: &str) -> Option<ResourceKnobId> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }
}

impl std::fmt::Display for ResourceKnobId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The name of a knob's drift repairs (partition or resource knob), as the
/// daemon counts them in `status` and its metrics: `<knob>_restored`, but
/// `irqs` and `tasks` keep the names their repairs had before knobs.
pub fn drift_kind(knob: &str) -> String {
    match knob {
        "irqs" => "irq_masks_restored".into(),
        "tasks" => "tasks_narrowed".into(),
        k => format!("{k}_restored"),
    }
}

/// The drift repairs the daemon counts besides the knobs' (`drift_kind`),
/// by name in `status` and its metrics (which start each at 0): grants put
/// back or dropped, RT CPUs gone and back.
pub mod drift_events {
    pub const GRANTS_OF_EXITED_THREADS: &str = "grants_of_exited_threads";
    pub const GRANTS_REAPPLIED: &str = "grants_reapplied";
    pub const RT_CPU_OFFLINE: &str = "rt_cpu_offline";
    pub const RT_CPU_ONLINE: &str = "rt_cpu_online";
    pub const ALL: [&str; 4] = [
        GRANTS_OF_EXITED_THREADS,
        GRANTS_REAPPLIED,
        RT_CPU_OFFLINE,
        RT_CPU_ONLINE,
    ];
}

/// What `partition apply` does beside a running irqbalance, which rewrites
/// IRQ affinities every 10 s (`--irqbalance`, `irqbalance =` in the config).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IrqbalanceMode {
    /// Refuse to apply while irqbalance runs.
    #[default]
    Refuse,
    /// Ban the RT CPUs through irqbalance's socket for the partition's lifetime.
    Ban,
}

impl std::str::FromStr for IrqbalanceMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "refuse" => Ok(IrqbalanceMode::Refuse),
            "ban" => Ok(IrqbalanceMode::Ban),
            _ => Err(format!("unknown irqbalance mode {s:?}: refuse or ban")),
        }
    }
}

/// A PREEMPT_DYNAMIC preemption model rtmgr may set for a partition's lifetime
/// (ARTiS §3.1 Table 1, "Linux with preemption").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PreemptMode {
    /// Kernel code is preemptible everywhere except in non-preemptible sections.
    Full,
    /// Like full for RT tasks; ordinary tasks are preempted at the next tick.
    Lazy,
}

impl PreemptMode {
    pub fn name(self) -> &'static str {
        match self {
            PreemptMode::Full => "full",
            PreemptMode::Lazy => "lazy",
        }
    }
}

impl std::str::FromStr for PreemptMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "full" => Ok(PreemptMode::Full),
            "lazy" => Ok(PreemptMode::Lazy),
            _ => Err(format!("unknown preemption model {s:?}: full or lazy")),
        }
    }
}

impl std::fmt::Display for PreemptMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The models a PREEMPT_DYNAMIC kernel offers in debugfs `sched/preempt`
/// ("none voluntary (full) lazy") and the selected one, in parentheses.
pub fn preempt_models(text: &str) -> (Vec<&str>, Option<&str>) {
    let mut offered = Vec::new();
    let mut selected = None;
    for w in text.split_whitespace() {
        let bare = w.trim_matches(|c| c == '(' || c == ')');
        if w.starts_with('(') && w.ends_with(')') {
            selected = Some(bare);
        }
        offered.push(bare);
    }
    (offered, selected)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_serde_names_and_unique() {
        let mut seen = std::collections::BTreeSet::new();
        for k in KnobId::ALL {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.name()));
            assert!(seen.insert(k.name()), "{k} twice");
        }
        let mut sorted = KnobId::ALL;
        sorted.sort();
        assert_eq!(sorted, KnobId::ALL, "ALL is in apply (declaration) order");
    }

    #[test]
    fn resource_knob_names_are_the_serde_names_and_no_partition_knob_s() {
        for k in ResourceKnobId::ALL {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", k.name()));
            assert_eq!(ResourceKnobId::named(k.name()), Some(k));
            assert!(KnobId::ALL.iter().all(|p| p.name() != k.name()), "{k}");
        }
        assert_eq!(ResourceKnobId::named("irqs"), None);
    }

    #[test]
    fn drift_kinds_are_distinct_per_knob() {
        let names = KnobId::ALL.iter().map(|k| k.name());
        let all: Vec<&str> = names
            .chain(ResourceKnobId::ALL.iter().map(|k| k.name()))
            .collect();
        let kinds: std::collections::BTreeSet<String> = all.iter().map(|k| drift_kind(k)).collect();
        assert_eq!(kinds.len(), all.len());
        assert_eq!(drift_kind("irqs"), "irq_masks_restored");
        assert_eq!(drift_kind("tasks"), "tasks_narrowed");
        assert_eq!(drift_kind("cache"), "cache_restored");
    }

    #[test]
    fn debugfs_preempt_text() {
        let (offered, selected) = preempt_models("none voluntary (full) lazy\n");
        assert_eq!(offered, vec!["none", "voluntary", "full", "lazy"]);
        assert_eq!(selected, Some("full"));
        assert_eq!(preempt_models("").1, None);
    }

    #[test]
    fn preempt_modes_parse() {
        assert_eq!("full".parse::<PreemptMode>(), Ok(PreemptMode::Full));
        assert_eq!("lazy".parse::<PreemptMode>(), Ok(PreemptMode::Lazy));
        assert!("none".parse::<PreemptMode>().is_err());
    }
}
