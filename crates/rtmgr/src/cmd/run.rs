//! `rtmgr run`. Placeholder.
use super::Outcome;
#[derive(clap::Args)]
pub struct RunArgs {}
pub fn run(_a: RunArgs) -> anyhow::Result<Outcome> {
    Ok(Outcome::Ok)
}
