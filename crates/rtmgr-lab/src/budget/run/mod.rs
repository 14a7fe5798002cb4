//! `rtmgr measure budget`: budget-based RTAI §4 on this machine, soft and hard
//! enforcement side by side, interleaved in rounds. §4.1: enforcement overhead
//! per timer expiration for {(P=2 ms, W=1 ms), (P=5 ms, W=1 ms)}; §4.2: budget
//! rate per period for three compute tasks and one I/O-heavy task; §5: a budget
//! shared by a group. Report schema `rtmgr.budget/1` (crate::budget).

mod summary;
mod tasks;
pub mod taskset;

use crate::budget::{BudgetReport, BudgetRun, BUDGET_SCHEMA};
use crate::experiment::session::{stop_flag, STOP_SIGNALS};
use crate::experiment::{bad_input, Error, Reporter, Result};
use rtmgr_linux::machine_access::machine_lock;
use rtmgr_linux::Host;
use rtmgr_rt::periodic::SoftVariant;
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use summary::{group_members_to_one, group_spec, summarise, Raw, WARMUP};
use taskset::{ns, TaskSpec};

/// Which part of seed §4 to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Experiment {
    /// §4.1: enforcement overhead.
    Overhead,
    /// §4.2: budget rate per period.
    Precision,
    /// §5: a budget shared by two runaway tasks.
    Group,
    All,
}

#[derive(Debug, Clone)]
pub struct BudgetConfig {
    pub experiment: Experiment,
    /// Run the soft modes (one per variant).
    pub soft: bool,
    /// Run hard mode (SCHED_DEADLINE).
    pub hard: bool,
    pub variants: Vec<SoftVariant>,
    /// §4.2: periods of the longest-period task to record.
    pub periods: u64,
    /// §4.1: run time per configuration, ms.
    pub overhead_ms: u64,
    /// §4.2 task set (default: the seed's).
    pub taskset: Option<Vec<TaskSpec>>,
    /// Interleave the modes in this many rounds (the run time is split).
    pub rounds: u64,
}

/// An enforcement mode of one run.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    Soft(SoftVariant),
    Hard,
    /// Members of one group budget (soft mode).
    Group,
}

impl Mode {
    fn label(&self) -> String {
        match self {
            Mode::Soft(v) => format!(
                "soft/{}",
                serde_json::to_value(v)
                    .ok()
                    .and_then(|j| j.as_str().map(str::to_string))
                    .unwrap_or_else(|| "?".into())
            ),
            Mode::Hard => "hard".into(),
            Mode::Group => "soft/group".into(),
        }
    }
}

/// One experiment of the plan: a task set run in each mode for `duration_ns`.
struct Planned {
    name: &'static str,
    set: Vec<TaskSpec>,
    duration_ns: u64,
    modes: Vec<Mode>,
}

/// Run every mode in `rounds` interleaved rounds (the mode order rotates each
/// round) and merge each mode's rounds.
fn run_experiment(
    p: &Planned,
    rounds: u64,
    stop: &Arc<AtomicBool>,
    io: &Arc<tasks::IoFile>,
    progress: &mut dyn FnMut(&str),
) -> Vec<BudgetRun> {
    let (experiment, set, modes) = (p.name, &p.set[..], &p.modes[..]);
    let mut acc: Vec<(Vec<Raw>, Vec<String>, u64)> = modes
        .iter()
        .map(|_| ((0..set.len()).map(|_| Raw::default()).collect(), vec![], 0))
        .collect();
    let chunk = p.duration_ns / rounds;
    'rounds: for round in 0..rounds {
        for k in 0..modes.len() {
            if stop.load(Ordering::Relaxed) {
                break 'rounds;
            }
            let m = (k + round as usize) % modes.len();
            progress(&format!(
                "{experiment} {} round {}/{rounds} ({:.1} s)",
                modes[m].label(),
                round + 1,
                chunk as f64 / 1e9
            ));
            let (raws, errors, ran) = &mut acc[m];
            *ran += chunk;
            let mut ok = vec![];
            for (i, r) in tasks::run_set(set, modes[m], chunk, stop, io)
                .into_iter()
                .enumerate()
            {
                match r {
                    Ok(raw) => ok.push((i, raw)),
                    Err(e) => errors.push(e),
                }
            }
            if modes[m] == Mode::Group {
                let mut members: Vec<Raw> = ok.into_iter().map(|(_, r)| r).collect();
                group_members_to_one(&mut members);
                ok = members.into_iter().map(|r| (0, r)).collect();
            }
            for (i, raw) in ok {
                raws[i].merge(raw);
            }
        }
    }
    modes
        .iter()
        .zip(acc)
        .map(|(m, (raws, errors, ran))| BudgetRun {
            experiment: experiment.into(),
            mode: m.label(),
            duration_ms: ran / 1_000_000,
            tasks: group_spec(set, *m)
                .iter()
                .zip(&raws)
                .filter(|(_, r)| r.stats.periods > 0)
                .map(|(t, r)| summarise(t, r))
                .collect(),
            errors,
        })
        .collect()
}

/// Check the request, take the machine lock, run the planned experiments.
pub fn run(host: &Host, cfg: &BudgetConfig, rep: &mut dyn Reporter) -> Result<BudgetReport> {
    // Online CPUs (not this process's affinity, which a partition may narrow).
    let cpus = rtmgr_linux::cpus::online(host)?.len().max(1) as u32;
    let precision = cfg
        .taskset
        .clone()
        .unwrap_or_else(|| taskset::precision_set(cpus));
    taskset::validate(&precision, cpus).or_else(bad_input)?;
    if cfg.periods == 0 || cfg.overhead_ms == 0 || cfg.rounds == 0 {
        return bad_input("--periods, --overhead-ms and --rounds must be > 0");
    }
    if !rtmgr_linux::sched::is_root() {
        return bad_input("rtmgr measure budget needs root (SCHED_FIFO / SCHED_DEADLINE tasks)");
    }
    let mut modes: Vec<Mode> = vec![];
    if cfg.soft {
        modes.extend(cfg.variants.iter().map(|&v| Mode::Soft(v)));
    }
    if cfg.hard {
        modes.push(Mode::Hard);
    }
    let mut plan: Vec<Planned> = vec![];
    let all = cfg.experiment == Experiment::All;
    if all || cfg.experiment == Experiment::Overhead {
        plan.push(Planned {
            name: "overhead",
            set: taskset::overhead_set(cpus),
            duration_ns: cfg.overhead_ms * 1_000_000,
            modes: modes.clone(),
        });
    }
    if all || cfg.experiment == Experiment::Precision {
        let pmax = precision.iter().map(|t| t.period_ms).fold(0.0, f64::max);
        plan.push(Planned {
            name: "precision",
            set: precision,
            duration_ns: ns(pmax) * (cfg.periods + WARMUP as u64 * cfg.rounds),
            modes: modes.clone(),
        });
    }
    if (all || cfg.experiment == Experiment::Group) && cfg.soft {
        let dur = ns(4.0) * (cfg.periods + WARMUP as u64 * cfg.rounds);
        plan.push(Planned {
            name: "group",
            set: taskset::group_set(),
            duration_ns: dur,
            modes: vec![Mode::Group],
        });
    }
    let _lock = machine_lock(host)?;
    let stop = stop_flag(&STOP_SIGNALS)?;
    let io =
        Arc::new(tasks::IoFile::create().map_err(|e| Error::io("create the I/O task's file", e))?);
    let total: u64 = plan.iter().map(|p| p.modes.len() as u64 * cfg.rounds).sum();
    let mut runs = vec![];
    let mut k = 0;
    let mut progress = |what: &str| {
        k += 1;
        rep.note(&format!("[{k}/{total}] {what}"));
    };
    for p in &plan {
        runs.extend(run_experiment(p, cfg.rounds, &stop, &io, &mut progress));
    }
    Ok(BudgetReport {
        schema: BUDGET_SCHEMA.into(),
        command: std::env::args().collect::<Vec<_>>().join(" "),
        interrupted: stop.load(Ordering::Relaxed),
        runs,
    })
}
