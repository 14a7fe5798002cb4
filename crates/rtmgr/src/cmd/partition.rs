//! `rtmgr partition apply|reset|show`: split the machine into RT and NRT CPUs
//! (ARTiS §2.1, §2.4; DROPS §4.1: configured by a file) and give it back
//! exactly. Everything the user gave is validated before anything changes;
//! each bad input is one error line and exit code 2.

use super::{bad_input, host, machine_lock, require_root, Outcome};
use anyhow::Context;
use rtmgr_core::partition::{check_irqs, validate, ApplyReport, PartitionConfig, PartitionPlan};
use rtmgr_core::CpuSet;
use rtmgr_linux::journal::DEFAULT_JOURNAL;
use rtmgr_linux::partition::{self, ApplyOptions, PartitionError};
use rtmgr_linux::{cpus, irq, Host};
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum PartitionCmd {
    /// Create the RT and NRT cpusets, move tasks, IRQs and kernel threads to the NRT CPUs.
    Apply(ApplyArgs),
    /// Undo the partition exactly, from the journal. Does nothing when none is applied.
    Reset(JournalArgs),
    /// Show the applied partition, if any.
    Show(JournalArgs),
}

#[derive(clap::Args)]
pub struct ApplyArgs {
    /// RT CPUs in the kernel's list syntax, e.g. `1` or `2-3,6` (overrides the config file).
    #[arg(long, value_name = "LIST")]
    pub rt_cpus: Option<String>,
    /// A TOML partition description (see README, "partition").
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Reset an applied partition first instead of refusing.
    #[arg(long)]
    pub replace: bool,
    #[command(flatten)]
    pub journal: JournalArgs,
}

#[derive(clap::Args, Clone)]
pub struct JournalArgs {
    /// Where the undo journal lives.
    #[arg(long, value_name = "PATH", default_value = DEFAULT_JOURNAL)]
    pub journal: PathBuf,
    /// Machine-readable output.
    #[arg(long)]
    pub json: bool,
}

pub fn run(cmd: PartitionCmd) -> anyhow::Result<Outcome> {
    let host = host()?;
    match cmd {
        PartitionCmd::Apply(a) => apply(&host, a),
        PartitionCmd::Reset(a) => reset(&host, a),
        PartitionCmd::Show(a) => show(&host, a),
    }
}

/// Validate the user's request into a plan without touching the machine.
pub fn plan_from_args(
    host: &Host,
    rt_cpus: Option<&str>,
    config: Option<&PathBuf>,
) -> anyhow::Result<PartitionPlan> {
    let rt = match rt_cpus {
        Some(text) => match CpuSet::parse_list(text) {
            Ok(set) => Some(set),
            Err(e) => return bad_input(format!("--rt-cpus: {e}")),
        },
        None => None,
    };
    let cfg = match config {
        Some(path) => {
            let text = match std::fs::read_to_string(path) {
                Ok(t) => t,
                Err(e) => return bad_input(format!("config {}: {e}", path.display())),
            };
            match PartitionConfig::from_toml(&text) {
                Ok(c) => c,
                Err(e) => return bad_input(format!("{}: {e}", path.display())),
            }
        }
        None => PartitionConfig::default(),
    };
    let online = cpus::online(host).context("reading online CPUs")?;
    let plan = match validate(&cfg, rt.as_ref(), &online) {
        Ok(p) => p,
        Err(e) => return bad_input(e.to_string()),
    };
    if plan.irq_rt.is_empty() && plan.irq_leave.is_empty() {
        return Ok(plan);
    }
    let irqs = irq::numbers(host).context("listing /proc/irq")?;
    match check_irqs(&plan, &irqs) {
        Ok(()) => Ok(plan),
        Err(e) => bad_input(e.to_string()),
    }
}

fn apply(host: &Host, a: ApplyArgs) -> anyhow::Result<Outcome> {
    let plan = plan_from_args(host, a.rt_cpus.as_deref(), a.config.as_ref())?;
    require_root(host, "rtmgr partition apply")?;
    let opts = ApplyOptions {
        journal: a.journal.journal.clone(),
        replace: a.replace,
    };
    let _lock = machine_lock(host)?;
    if let Err(e) = partition::preflight(host, &opts) {
        return bad_input(e.to_string());
    }
    let (_, report) = match partition::apply(host, &plan, &opts) {
        Ok(r) => r,
        Err(
            e @ (PartitionError::AlreadyApplied(_)
            | PartitionError::NoCpuset
            | PartitionError::CgroupExists(_)),
        ) => return bad_input(e.to_string()),
        Err(e) => return Err(e).context("apply failed; everything done so far was rolled back"),
    };
    if a.journal.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_apply(&plan, &report);
    }
    Ok(Outcome::Ok)
}

fn print_apply(plan: &PartitionPlan, r: &ApplyReport) {
    println!("partition applied (cgroup {}):", r.layout);
    println!(
        "  RT CPUs   {}   cpuset {}{}",
        plan.rt,
        r.rt_cgroup,
        r.partition_state
            .as_ref()
            .map(|s| format!(" (partition: {s})"))
            .unwrap_or_default()
    );
    println!(
        "  NRT CPUs  {}   {}",
        plan.nrt,
        r.nrt_cgroup
            .clone()
            .unwrap_or_else(|| "every other cgroup".into())
    );
    println!(
        "  tasks moved to NRT: {}   IRQs steered: {}",
        r.tasks_moved,
        r.irqs_moved.len()
    );
    println!("  latency bound: {} µs", plan.latency_bound_us);
    for (reason, items) in &r.not_moved {
        let shown: Vec<&str> = items.iter().take(6).map(String::as_str).collect();
        let more = if items.len() > shown.len() {
            format!(", … ({} in all)", items.len())
        } else {
            String::new()
        };
        println!("  not moved — {reason}: {}{more}", shown.join(", "));
    }
    for n in &r.notes {
        println!("  note: {n}");
    }
    println!("undo with: rtmgr partition reset");
}

fn reset(host: &Host, a: JournalArgs) -> anyhow::Result<Outcome> {
    require_root(host, "rtmgr partition reset")?;
    let _lock = machine_lock(host)?;
    let r = partition::reset(host, &a.journal)?;
    // Tracer instances of an rtmgr killed before it could remove them.
    match rtmgr_linux::trace::remove_stale_instances() {
        Ok(gone) if !gone.is_empty() => {
            eprintln!(
                "rtmgr: removed tracer instances left by a killed rtmgr: {}",
                gone.join(", ")
            )
        }
        Ok(_) => {}
        Err(e) => tracing::debug!("no tracer instances checked: {e}"),
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else if !r.had_partition {
        println!(
            "no partition applied ({} absent): nothing to do",
            a.journal.display()
        );
    } else {
        println!(
            "partition reset: {} IRQ masks and {} task affinities restored, removed {}",
            r.irqs_restored,
            r.tasks_restored,
            if r.cgroups_removed.is_empty() {
                "no cgroup".into()
            } else {
                r.cgroups_removed.join(", ")
            }
        );
        for n in &r.notes {
            println!("  note: {n}");
        }
    }
    Ok(Outcome::Ok)
}

fn show(host: &Host, a: JournalArgs) -> anyhow::Result<Outcome> {
    let cur = partition::current(host, &a.journal)?;
    if a.json {
        let v = cur.map(|c| {
            serde_json::json!({
                "rt_cpus": c.plan.rt, "nrt_cpus": c.plan.nrt, "layout": c.layout.name(),
                "rt_cgroup": c.rt_cgroup, "nrt_cgroup": c.nrt_cgroup, "complete": c.complete,
                "latency_bound_us": c.plan.latency_bound_us, "report": c.report,
            })
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(Outcome::Ok);
    }
    match cur {
        None => println!("no partition applied"),
        Some(c) => {
            println!(
                "RT CPUs {}  NRT CPUs {}  cgroup {}  rt cpuset {}  latency bound {} µs{}",
                c.plan.rt,
                c.plan.nrt,
                c.layout.name(),
                c.rt_cgroup.display(),
                c.plan.latency_bound_us,
                if c.complete {
                    ""
                } else {
                    "  INCOMPLETE (apply was interrupted): run `rtmgr partition reset`"
                }
            );
        }
    }
    Ok(Outcome::Ok)
}
