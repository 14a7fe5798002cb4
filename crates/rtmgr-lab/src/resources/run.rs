//! `rtmgr measure resources` (DROPS §4.4–5: what owning the cache and the
//! disk buys the RT side): an RT task's execution-time distribution beside
//! NRT neighbours — a cache-sized matrix multiply beside a cache thrasher,
//! small reads beside a dd/find-like I/O load, the latter with and without
//! the I/O setting a grant gives (IOPRIO_CLASS_RT) — conditions interleaved
//! round by round, reported as ratios. Where resctrl or the NRT cgroups are
//! missing, the report says what that part would measure.

use super::contend::{cache_bytes, matmul, rt_pass, Neighbours, ReadTarget};
use crate::experiment::session::check_cpus;
use crate::experiment::{bad_input, Reporter, Result, Session};
use crate::measure::probe::max_fifo_priority;
use crate::resources::{ratio, CachePart, Condition, IoPart, ResourcesReport, RESOURCES_SCHEMA};
use rtmgr_core::stats::Hist;
use rtmgr_core::CpuSet;
use rtmgr_linux::resources::{nrt, resctrl};
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub struct ResourcesConfig {
    /// The RT CPU (default: `Session::default_cpu`).
    pub cpu: Option<u32>,
    /// Interleaved rounds; each runs every condition once.
    pub rounds: u32,
    /// Runs of the routine per condition per round.
    pub runs: u64,
    /// Matrix size (default: sized to half the largest cache).
    pub matrix_n: Option<u32>,
    /// Where the I/O part's files go (a disk, not tmpfs).
    pub dir: PathBuf,
    pub cache: bool,
    pub io: bool,
}

/// Checks that need no machine.
pub fn check(cfg: &ResourcesConfig) -> Result<()> {
    if cfg.rounds == 0 || cfg.runs == 0 {
        return bad_input("--rounds and --runs must be at least 1");
    }
    if !cfg.cache && !cfg.io {
        return bad_input("nothing to measure: both the cache and the I/O part are off");
    }
    if cfg.matrix_n.is_some_and(|n| !(4..=2048).contains(&n)) {
        return bad_input("--matrix must be within 4..2048");
    }
    Ok(())
}

/// Where the RT routine runs (at `prio`) and where its neighbours run.
#[derive(Debug, Clone, Copy)]
struct Cpus {
    cpu: u32,
    other: u32,
    prio: u8,
}

/// Interleave: round r runs the conditions starting at r (mod their number).
fn rounds(
    s: &Session,
    cfg: &ResourcesConfig,
    names: &[&str],
    rep: &mut dyn Reporter,
    mut one: impl FnMut(usize) -> Result<Hist>,
) -> Result<Vec<Condition>> {
    let mut hists = vec![Hist::new(); names.len()];
    for r in 0..cfg.rounds as usize {
        for k in 0..names.len() {
            if s.stopped() {
                break;
            }
            let i = (r + k) % names.len();
            rep.note(&format!("round {}/{}: {}", r + 1, cfg.rounds, names[i]));
            hists[i].merge(&one(i)?);
        }
    }
    Ok(names
        .iter()
        .zip(&hists)
        .map(|(n, h)| Condition::of(n, h))
        .collect())
}

fn cache_part(
    s: &Session,
    cfg: &ResourcesConfig,
    at: Cpus,
    rep: &mut dyn Reporter,
) -> Result<CachePart> {
    let Cpus { cpu, other, prio } = at;
    let cache = cache_bytes(&s.host, cpu).unwrap_or(1 << 20);
    let n = cfg
        .matrix_n
        .unwrap_or_else(|| ((cache / 2 / 24) as f64).sqrt().clamp(16.0, 256.0) as u32)
        as usize;
    let thrash = (cache * 4).max(32 << 20) as usize;
    let names = ["alone", "beside thrasher"];
    let conditions = rounds(s, cfg, &names, rep, |i| {
        let _thrasher = if i == 1 {
            Some(Neighbours::thrasher(other, thrash)?)
        } else {
            None
        };
        let a: Vec<f64> = (0..n * n).map(|i| (i % 7) as f64).collect();
        let b = a.clone();
        let mut c = vec![0.0; n * n];
        Ok(rt_pass(
            cpu,
            prio,
            cfg.runs,
            || {},
            move || {
                matmul(n, &a, &b, &mut c);
                std::hint::black_box(&c);
            },
        )?)
    })?;
    let partition = match resctrl::detect(&s.host) {
        Err(why) => format!(
            "not available: {why}. With resctrl it would add a third condition — the multiply in a resctrl group holding half the L3 ways, the thrasher in the default group with the rest — and report its ratio over \"alone\" next to the unpartitioned \"beside thrasher\" / \"alone\" (DROPS §4.4: the slowdown cut by 74 %)"
        ),
        Ok(_) => "resctrl is present, but this version does not measure the partitioned condition: run `rtmgr serve` with [resources] rt_cache_share and compare by hand".into(),
    };
    Ok(CachePart {
        matrix_n: n as u32,
        working_set_bytes: (3 * n * n * 8) as u64,
        thrash_bytes: thrash as u64,
        ratios: vec![ratio(&conditions[1], &conditions[0])],
        conditions,
        partition,
    })
}

fn io_part(s: &Session, cfg: &ResourcesConfig, at: Cpus, rep: &mut dyn Reporter) -> Result<IoPart> {
    let Cpus { cpu, other, prio } = at;
    let pid = std::process::id();
    let target = ReadTarget::create(cfg.dir.join(format!("rtmgr-measure-read.{pid}")), 64 << 20)?;
    let load_file = cfg.dir.join(format!("rtmgr-measure-load.{pid}"));
    let rt_io = rtmgr_sys::ioprio::value(rtmgr_sys::ioprio::CLASS_RT, 4);
    let names = ["alone", "beside I/O load", "beside I/O load, RT ioprio"];
    let conditions = rounds(s, cfg, &names, rep, |i| {
        let _load = if i > 0 {
            Some(Neighbours::io_load(other, load_file.clone(), 256 << 20)?)
        } else {
            None
        };
        let reader = target.reader()?;
        Ok(rt_pass(
            cpu,
            prio,
            cfg.runs,
            move || {
                if i == 2 {
                    let _ = rtmgr_sys::ioprio::set(0, rt_io);
                }
            },
            reader,
        )?)
    })?;
    let scheduler = target.scheduler(&s.host);
    let mut settings = vec![
        "settings: the RT reader gets IOPRIO_CLASS_RT level 4, as a grant gives it".to_string(),
    ];
    let weights = rtmgr_core::resources::ResourcesConfig {
        nrt_io_weight: Some(50),
        nrt_memory_limit: Some("1G".into()),
        ..Default::default()
    };
    for f in [
        nrt::io_weight(&s.host, &weights),
        nrt::memory(&s.host, &weights),
    ]
    .into_iter()
    .flatten()
    {
        let line = if f.settings.is_empty() {
            format!("not measured: {}", f.line)
        } else {
            format!(
                "not measured here (it would change the machine's NRT cgroups): {}",
                f.line
            )
        };
        settings.push(line);
    }
    if scheduler.as_deref() == Some("none") {
        settings.push("the disk's scheduler is \"none\": it ignores ioprio classes, so the RT-ioprio condition can only match the plain one".into());
    }
    Ok(IoPart {
        file: target.path.display().to_string(),
        file_bytes: target.bytes,
        read_bytes: 4096,
        direct: target.direct,
        scheduler,
        ratios: vec![
            ratio(&conditions[1], &conditions[0]),
            ratio(&conditions[2], &conditions[1]),
        ],
        conditions,
        settings,
    })
}

pub fn run(s: &Session, cfg: &ResourcesConfig, rep: &mut dyn Reporter) -> Result<ResourcesReport> {
    check(cfg)?;
    let cpu = cfg.cpu.unwrap_or_else(|| s.default_cpu());
    check_cpus("--cpu", &CpuSet::single(cpu), &s.online)?;
    let Some(other) = s.online.iter().find(|&c| c != cpu) else {
        return bad_input("the neighbour needs another online CPU");
    };
    let at = Cpus {
        cpu,
        other,
        prio: max_fifo_priority(),
    };
    let mut notes = Vec::new();
    let cache = if cfg.cache {
        Some(cache_part(s, cfg, at, rep)?)
    } else {
        None
    };
    let io = if cfg.io && !s.stopped() {
        Some(io_part(s, cfg, at, rep)?)
    } else {
        None
    };
    notes.extend(s.partial());
    Ok(ResourcesReport {
        schema: RESOURCES_SCHEMA,
        cpu,
        neighbour_cpu: other,
        rounds: cfg.rounds,
        runs_per_round: cfg.runs,
        cache,
        io,
        notes,
    })
}
