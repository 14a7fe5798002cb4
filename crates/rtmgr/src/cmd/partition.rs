//! `rtmgr partition`. Placeholder.
use super::Outcome;
#[derive(clap::Subcommand)]
pub enum PartitionCmd {}
pub fn run(c: PartitionCmd) -> anyhow::Result<Outcome> {
    match c {}
}
