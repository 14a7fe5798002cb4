//! `rtmgr admit FILE`: offline admission of a task set (rtmgr TOML or rt-app
//! JSON) against the RT CPUs, granting nothing (ARTiS §4: EDF or RM per RT
//! CPU; McKenney §5 rule 2: the cap). Measured WCETs come from `rtmgr measure
//! exec --json` reports named in the set. Exit 0 when every task fits, 1 when
//! some do not.

use super::{bad_input, host, Outcome};
use rtmgr_core::admission::taskset;
use rtmgr_core::admission::{admit_set, AdmissionConfig, Placement, DEFAULT_CAP};
use rtmgr_core::CpuSet;
use rtmgr_lab::report::wcet_from_report;
use rtmgr_linux::daemon::ServeConfig;
use rtmgr_linux::journal::DEFAULT_JOURNAL;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct AdmitArgs {
    /// The task set: rtmgr TOML ([[task]] …) or rt-app JSON.
    pub file: PathBuf,
    /// RT CPUs (default: the set's rt_cpus, else the daemon config's, else the applied partition's).
    #[arg(long, value_name = "LIST")]
    pub rt_cpus: Option<String>,
    /// A daemon config (`rtmgr serve --config`) for its RT CPUs, cap and placement.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Utilisation cap per RT CPU.
    #[arg(long)]
    pub cap: Option<f64>,
    /// first-fit or worst-fit (decreasing utilisation).
    #[arg(long)]
    pub placement: Option<Placement>,
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: AdmitArgs) -> anyhow::Result<Outcome> {
    let text = match std::fs::read_to_string(&a.file) {
        Ok(t) => t,
        Err(e) => return bad_input(format!("{}: {e}", a.file.display())),
    };
    let base = a.file.parent().unwrap_or(Path::new(".")).to_path_buf();
    let wcet = |p: &str| {
        let path = base.join(p);
        let t = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        wcet_from_report(&t).map_err(|e| format!("{}: {e}", path.display()))
    };
    let set = match taskset::parse(&text, &wcet) {
        Ok(s) => s,
        Err(e) => return bad_input(format!("{}: {e}", a.file.display())),
    };
    let daemon = match &a.config {
        Some(p) => match std::fs::read_to_string(p)
            .map_err(|e| e.to_string())
            .and_then(|t| ServeConfig::from_toml(&t))
        {
            Ok(c) => Some(c),
            Err(e) => return bad_input(format!("{}: {e}", p.display())),
        },
        None => None,
    };
    let host = host()?;
    let rt = match &a.rt_cpus {
        Some(l) => match CpuSet::parse_list(l) {
            Ok(s) => Some(s),
            Err(e) => return bad_input(format!("--rt-cpus: {e}")),
        },
        None => None,
    }
    .or(set.rt_cpus.clone())
    .or_else(|| daemon.as_ref().and_then(|d| d.partition.rt_cpus.clone()))
    .or_else(|| {
        rtmgr_linux::partition::current(&host, Path::new(DEFAULT_JOURNAL))
            .ok()
            .flatten()
            .map(|p| p.plan.rt)
    });
    let Some(rt) = rt.filter(|r| !r.is_empty()) else {
        return bad_input(
            "no RT CPUs: pass --rt-cpus, name rt_cpus in the set or --config, or apply a partition",
        );
    };
    let read = |p: &str| {
        host.read_opt(p)
            .and_then(|s| s.trim().parse::<i64>().ok())
            .unwrap_or(-1)
    };
    let cfg = AdmissionConfig {
        cap: a
            .cap
            .or(daemon.as_ref().map(|d| d.admission.cap))
            .unwrap_or(DEFAULT_CAP),
        dl_share: AdmissionConfig::dl_share_from(
            read("/proc/sys/kernel/sched_rt_runtime_us"),
            read("/proc/sys/kernel/sched_rt_period_us"),
        ),
        placement: a
            .placement
            .or(daemon.as_ref().map(|d| d.admission.placement))
            .unwrap_or_default(),
    };
    if !(cfg.cap > 0.0 && cfg.cap <= 1.0) {
        return bad_input(format!("--cap {} must be within (0, 1]", cfg.cap));
    }
    let (v, _) = admit_set(cfg, &rt, &set.tasks);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{} task(s) on RT CPUs {rt}, cap {:.2}, SCHED_DEADLINE share {:.2}, {:?}:",
            set.tasks.len(),
            cfg.cap,
            cfg.dl_share,
            cfg.placement
        );
        for (name, cpu) in &v.placed {
            println!("  ok       {name:<20} CPU {cpu}");
        }
        for (name, why) in &v.refused {
            println!("  REFUSED  {name:<20} {why}");
        }
        for (cpu, u, dl) in &v.cpus {
            println!("  CPU {cpu}: U {u:.3} (SCHED_DEADLINE {dl:.3})");
        }
        for n in &set.notes {
            println!("  note: {n}");
        }
    }
    Ok(if v.all_admitted() {
        Outcome::Ok
    } else {
        Outcome::Code(1)
    })
}
