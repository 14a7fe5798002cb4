//! The partition description and its validation (ARTiS §2.1, §2.4; DROPS §4.1:
//! a resource manager configured by a script). A `PartitionConfig` is what the
//! user asks for (TOML file and/or `--rt-cpus`); `validate` checks it against
//! the facts of the machine and yields a `PartitionPlan` before anything on the
//! machine is touched. `knobs` names what a partition may change,
//! `placement` chooses the RT CPUs (`--rt-cpus auto`), `boot` the kernel
//! command line that would finish the isolation.

pub mod boot;
pub mod coexist;
pub mod knobs;
pub mod placement;
pub mod sweep;
pub mod tuned;

pub use knobs::{drift_events, drift_kind, IrqbalanceMode, KnobId, PreemptMode, ResourceKnobId};

use crate::cpuset::{CpuSet, CpuSetError};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// ARTiS targets a maximum response time below 300 µs (§2).
pub const DEFAULT_LATENCY_BOUND_US: u64 = 300;

/// What to do with unbound kernel threads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KthreadPolicy {
    /// Move unbound kernel threads to the NRT CPUs (McKenney §2.1: pin kernel daemons).
    #[default]
    Move,
    /// Leave kernel threads where they are.
    Leave,
}

/// IRQ placement exceptions.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IrqConfig {
    /// IRQ numbers rtmgr must not touch.
    #[serde(default)]
    pub leave: Vec<u32>,
    /// IRQ numbers to steer to the RT CPUs instead (e.g. the device an RT task serves).
    #[serde(default)]
    pub rt: Vec<u32>,
}

/// A partition as described in a TOML file (every key optional except that
/// RT CPUs must come from the file or the command line).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartitionConfig {
    pub rt_cpus: Option<CpuSet>,
    /// Default: every online CPU that is not RT.
    pub nrt_cpus: Option<CpuSet>,
    #[serde(default)]
    pub kernel_threads: KthreadPolicy,
    #[serde(default)]
    pub irq: IrqConfig,
    /// Latency bound of the RT CPUs in µs, used by the latency guard and `evaluate`.
    pub latency_bound_us: Option<u64>,
    /// Steer the workqueue cpumasks to the NRT CPUs (default true); false
    /// leaves out the `workqueues` knob.
    pub workqueues: Option<bool>,
    /// The knobs to apply, by name (default: all of them). `cgroups` is the
    /// partition itself and cannot be left out.
    pub knobs: Option<Vec<KnobId>>,
    /// A PREEMPT_DYNAMIC model to set for the partition's lifetime.
    pub preempt: Option<PreemptMode>,
    /// Beside a running irqbalance: refuse (default) or ban the RT CPUs in it.
    pub irqbalance: Option<IrqbalanceMode>,
    /// Set cgroup2's `favordynmods` mount option for the partition's lifetime
    /// (default false): a grant's cpuset move stops waiting for an RCU grace
    /// period after an idle spell. See docs/partition.md.
    pub favordynmods: Option<bool>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("config: {0}")]
    Toml(String),
    #[error("{0}")]
    CpuList(#[from] CpuSetError),
    #[error("no RT CPU given: pass --rt-cpus LIST or set rt_cpus in the config file")]
    NoRtCpus,
    #[error("RT CPU list is empty: a partition needs at least one RT CPU")]
    EmptyRt,
    #[error("RT CPUs {0} are not online (online: {1})")]
    RtOffline(CpuSet, CpuSet),
    #[error("NRT CPUs {0} are not online (online: {1})")]
    NrtOffline(CpuSet, CpuSet),
    #[error("every online CPU ({0}) would be RT: at least one NRT CPU must remain for Linux tasks, IRQs and kernel threads")]
    NoNrtLeft(CpuSet),
    #[error("CPUs {0} are both RT and NRT")]
    Overlap(CpuSet),
    #[error("NRT CPU list is empty: at least one NRT CPU must remain")]
    EmptyNrt,
    #[error("IRQ {0} is listed both in irq.leave and irq.rt")]
    IrqConflict(u32),
    #[error("latency_bound_us must be > 0")]
    ZeroBound,
    #[error("IRQ {irq} in [irq] {list} does not exist on this machine (see /proc/irq or `rtmgr status --verbose`)")]
    NoSuchIrq { irq: u32, list: &'static str },
    #[error("knobs must include \"cgroups\": the cpusets are the partition itself")]
    NoCgroupsKnob,
    #[error("preempt = {0} needs the \"preempt\" knob, which the knobs list leaves out")]
    PreemptKnobOff(PreemptMode),
    #[error(
        "favordynmods = true needs the \"favordynmods\" knob, which the knobs list leaves out"
    )]
    FavordynmodsKnobOff,
    #[error("{0:?}: expected a CPU list (e.g. 1 or 2-3), auto, or auto:N with N >= 1")]
    BadAuto(String),
    #[error("--rt-cpus auto:{0}: {1} CPUs are online and at least one must stay NRT (at most auto:{max})", max = .1 - 1)]
    AutoTooMany(u32, u32),
}

impl PartitionConfig {
    /// Parse a TOML config; unknown keys are an error.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Toml(one_line(&e.to_string())))
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A validated partition, ready to apply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionPlan {
    pub rt: CpuSet,
    pub nrt: CpuSet,
    pub kernel_threads: KthreadPolicy,
    pub irq_leave: Vec<u32>,
    pub irq_rt: Vec<u32>,
    pub latency_bound_us: u64,
    /// The knobs to apply, in apply order (journals written before knobs were
    /// selectable applied them all).
    #[serde(default = "KnobId::all")]
    pub knobs: Vec<KnobId>,
    #[serde(default)]
    pub preempt: Option<PreemptMode>,
    #[serde(default)]
    pub irqbalance: IrqbalanceMode,
    /// Set cgroup2's `favordynmods` for the partition's lifetime.
    #[serde(default)]
    pub favordynmods: bool,
}

impl PartitionPlan {
    /// Does this plan apply the knob?
    pub fn enabled(&self, knob: KnobId) -> bool {
        self.knobs.contains(&knob)
    }
}

/// Merge command line and file (the command line wins) and check against the
/// online CPUs.
pub fn validate(
    config: &PartitionConfig,
    rt_override: Option<&CpuSet>,
    online: &CpuSet,
) -> Result<PartitionPlan, ConfigError> {
    let rt = rt_override
        .cloned()
        .or_else(|| config.rt_cpus.clone())
        .ok_or(ConfigError::NoRtCpus)?;
    if rt.is_empty() {
        return Err(ConfigError::EmptyRt);
    }
    let off = rt.difference(online);
    if !off.is_empty() {
        return Err(ConfigError::RtOffline(off, online.clone()));
    }
    let nrt = match &config.nrt_cpus {
        Some(n) => {
            let off = n.difference(online);
            if !off.is_empty() {
                return Err(ConfigError::NrtOffline(off, online.clone()));
            }
            let both = n.intersection(&rt);
            if !both.is_empty() {
                return Err(ConfigError::Overlap(both));
            }
            if n.is_empty() {
                return Err(ConfigError::EmptyNrt);
            }
            n.clone()
        }
        None => {
            let n = online.difference(&rt);
            if n.is_empty() {
                return Err(ConfigError::NoNrtLeft(online.clone()));
            }
            n
        }
    };
    if let Some(irq) = config.irq.leave.iter().find(|i| config.irq.rt.contains(i)) {
        return Err(ConfigError::IrqConflict(*irq));
    }
    let bound = config.latency_bound_us.unwrap_or(DEFAULT_LATENCY_BOUND_US);
    if bound == 0 {
        return Err(ConfigError::ZeroBound);
    }
    let knobs = enabled_knobs(config)?;
    Ok(PartitionPlan {
        rt,
        nrt,
        kernel_threads: config.kernel_threads,
        irq_leave: config.irq.leave.clone(),
        irq_rt: config.irq.rt.clone(),
        latency_bound_us: bound,
        knobs,
        preempt: config.preempt,
        irqbalance: config.irqbalance.unwrap_or_default(),
        favordynmods: config.favordynmods.unwrap_or(false),
    })
}

/// Check a plan's IRQ exceptions against the IRQs the machine has (`existing`,
/// the numbers under /proc/irq): a number that names no IRQ is a typo or a
/// device on another machine, never silently nothing.
pub fn check_irqs(plan: &PartitionPlan, existing: &[u32]) -> Result<(), ConfigError> {
    for (list, irqs) in [("rt", &plan.irq_rt), ("leave", &plan.irq_leave)] {
        if let Some(&irq) = irqs.iter().find(|i| !existing.contains(i)) {
            return Err(ConfigError::NoSuchIrq { irq, list });
        }
    }
    Ok(())
}

/// The knobs a config selects, in apply order.
fn enabled_knobs(config: &PartitionConfig) -> Result<Vec<KnobId>, ConfigError> {
    let listed = config.knobs.clone().unwrap_or_else(KnobId::all);
    if !listed.contains(&KnobId::Cgroups) {
        return Err(ConfigError::NoCgroupsKnob);
    }
    let knobs: Vec<KnobId> = KnobId::ALL
        .into_iter()
        .filter(|k| listed.contains(k))
        .filter(|k| *k != KnobId::Workqueues || config.workqueues != Some(false))
        .collect();
    if let Some(mode) = config.preempt {
        if !knobs.contains(&KnobId::Preempt) {
            return Err(ConfigError::PreemptKnobOff(mode));
        }
    }
    if config.favordynmods == Some(true) && !knobs.contains(&KnobId::Favordynmods) {
        return Err(ConfigError::FavordynmodsKnobOff);
    }
    Ok(knobs)
}

/// What `--rt-cpus` asks for: a list, or the N CPUs with the least unmovable
/// disturbance (`auto` = `auto:1`, see `placement`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RtCpusArg {
    List(CpuSet),
    Auto(u32),
}

impl RtCpusArg {
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let t = text.trim();
        if t == "auto" {
            return Ok(RtCpusArg::Auto(1));
        }
        if let Some(n) = t.strip_prefix("auto:") {
            return match n.parse::<u32>() {
                Ok(n) if n >= 1 => Ok(RtCpusArg::Auto(n)),
                _ => Err(ConfigError::BadAuto(text.to_string())),
            };
        }
        Ok(RtCpusArg::List(CpuSet::parse_list(t)?))
    }
}

/// Where an IRQ should go under a plan, or None to leave it alone.
pub fn irq_target(plan: &PartitionPlan, irq: u32) -> Option<&CpuSet> {
    if plan.irq_leave.contains(&irq) {
        None
    } else if plan.irq_rt.contains(&irq) {
        Some(&plan.rt)
    } else {
        Some(&plan.nrt)
    }
}

/// Counts of what `apply` did and could not do, with reasons.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ApplyReport {
    pub layout: String,
    pub rt_cgroup: String,
    pub nrt_cgroup: Option<String>,
    pub partition_state: Option<String>,
    pub tasks_moved: usize,
    pub irqs_moved: Vec<u32>,
    /// Things left where they were, with the reason: key = reason, value = items.
    pub not_moved: BTreeMap<String, Vec<String>>,
    pub notes: Vec<String>,
    /// What each enabled knob did here, in apply order (empty in journals
    /// written before knobs reported).
    #[serde(default)]
    pub knobs: Vec<KnobReport>,
    /// Interrupts user space cannot move that will still hit the RT CPUs,
    /// with their rates and the boot option that would move each.
    #[serde(default)]
    pub unmovable_irqs: Vec<placement::IrqHit>,
    /// The boot options that would finish the isolation at the next boot.
    #[serde(default)]
    pub boot: Vec<boot::BootOption>,
    /// How `--rt-cpus auto` chose the RT CPUs, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rt_choice: Option<placement::RtChoice>,
}

/// What one knob did (or, for `--explain`, would do) on this machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KnobReport {
    pub knob: KnobId,
    /// False when this machine lacks what the knob sets (then `lines` says what).
    pub available: bool,
    pub lines: Vec<String>,
}

impl ApplyReport {
    pub fn skip(&mut self, reason: &str, item: String) {
        self.not_moved
            .entry(reason.to_string())
            .or_default()
            .push(item);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn online() -> CpuSet {
        CpuSet::parse_list("0-3").unwrap()
    }

    #[test]
    fn full_config_parses() {
        let cfg = PartitionConfig::from_toml(
            r#"
            rt_cpus = "2-3"
            nrt_cpus = "0-1"
            kernel_threads = "leave"
            latency_bound_us = 150
            workqueues = false
            [irq]
            leave = [9]
            rt = [41]
            "#,
        )
        .unwrap();
        let plan = validate(&cfg, None, &online()).unwrap();
        assert_eq!(plan.rt.to_list(), "2-3");
        assert_eq!(plan.kernel_threads, KthreadPolicy::Leave);
        assert_eq!(irq_target(&plan, 9), None);
        assert_eq!(irq_target(&plan, 41), Some(&plan.rt));
        assert_eq!(irq_target(&plan, 5), Some(&plan.nrt));
        assert!(!plan.enabled(KnobId::Workqueues));
        assert_eq!(plan.knobs.len(), KnobId::ALL.len() - 1);
    }

    #[test]
    fn knobs_are_selectable_and_kept_in_apply_order() {
        let o = online();
        let cfg = PartitionConfig::from_toml(
            "rt_cpus = \"1\"\nknobs = [\"rps\", \"cgroups\", \"irqs\"]\npreempt = \"full\"",
        );
        assert!(matches!(
            validate(&cfg.unwrap(), None, &o),
            Err(ConfigError::PreemptKnobOff(PreemptMode::Full))
        ));
        let cfg = PartitionConfig::from_toml(
            "rt_cpus = \"1\"\nknobs = [\"rps\", \"cgroups\", \"irqs\", \"preempt\"]\npreempt = \"lazy\"",
        )
        .unwrap();
        let plan = validate(&cfg, None, &o).unwrap();
        assert_eq!(
            plan.knobs,
            vec![KnobId::Cgroups, KnobId::Irqs, KnobId::Rps, KnobId::Preempt]
        );
        assert_eq!(plan.preempt, Some(PreemptMode::Lazy));
        let all = validate(&PartitionConfig::default(), Some(&CpuSet::single(1)), &o).unwrap();
        assert_eq!(all.knobs, KnobId::all());
        assert_eq!(all.preempt, None);
        let no_cg = PartitionConfig::from_toml("rt_cpus = \"1\"\nknobs = [\"tasks\"]").unwrap();
        assert_eq!(validate(&no_cg, None, &o), Err(ConfigError::NoCgroupsKnob));
        let err = PartitionConfig::from_toml("knobs = [\"cgroups\", \"frobnicate\"]").unwrap_err();
        assert!(err.to_string().contains("frobnicate"), "{err}");
        assert!(PartitionConfig::from_toml("preempt = \"none\"").is_err());
    }

    #[test]
    fn plans_of_older_journals_still_read() {
        let old = r#"{"rt":"1","nrt":"0","kernel_threads":"move","irq_leave":[],"irq_rt":[],"latency_bound_us":300,"workqueues":true}"#;
        let plan: PartitionPlan = serde_json::from_str(old).unwrap();
        assert_eq!(plan.knobs, KnobId::all());
        assert_eq!(plan.preempt, None);
    }

    #[test]
    fn rt_cpus_argument() {
        assert_eq!(RtCpusArg::parse("auto"), Ok(RtCpusArg::Auto(1)));
        assert_eq!(RtCpusArg::parse("auto:3"), Ok(RtCpusArg::Auto(3)));
        assert_eq!(
            RtCpusArg::parse("2-3"),
            Ok(RtCpusArg::List(CpuSet::parse_list("2-3").unwrap()))
        );
        for bad in ["auto:0", "auto:", "auto:x", "auto:-1", "automatic"] {
            assert!(RtCpusArg::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn command_line_wins_and_nrt_defaults_to_rest() {
        let cfg = PartitionConfig::from_toml("rt_cpus = \"3\"").unwrap();
        let plan = validate(&cfg, Some(&CpuSet::single(1)), &online()).unwrap();
        assert_eq!(plan.rt.to_list(), "1");
        assert_eq!(plan.nrt.to_list(), "0,2-3");
        assert_eq!(plan.latency_bound_us, DEFAULT_LATENCY_BOUND_US);
    }

    #[test]
    fn bad_inputs_are_refused() {
        let empty = PartitionConfig::default();
        let o = online();
        assert_eq!(validate(&empty, None, &o), Err(ConfigError::NoRtCpus));
        assert_eq!(
            validate(&empty, Some(&CpuSet::new()), &o),
            Err(ConfigError::EmptyRt)
        );
        assert!(matches!(
            validate(&empty, Some(&CpuSet::parse_list("0-3").unwrap()), &o),
            Err(ConfigError::NoNrtLeft(_))
        ));
        assert!(matches!(
            validate(&empty, Some(&CpuSet::single(7)), &o),
            Err(ConfigError::RtOffline(..))
        ));
        let overlap = PartitionConfig::from_toml("rt_cpus = \"1\"\nnrt_cpus = \"0-1\"").unwrap();
        assert!(matches!(
            validate(&overlap, None, &o),
            Err(ConfigError::Overlap(_))
        ));
        let off = PartitionConfig::from_toml("rt_cpus = \"1\"\nnrt_cpus = \"9\"").unwrap();
        assert!(matches!(
            validate(&off, None, &o),
            Err(ConfigError::NrtOffline(..))
        ));
        let irq = PartitionConfig::from_toml("rt_cpus = \"1\"\n[irq]\nleave=[3]\nrt=[3]").unwrap();
        assert_eq!(validate(&irq, None, &o), Err(ConfigError::IrqConflict(3)));
        let zero = PartitionConfig::from_toml("rt_cpus = \"1\"\nlatency_bound_us = 0").unwrap();
        assert_eq!(validate(&zero, None, &o), Err(ConfigError::ZeroBound));
    }

    #[test]
    fn irqs_the_machine_lacks_are_refused() {
        let cfg =
            PartitionConfig::from_toml("rt_cpus = \"1\"\n[irq]\nleave = [9]\nrt = [41]").unwrap();
        let plan = validate(&cfg, None, &online()).unwrap();
        assert_eq!(check_irqs(&plan, &[0, 9, 41]), Ok(()));
        let e = check_irqs(&plan, &[0, 9]).unwrap_err();
        assert_eq!(
            e,
            ConfigError::NoSuchIrq {
                irq: 41,
                list: "rt"
            }
        );
        assert!(
            e.to_string()
                .starts_with("IRQ 41 in [irq] rt does not exist"),
            "{e}"
        );
        assert_eq!(
            check_irqs(&plan, &[41]),
            Err(ConfigError::NoSuchIrq {
                irq: 9,
                list: "leave"
            })
        );
        assert_eq!(
            check_irqs(
                &validate(
                    &PartitionConfig::default(),
                    Some(&CpuSet::single(1)),
                    &online()
                )
                .unwrap(),
                &[]
            ),
            Ok(())
        );
    }

    #[test]
    fn unknown_keys_and_bad_lists_are_errors() {
        let err = PartitionConfig::from_toml("rt_cpus = \"1\"\nrt_cpu = \"2\"").unwrap_err();
        assert!(err.to_string().contains("unknown field"), "{err}");
        assert!(!err.to_string().contains('\n'));
        assert!(PartitionConfig::from_toml("[irq]\nmove = [1]").is_err());
        assert!(PartitionConfig::from_toml("rt_cpus = \"1-x\"").is_err());
        assert!(PartitionConfig::from_toml("kernel_threads = \"pin\"").is_err());
    }
}
