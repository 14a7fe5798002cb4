//! `rtmgr partition apply|reset|show`: split the machine into RT and NRT CPUs
//! (ARTiS §2.1, §2.4; DROPS §4.1: configured by a file) and give it back
//! exactly. Everything the user gave is validated before anything changes;
//! each bad input is one error line and exit code 2.

use super::{bad_input, host, machine_lock, require_root, Outcome};
use anyhow::Context;
use rtmgr_core::partition::placement::RtChoice;
use rtmgr_core::partition::{
    boot, check_irqs, tuned, validate, ApplyReport, IrqbalanceMode, PartitionConfig, PartitionPlan,
    PreemptMode, RtCpusArg,
};
use rtmgr_linux::journal::DEFAULT_JOURNAL;
use rtmgr_linux::partition::{self, ApplyOptions, PartitionError};
use rtmgr_linux::unmovable::{self, ChoiceError};
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
    /// Write the applied partition (or the one --rt-cpus/--config describe) as
    /// another tool's configuration: `--tuned DIR`, a tuned profile.
    Export(ExportArgs),
}

#[derive(clap::Args)]
pub struct ExportArgs {
    /// Write a tuned profile directory (tuned.conf including cpu-partitioning,
    /// cpu-partitioning-variables.conf, cmdline) for isolation that survives reboots.
    #[arg(long, value_name = "DIR", required = true)]
    pub tuned: PathBuf,
    /// Export this partition instead of the applied one (as for `apply`).
    #[arg(long, value_name = "LIST|auto[:N]")]
    pub rt_cpus: Option<String>,
    /// A TOML partition description instead of the applied partition.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub journal: JournalArgs,
}

#[derive(clap::Args)]
pub struct ApplyArgs {
    /// RT CPUs in the kernel's list syntax, e.g. `1` or `2-3,6` (overrides the
    /// config file), or `auto[:N]`: the N CPUs (default 1) with the least
    /// unmovable work — kernel-managed interrupts by rate, per-CPU kernel
    /// threads, CPU 0's housekeeping — said with the reason.
    #[arg(long, value_name = "LIST|auto[:N]")]
    pub rt_cpus: Option<String>,
    /// A TOML partition description (see docs/partition.md).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Reset an applied partition first instead of refusing.
    #[arg(long)]
    pub replace: bool,
    /// Set this PREEMPT_DYNAMIC model for the partition's lifetime (where the
    /// kernel lets debugfs `sched/preempt` be written; else said once and skipped).
    #[arg(long, value_name = "full|lazy")]
    pub preempt: Option<String>,
    /// Beside a running irqbalance: `refuse` (the default) or `ban` the RT CPUs
    /// through irqbalance's socket for the partition's lifetime.
    #[arg(long, value_name = "refuse|ban")]
    pub irqbalance: Option<String>,
    /// Set cgroup2's `favordynmods` mount option for the partition's lifetime:
    /// moving a thread into a cpuset stops waiting for an RCU grace period
    /// after an idle spell (slower fork and exit; see `--explain`).
    #[arg(long)]
    pub favordynmods: bool,
    /// Print what each knob is for and what it would do here, and change nothing.
    #[arg(long)]
    pub explain: bool,
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
        PartitionCmd::Export(a) => export(&host, a),
    }
}

/// Validate the user's request into a plan without touching the machine;
/// with `--rt-cpus auto[:N]`, also how the RT CPUs were chosen.
pub fn plan_from_args(
    host: &Host,
    rt_cpus: Option<&str>,
    config: Option<&PathBuf>,
    preempt: Option<&str>,
) -> anyhow::Result<(PartitionPlan, Option<RtChoice>)> {
    let rt = match rt_cpus.map(RtCpusArg::parse) {
        Some(Ok(arg)) => Some(arg),
        Some(Err(e)) => return bad_input(format!("--rt-cpus: {e}")),
        None => None,
    };
    let preempt = match preempt.map(str::parse::<PreemptMode>) {
        Some(Ok(m)) => Some(m),
        Some(Err(e)) => return bad_input(format!("--preempt: {e}")),
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
    let cfg = PartitionConfig {
        preempt: preempt.or(cfg.preempt),
        ..cfg
    };
    let online = cpus::online(host).context("reading online CPUs")?;
    let (rt, choice) = match rt {
        Some(RtCpusArg::Auto(n)) => {
            match unmovable::choose_rt_cpus(host, n, unmovable::SAMPLE_WINDOW) {
                Ok(c) => (Some(c.rt.clone()), Some(c)),
                Err(ChoiceError::Input(e)) => return bad_input(e.to_string()),
                Err(e) => return Err(e).context("choosing the RT CPUs"),
            }
        }
        Some(RtCpusArg::List(set)) => (Some(set), None),
        None => (None, None),
    };
    let plan = match validate(&cfg, rt.as_ref(), &online) {
        Ok(p) => p,
        Err(e) => return bad_input(e.to_string()),
    };
    if plan.irq_rt.is_empty() && plan.irq_leave.is_empty() {
        return Ok((plan, choice));
    }
    let irqs = irq::numbers(host).context("listing /proc/irq")?;
    match check_irqs(&plan, &irqs) {
        Ok(()) => Ok((plan, choice)),
        Err(e) => bad_input(e.to_string()),
    }
}

fn apply(host: &Host, a: ApplyArgs) -> anyhow::Result<Outcome> {
    let (mut plan, choice) = plan_from_args(
        host,
        a.rt_cpus.as_deref(),
        a.config.as_ref(),
        a.preempt.as_deref(),
    )?;
    if a.favordynmods {
        if !plan.enabled(rtmgr_core::partition::KnobId::Favordynmods) {
            return bad_input(
                "--favordynmods needs the \"favordynmods\" knob, which the config's knobs list leaves out",
            );
        }
        plan.favordynmods = true;
    }
    match a.irqbalance.as_deref().map(str::parse::<IrqbalanceMode>) {
        Some(Ok(mode)) => plan.irqbalance = mode,
        Some(Err(e)) => return bad_input(format!("--irqbalance: {e}")),
        None => {}
    }
    if let (Some(c), false) = (&choice, a.journal.json) {
        println!("RT CPUs chosen: {} — {}", c.rt, c.reason);
        if !host.privileged() {
            println!(
                "(not root: kernel-managed interrupts cannot be told apart and were not counted)"
            );
        }
    }
    if a.explain {
        let knobs = partition::explain(host, &plan);
        if a.journal.json {
            println!("{}", serde_json::to_string_pretty(&knobs)?);
        } else {
            print_explain(&plan, &knobs);
        }
        return Ok(Outcome::Ok);
    }
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
            | PartitionError::CgroupExists(_)
            | PartitionError::Irqbalance(_)),
        ) => return bad_input(e.to_string()),
        Err(e) => return Err(e).context("apply failed; everything done so far was rolled back"),
    };
    let report = ApplyReport {
        rt_choice: choice,
        ..report
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
    for k in &r.knobs {
        print_knob_lines(&k.knob.to_string(), k.available, &k.lines);
    }
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
    print_what_stays(plan, r);
    println!("undo with: rtmgr partition reset");
}

/// The unmovable interrupts on the RT CPUs and the boot line that would
/// finish the isolation.
fn print_what_stays(plan: &PartitionPlan, r: &ApplyReport) {
    let mut hits: Vec<_> = r.unmovable_irqs.iter().filter(|h| h.per_s > 0.0).collect();
    hits.sort_by(|a, b| b.per_s.total_cmp(&a.per_s));
    if !hits.is_empty() {
        println!("  still on the RT CPUs (user space cannot move them):");
    }
    for h in hits {
        println!(
            "    CPU {}: {} — {:.0}/s, {} since boot; boot option: {}",
            h.cpu,
            h.label(),
            h.per_s,
            h.since_boot,
            h.boot_option(&plan.rt)
        );
    }
    let missing: Vec<&boot::BootOption> = r.boot.iter().filter(|o| !o.present).collect();
    if !missing.is_empty() {
        println!(
            "  to finish the isolation at the next boot, add to the kernel command line:\n    {}",
            boot::cmdline(&r.boot)
        );
        for o in missing {
            println!("    {} — {}", o.option, o.adds);
        }
    }
}

/// At most six lines of a knob, then how many more.
fn print_knob_lines(name: &str, available: bool, lines: &[String]) {
    let more = lines.len().saturating_sub(6);
    for (i, l) in lines.iter().take(6).enumerate() {
        let head = if i == 0 { name } else { "" };
        let tag = if available { "" } else { "not available: " };
        println!("  {head:<16} {tag}{l}");
    }
    if lines.is_empty() {
        println!("  {name:<16} nothing to do");
    }
    if more > 0 {
        println!("  {:<16} … and {more} more (--json lists them all)", "");
    }
}

fn print_explain(plan: &PartitionPlan, knobs: &[partition::KnobExplained]) {
    println!(
        "partition RT CPUs {} / NRT CPUs {}: each knob, what it is for and what it would do here (nothing changed)\n",
        plan.rt, plan.nrt
    );
    for k in knobs {
        println!(
            "{}{}",
            k.knob,
            if k.enabled {
                ""
            } else {
                "  [off in this config]"
            }
        );
        for l in textwrap(k.explain, 88) {
            println!("    {l}");
        }
        print_knob_lines("  here:", k.here.available, &k.here.lines);
        println!();
    }
}

/// Wrap a paragraph at `width` columns on spaces.
fn textwrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut cur = String::new();
    for w in text.split_whitespace() {
        if !cur.is_empty() && cur.chars().count() + 1 + w.chars().count() > width {
            lines.push(std::mem::take(&mut cur));
        }
        if !cur.is_empty() {
            cur.push(' ');
        }
        cur.push_str(w);
    }
    if !cur.is_empty() {
        lines.push(cur);
    }
    lines
}

fn reset(host: &Host, a: JournalArgs) -> anyhow::Result<Outcome> {
    require_root(host, "rtmgr partition reset")?;
    let _lock = machine_lock(host)?;
    // A daemon killed with -9 leaves grants: revoke them (grants journal) first.
    let (revoked, r) = rtmgr_linux::daemon::reset_machine(host, &a.journal)?;
    if revoked > 0 && !a.json {
        println!("revoked {revoked} grant(s) left by rtmgr serve");
    }
    // Tracer instances of an rtmgr killed before it could remove them.
    if let Some(said) = rtmgr_linux::trace::remove_stale_instances_said() {
        eprintln!("rtmgr: {said}");
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else if !r.had_partition && revoked == 0 {
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

fn export(host: &Host, a: ExportArgs) -> anyhow::Result<Outcome> {
    let plan = if a.rt_cpus.is_some() || a.config.is_some() {
        plan_from_args(host, a.rt_cpus.as_deref(), a.config.as_ref(), None)?.0
    } else {
        match partition::current(host, &a.journal.journal)? {
            Some(c) => c.plan,
            None => {
                return bad_input(format!(
                    "no partition applied ({} absent): apply one, or say which with --rt-cpus or --config",
                    a.journal.journal.display()
                ))
            }
        }
    };
    let files = tuned::profile(&plan);
    std::fs::create_dir_all(&a.tuned).with_context(|| format!("mkdir {}", a.tuned.display()))?;
    for f in &files {
        let path = a.tuned.join(f.name);
        std::fs::write(&path, &f.text).with_context(|| format!("write {}", path.display()))?;
    }
    if a.journal.json {
        let names: Vec<&str> = files.iter().map(|f| f.name).collect();
        let v = serde_json::json!({
            "dir": a.tuned, "files": names, "rt_cpus": plan.rt, "nrt_cpus": plan.nrt,
            "cmdline": tuned::implied_cmdline(&plan),
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(Outcome::Ok);
    }
    let name = a
        .tuned
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "rtmgr".into());
    println!(
        "tuned profile for RT CPUs {} / NRT CPUs {} written to {}: {}",
        plan.rt,
        plan.nrt,
        a.tuned.display(),
        files.iter().map(|f| f.name).collect::<Vec<_>>().join(", ")
    );
    println!(
        "install: cp -r {} /etc/tuned/profiles/{name} (tuned < 2.23: /etc/tuned/{name}); tuned-adm profile {name}",
        a.tuned.display()
    );
    println!(
        "kernel command line at the next boot:\n  {}",
        tuned::implied_cmdline(&plan)
    );
    Ok(Outcome::Ok)
}
