//! Before `rtmgr evaluate`'s first round: check the request, choose the RT CPU
//! (ARTiS §2.1), list the configurations this kernel can run (ARTiS Table 1),
//! run the host test, take the machine lock and check nothing is applied.

use super::configs::{Config, CONFIGS};
use super::host_prior::host_preemption_for;
use super::EvaluateConfig;
use crate::experiment::long_run::rounds_for;
use crate::experiment::{bad_input, Error, Reporter, Result};
use crate::measure::load::LoadProgram;
use rtmgr_core::host_preemption::HostPreemption;
use rtmgr_core::partition::{validate, KnobId, PartitionConfig, PartitionPlan, PreemptMode};
use rtmgr_core::CpuSet;
use rtmgr_linux::journal::DEFAULT_JOURNAL;
use rtmgr_linux::lock::MachineLock;
use rtmgr_linux::machine_access::{machine_lock, require_root};
use rtmgr_linux::partition::{self, ApplyOptions};
use rtmgr_linux::Host;
use std::path::PathBuf;
use std::time::Duration;

/// A checked request, with the machine taken (held until dropped).
pub(super) struct Prepared {
    pub program: LoadProgram,
    pub online: CpuSet,
    pub rt_cpu: u32,
    /// Why this RT CPU, when rtmgr chose it.
    pub rt_choice: Option<String>,
    pub plan: PartitionPlan,
    pub configs: Vec<Config>,
    /// Configurations this kernel cannot run, and why.
    pub skipped: Vec<String>,
    /// The partition with the full preemption model, for the preempt segment.
    pub preempt_plan: PartitionPlan,
    pub rounds: u32,
    pub segment: Duration,
    pub host_test: Option<HostPreemption>,
    pub opts: ApplyOptions,
    _lock: Option<MachineLock>,
}

/// Check the request and take the machine; every refusal is bad input and
/// changes nothing.
pub(super) fn prepare(
    host: &Host,
    cfg: &EvaluateConfig,
    rep: &mut dyn Reporter,
) -> Result<Prepared> {
    require_root(host, "rtmgr evaluate")?;
    let program = cfg.load_engine.resolve()?;
    let online = rtmgr_linux::cpus::online(host)?;
    if online.len() < 2 {
        return bad_input(format!(
            "rtmgr evaluate needs at least 2 online CPUs (one RT, one NRT); online: {online}"
        ));
    }
    let (rt_cpu, rt_choice) = match cfg.rt_cpu {
        Some(c) => (c, None),
        None => {
            let window = rtmgr_linux::unmovable::SAMPLE_WINDOW;
            let c = rtmgr_linux::unmovable::choose_rt_cpus(host, 1, window)
                .map_err(|e| Error::Failed(format!("choosing the RT CPU: {e}")))?;
            (c.rt.first().expect("one CPU"), Some(c.reason))
        }
    };
    let plan = validate(
        &PartitionConfig::default(),
        Some(&CpuSet::single(rt_cpu)),
        &online,
    )
    .or_else(|e| bad_input(e.to_string()))?;
    if cfg.rounds == 0 {
        return bad_input("--rounds must be at least 1");
    }
    let (configs, skipped) = configurations(host, cfg);
    let preempt_plan = PartitionPlan {
        knobs: vec![KnobId::Preempt],
        preempt: Some(PreemptMode::Full),
        ..plan.clone()
    };
    let total = cfg.total;
    let rounds = rounds_for(cfg.rounds, total, configs.len());
    let segment = total / (rounds * configs.len() as u32);
    if segment < Duration::from_millis(100) || cfg.interval.is_zero() || cfg.interval > segment {
        return bad_input(format!(
            "--duration {total:?} over {rounds} rounds gives {segment:?} per configuration: too short for --interval {:?}",
            cfg.interval
        ));
    }
    // What lending may cost here, before the machine is taken for the rounds.
    let host_test = host_preemption_for(host, rt_cpu, rep)?;
    let (lock, opts) = take_machine(host)?;
    Ok(Prepared {
        program,
        online,
        rt_cpu,
        rt_choice,
        plan,
        configs,
        skipped,
        preempt_plan,
        rounds,
        segment,
        host_test,
        opts,
        _lock: lock,
    })
}

/// The configurations, with ARTiS Table 1's "Linux with preemption" where the
/// kernel can switch to it; those left out, and why.
fn configurations(host: &Host, cfg: &EvaluateConfig) -> (Vec<Config>, Vec<String>) {
    let mut configs = CONFIGS.to_vec();
    if cfg.control {
        configs.push(Config::ShieldTwin);
    }
    let mut skipped = Vec::new();
    match partition::preempt_switchable(host, PreemptMode::Full) {
        Ok(()) => configs.insert(2, Config::Preempt),
        Err(why) => skipped.push(format!(
            "preempt (ARTiS Table 1's Linux with preemption): this kernel cannot switch its preemption model at run time ({why})"
        )),
    }
    (configs, skipped)
}

/// Take the machine lock; refuse when a partition is applied or rtmgr
/// cgroups are left over.
fn take_machine(host: &Host) -> Result<(Option<MachineLock>, ApplyOptions)> {
    let journal = PathBuf::from(DEFAULT_JOURNAL);
    let lock = machine_lock(host)?;
    if let Some(a) = partition::current(host, &journal)? {
        return bad_input(format!(
            "a partition is already applied (RT CPUs {}): evaluate applies and resets its own; run `rtmgr partition reset` first",
            a.plan.rt
        ));
    }
    let opts = ApplyOptions {
        journal,
        replace: false,
    };
    // Also refuses leftover rtmgr cgroups (a partition applied with another journal).
    if let Err(e) = partition::preflight(host, &opts) {
        return bad_input(format!("cannot apply evaluate's partition: {e}"));
    }
    Ok((lock, opts))
}
