//! `rtmgr measure …` (issue #3): latency, exec, periodicity. Placeholder until #3 lands.
use super::Outcome;

#[derive(clap::Subcommand)]
pub enum MeasureCmd {}

pub fn run(cmd: MeasureCmd) -> anyhow::Result<Outcome> {
    match cmd {}
}
