//! `rtmgr evaluate` (issue #3): the main job. Placeholder until #3 lands.
use super::Outcome;

#[derive(clap::Args)]
pub struct EvaluateArgs {}

pub fn run(_args: EvaluateArgs) -> anyhow::Result<Outcome> {
    anyhow::bail!("rtmgr evaluate is not implemented yet (issue #3)")
}
