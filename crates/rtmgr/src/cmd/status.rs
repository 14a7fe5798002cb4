//! `rtmgr status`. Placeholder.
use super::Outcome;
#[derive(clap::Args)]
pub struct StatusArgs {}
pub fn run(_a: StatusArgs) -> anyhow::Result<Outcome> {
    Ok(Outcome::Ok)
}
