//! `rtmgr __load …` (hidden): one built-in load process, started by rtmgr
//! itself when the loads run without stress-ng (ARTiS §3.1 loads; the body is
//! `rtmgr_lab::measure::builtin::main`).

use super::Outcome;

#[derive(clap::Args)]
pub struct LoadWorkerArgs {
    /// The load's arguments, as `rtmgr_lab::measure::builtin::WorkerArgs` writes them.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<String>,
}

pub fn run(a: LoadWorkerArgs) -> anyhow::Result<Outcome> {
    rtmgr_lab::measure::builtin::main(&a.args).map_err(anyhow::Error::msg)?;
    Ok(Outcome::Ok)
}
