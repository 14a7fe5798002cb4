//! `rtmgr measure cost`: what real time costs ordinary work here — the same
//! work in every configuration (`configs`), interleaved in rounds, as mean ±
//! sd and the slowdown against stock: DROPS §5.1 Fig. 4's micro-benchmarks,
//! McKenney §2.2 Table 1's build (`build`), DROPS §5.2 Fig. 5's load sweep.
//! Always resets the partition it applied.

mod build;
pub mod configs;
mod work;

use crate::cost::micro::{MicroKind, WorkerRequest, JOB_MIX};
use crate::cost::{
    set_slowdowns, summarize_sweep, sweep_levels, Better, BuildConfigCost, BuildCost, CostReport,
    Measured, MicroBench, SweepConfigCost, SweepCost, COST_SCHEMA,
};
use crate::experiment::own_partition;
use crate::experiment::session::{stop_flag, STOP_SIGNALS};
use crate::experiment::{bad_input, Error, Reporter, Result};
use crate::measure::{host_info, unix_now_s};
use crate::report::Header;
use build::BuildSource;
use configs::{Config, Placement, Rounds};
use rtmgr_core::CpuSet;
use rtmgr_linux::machine_access::require_root;
use rtmgr_linux::Host;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Which parts to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Parts {
    pub micro: bool,
    pub build: bool,
    pub sweep: bool,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct CostConfig {
    pub parts: Parts,
    /// Rounds; each runs every configuration once (at least 3 for a sd worth the name).
    pub rounds: u32,
    /// The RT CPU (default: the one with the least unmovable work).
    pub rt_cpu: Option<u32>,
    /// Run time of each micro-benchmark per configuration and round.
    pub micro_time: Duration,
    /// Run time of each sweep point per configuration and round.
    pub sweep_time: Duration,
    /// Highest number of concurrent jobs (default: 4 × online CPUs).
    pub sweep_max: Option<u32>,
    /// The crate to build (`name` or `name@version`).
    pub build_crate: String,
    /// The binary with the `__cost` subcommand (the running rtmgr).
    pub worker: PathBuf,
}

impl CostConfig {
    pub fn new(worker: PathBuf) -> CostConfig {
        CostConfig {
            parts: Parts {
                micro: true,
                build: true,
                sweep: true,
            },
            // 4 rounds, the fewest the slowdowns' intervals need, in the
            // micro-benchmarks' and sweep's time of the 3 rounds before (issue 28).
            rounds: 4,
            rt_cpu: None,
            micro_time: Duration::from_millis(225),
            sweep_time: Duration::from_millis(1500),
            sweep_max: None,
            build_crate: "regex-syntax".into(),
            worker,
        }
    }
}

/// Everything measured, per configuration (indexed like the configuration list).
struct Samples {
    micro: Vec<Vec<Vec<f64>>>,
    sweep: Vec<Vec<Vec<f64>>>,
    build: Vec<[Vec<f64>; 3]>,
    build_failures: Vec<Vec<String>>,
}

/// A private directory for the work's files, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn create() -> Result<Scratch> {
        let d = std::env::temp_dir().join(format!(
            "rtmgr-cost-{}-{}",
            std::process::id(),
            crate::measure::mono_ns()
        ));
        std::fs::create_dir(&d).map_err(|e| Error::io(format!("create {}", d.display()), e))?;
        Ok(Scratch(d))
    }

    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// What a run gives back: the report (partial when cut short) and the
/// failure that ended it early, if one did.
pub struct CostOutcome {
    pub report: CostReport,
    pub failure: Option<Error>,
}

/// Refuse a request that cannot run (bad input: nothing changed yet).
fn check_request(cfg: &CostConfig) -> Result<()> {
    if cfg.rounds == 0 {
        return bad_input("--rounds must be at least 1");
    }
    if !(cfg.parts.micro || cfg.parts.build || cfg.parts.sweep) {
        return bad_input("--only: nothing to run");
    }
    if !cfg.worker.is_file() {
        return bad_input(format!(
            "the cost worker {} does not exist",
            cfg.worker.display()
        ));
    }
    Ok(())
}

/// Check the request, take the machine, run every round, reset the partition.
pub fn run(host: &Host, cfg: &CostConfig, rep: &mut dyn Reporter) -> Result<CostOutcome> {
    require_root(host, "rtmgr measure cost")?;
    check_request(cfg)?;
    let scratch = Scratch::create()?;
    let source = if cfg.parts.build {
        Some(BuildSource::prepare(&cfg.build_crate, scratch.path())?)
    } else {
        None
    };
    let own = own_partition::prepare(host, "rtmgr measure cost", cfg.rt_cpu)?;
    let (online, plan, rt_cpu) = (&own.online, &own.plan, own.rt_cpu);
    let stop = stop_flag(&STOP_SIGNALS)?;
    let started = unix_now_s();
    let (configs, skipped) = configs::available(host);
    let levels = if cfg.parts.sweep {
        sweep_levels(online.len(), cfg.sweep_max)
    } else {
        Vec::new()
    };
    let micro: Vec<MicroKind> = if cfg.parts.micro {
        MicroKind::ALL.to_vec()
    } else {
        Vec::new()
    };
    let n = configs.len();
    let mut samples = Samples {
        micro: vec![vec![Vec::new(); n]; micro.len()],
        sweep: vec![vec![Vec::new(); n]; levels.len()],
        build: vec![[Vec::new(), Vec::new(), Vec::new()]; n],
        build_failures: vec![Vec::new(); n],
    };
    rep.note(&format!(
        "measure cost: RT CPU {rt_cpu}, NRT CPUs {}, configurations {}, {} rounds: {} micro-benchmarks x {:?}, sweep {:?} jobs x {:?}{}",
        plan.nrt,
        configs.iter().map(|c| c.name()).collect::<Vec<_>>().join(", "),
        cfg.rounds,
        micro.len(),
        cfg.micro_time,
        levels,
        cfg.sweep_time,
        source.as_ref().map(|s| format!(", build of {}", s.label)).unwrap_or_default()
    ));
    let rounds = Rounds {
        host,
        online,
        plan,
        opts: &own.opts,
        configs: &configs,
        rounds: cfg.rounds,
        stop: &stop,
    };
    let t0 = Instant::now();
    let index = |c: Config| configs.iter().position(|x| *x == c).expect("listed");
    let (rounds_done, failure) = rounds.run(rep, |r, place, rep| {
        let i = index(place.config);
        let say = |rep: &mut dyn Reporter, what: &str| {
            rep.progress(
                t0.elapsed(),
                &format!(
                    "round {}/{} {:8} {what}",
                    r + 1,
                    cfg.rounds,
                    place.config.name()
                ),
            )
        };
        for (k, kind) in micro.iter().enumerate() {
            say(rep, kind.name());
            let req = WorkerRequest::Micro {
                kind: *kind,
                budget: cfg.micro_time,
            };
            let v = work::run_worker(host, place, &cfg.worker, &req, scratch.path(), &stop)?;
            samples.micro[k][i].push(v);
        }
        for (k, level) in levels.iter().enumerate() {
            say(rep, &format!("{level} concurrent jobs"));
            let req = WorkerRequest::Jobs {
                concurrency: *level,
                budget: cfg.sweep_time,
                dir: scratch.path().to_path_buf(),
            };
            let v = work::run_worker(host, place, &cfg.worker, &req, scratch.path(), &stop)?;
            samples.sweep[k][i].push(v);
        }
        if let Some(src) = &source {
            say(rep, &format!("build of {}", src.label));
            build_once(host, place, src, scratch.path(), &stop, &mut samples, i)?;
        }
        Ok(())
    });
    let partial = match (&failure, stop.load(std::sync::atomic::Ordering::Relaxed)) {
        (Some(e), _) => Some(format!("failed: {e}")),
        (None, true) => Some("interrupted (SIGINT/SIGTERM): fewer rounds than planned".into()),
        _ => None,
    };
    let names: Vec<&str> = configs.iter().map(|c| c.name()).collect();
    let report = CostReport {
        header: Header::new(COST_SCHEMA, started, host_info(online), partial),
        rt_cpus: plan.rt.clone(),
        nrt_cpus: plan.nrt.clone(),
        rounds_planned: cfg.rounds,
        rounds_done,
        configs: configs.iter().map(|c| c.report(online, plan)).collect(),
        skipped,
        micro: micro_benches(&micro, &names, &samples),
        build: source
            .as_ref()
            .map(|s| build_cost(s, &configs, online, plan, &mut samples)),
        sweep: cfg
            .parts
            .sweep
            .then(|| sweep_cost(cfg, &levels, &names, &samples)),
    };
    Ok(CostOutcome { report, failure })
}

/// One clean build at `place`; a failed build is recorded, not fatal.
fn build_once(
    host: &Host,
    place: &Placement<'_>,
    src: &BuildSource,
    scratch: &std::path::Path,
    stop: &std::sync::atomic::AtomicBool,
    samples: &mut Samples,
    i: usize,
) -> Result<()> {
    let args = src.clean_args(place.cpus.len())?;
    let log = scratch.join("build.log");
    let limit = Duration::from_secs(3600);
    let t = work::run_timed(host, place, src.program(), args, &log, limit, stop)?;
    if t.exit_code == Some(0) {
        let b = &mut samples.build[i];
        b[0].push(t.real_s);
        b[1].push(t.user_s);
        b[2].push(t.sys_s);
    } else {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        let last: Vec<&str> = text.lines().rev().take(3).collect();
        samples.build_failures[i].push(format!("exit {:?}: {}", t.exit_code, last.join(" | ")));
    }
    Ok(())
}

fn micro_benches(kinds: &[MicroKind], names: &[&str], s: &Samples) -> Vec<MicroBench> {
    kinds
        .iter()
        .zip(&s.micro)
        .map(|(k, per)| {
            let mut rows: Vec<Measured> = names
                .iter()
                .zip(per)
                .map(|(n, v)| Measured::new(n, v.clone()))
                .collect();
            set_slowdowns(&mut rows, k.better());
            MicroBench {
                name: k.name().into(),
                what: k.what().into(),
                unit: k.unit().into(),
                better: k.better(),
                per_config: rows,
            }
        })
        .collect()
}

fn build_cost(
    src: &BuildSource,
    configs: &[Config],
    online: &CpuSet,
    plan: &rtmgr_core::partition::PartitionPlan,
    s: &mut Samples,
) -> BuildCost {
    let column = |k: usize, s: &Samples| {
        let mut rows: Vec<Measured> = configs
            .iter()
            .zip(&s.build)
            .map(|(c, b)| Measured::new(c.name(), b[k].clone()))
            .collect();
        set_slowdowns(&mut rows, Better::Lower);
        rows
    };
    let (real, user, sys) = (column(0, s), column(1, s), column(2, s));
    let per_config = configs
        .iter()
        .enumerate()
        .map(|(i, c)| BuildConfigCost {
            config: c.name().into(),
            jobs: c.work_cpus(online, plan).len() as u32,
            real_s: real[i].clone(),
            user_s: user[i].clone(),
            sys_s: sys[i].clone(),
            failures: std::mem::take(&mut s.build_failures[i]),
        })
        .collect();
    BuildCost {
        source: src.label.clone(),
        command: src.command(),
        per_config,
    }
}

fn sweep_cost(cfg: &CostConfig, levels: &[u32], names: &[&str], s: &Samples) -> SweepCost {
    let mut per_config: Vec<SweepConfigCost> = names
        .iter()
        .enumerate()
        .map(|(i, n)| SweepConfigCost {
            config: n.to_string(),
            points: s
                .sweep
                .iter()
                .map(|per| Measured::new(n, per[i].clone()))
                .collect(),
            relative_to_stock: None,
            max_jobs_per_min: None,
            max_at: None,
        })
        .collect();
    summarize_sweep(levels, &mut per_config);
    SweepCost {
        job: JOB_MIX.into(),
        segment_ms: cfg.sweep_time.as_millis() as u64,
        levels: levels.to_vec(),
        per_config,
    }
}
