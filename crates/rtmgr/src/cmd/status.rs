//! `rtmgr status [--json]`: is this machine fit for real time? Each item with
//! a verdict and why it matters (McKenney §2.1; ARTiS §2.1). Read-only.

use super::{host, Outcome};
use rtmgr_linux::journal::DEFAULT_JOURNAL;
use rtmgr_linux::status::{self, Verdict};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct StatusArgs {
    /// Machine-readable output (schema rtmgr.status/1).
    #[arg(long)]
    pub json: bool,
    /// List every IRQ and the pinned kernel threads of each CPU.
    #[arg(long, short)]
    pub verbose: bool,
    #[arg(long, default_value = DEFAULT_JOURNAL, value_name = "PATH")]
    pub journal: PathBuf,
}

pub fn run(a: StatusArgs) -> anyhow::Result<Outcome> {
    let r = status::collect(&host()?, &a.journal);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
        return Ok(Outcome::Ok);
    }
    for i in &r.items {
        let tag = match i.verdict {
            Verdict::Ok => "ok  ",
            Verdict::Warn => "WARN",
        };
        println!("{tag} {:<17} {}", i.name, i.value);
        if i.verdict == Verdict::Warn && !i.why.is_empty() {
            println!("     {:<17} ↳ {}", "", i.why);
        }
    }
    if a.verbose {
        println!("\nIRQ   affinity  effective  movable                      count  name");
        for q in &r.irqs {
            println!(
                "{:<5} {:<9} {:<10} {:<28} {:>6}  {}",
                q.irq,
                q.affinity,
                q.effective.clone().unwrap_or_else(|| "-".into()),
                q.movable,
                q.total,
                q.name
            );
        }
        println!("\npinned per-CPU kernel threads:");
        for (cpu, names) in &r.pinned_kthreads {
            println!("  cpu{cpu}: {}", names.join(" "));
        }
    } else {
        println!("(--verbose lists every IRQ and pinned kernel thread; --json for scripts)");
    }
    Ok(Outcome::Ok)
}
