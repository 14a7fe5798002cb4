//! `rtmgr measure resources` (DROPS §4.4–5): flags into the engine's config,
//! the table, the JSON report. The engine is
//! `rtmgr_lab::resources::run`.

use crate::cmd::output::{write_report, OutArgs};
use crate::cmd::Outcome;
use anyhow::Result;
use rtmgr_lab::experiment::{Quiet, Session};
use rtmgr_lab::resources::run::{check, run, ResourcesConfig};
use rtmgr_lab::resources::text;
use rtmgr_linux::machine_access::host_from_env;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ResourcesArgs {
    /// The RT CPU (default: the partition's last RT CPU, else the last online CPU).
    #[arg(long)]
    pub cpu: Option<u32>,
    /// Interleaved rounds; each runs every condition once.
    #[arg(long, default_value_t = 4)]
    pub rounds: u32,
    /// Runs of the RT routine per condition per round.
    #[arg(long, default_value_t = 200)]
    pub runs: u64,
    /// Matrix size n (n×n doubles; default: three matrices fill half the largest cache).
    #[arg(long = "matrix")]
    pub matrix_n: Option<u32>,
    /// Directory for the I/O part's files (on a disk, not tmpfs).
    #[arg(long, default_value = "/var/tmp")]
    pub dir: PathBuf,
    /// Only the cache part.
    #[arg(long, conflicts_with = "io_only")]
    pub cache_only: bool,
    /// Only the I/O part.
    #[arg(long)]
    pub io_only: bool,
    #[command(flatten)]
    pub out: OutArgs,
}

pub fn resources_cmd(a: ResourcesArgs) -> Result<Outcome> {
    let cfg = ResourcesConfig {
        cpu: a.cpu,
        rounds: a.rounds,
        runs: a.runs,
        matrix_n: a.matrix_n,
        dir: a.dir.clone(),
        cache: !a.io_only,
        io: !a.cache_only,
    };
    check(&cfg)?;
    let s = Session::open(host_from_env()?, "rtmgr measure resources")?;
    let report = run(&s, &cfg, &mut Quiet)?;
    println!("{}", text(&report));
    write_report(&a.out, "resources", &report, &[])?;
    Ok(if s.partial().is_some() {
        Outcome::Code(130)
    } else {
        Outcome::Ok
    })
}
