//! Manuals generated from the clap definitions, so they never drift from the
//! flags: `rtmgr completions SHELL` prints a shell's completion script, and the
//! hidden `rtmgr __gen-man DIR` writes one man page per subcommand (packaging;
//! only in a build with the cargo feature `manuals`, which scripts/package.sh uses).

use super::{bad_input, Outcome};
use std::path::PathBuf;

/// The hidden subcommand that writes the man pages (`scripts/package.sh`).
pub const GEN_MAN_COMMAND: &str = "__gen-man";

#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for; the script goes to standard output.
    #[arg(value_enum)]
    shell: clap_complete::Shell,
}

#[derive(clap::Args)]
pub struct GenManArgs {
    /// An existing directory to write `rtmgr.1` and `rtmgr-SUBCOMMAND.1` into.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
}

/// Print the completion script of `a.shell` for the command tree `cli`.
pub fn completions(a: CompletionsArgs, cli: clap::Command) -> anyhow::Result<Outcome> {
    let mut visible = without_hidden_subcommands(&cli);
    let name = env!("CARGO_BIN_NAME");
    clap_complete::generate(a.shell, &mut visible, name, &mut std::io::stdout());
    Ok(Outcome::Ok)
}

/// `cli` without its hidden (internal) subcommands, which clap_complete would
/// otherwise offer; clap has no way to remove a subcommand, so this rebuilds the top.
fn without_hidden_subcommands(cli: &clap::Command) -> clap::Command {
    let visible = cli.get_subcommands().filter(|s| !s.is_hide_set()).cloned();
    clap::Command::new(env!("CARGO_BIN_NAME"))
        .version(env!("CARGO_PKG_VERSION"))
        .subcommands(visible)
}

/// Write a man page for `cli` and each of its visible subcommands, at any depth, into `a.dir`.
pub fn gen_man(a: GenManArgs, cli: clap::Command) -> anyhow::Result<Outcome> {
    if !a.dir.is_dir() {
        return bad_input(format!("{}: not a directory", a.dir.display()));
    }
    #[cfg(feature = "manuals")]
    {
        clap_mangen::generate_to(cli, &a.dir)?;
        Ok(Outcome::Ok)
    }
    #[cfg(not(feature = "manuals"))]
    {
        let _ = cli;
        bad_input(format!(
            "{GEN_MAN_COMMAND} needs the cargo feature `manuals`, and this rtmgr was built without it; \
             rebuild with `cargo build --release -p rtmgr --features manuals` (scripts/package.sh uses `--features full`)"
        ))
    }
}
