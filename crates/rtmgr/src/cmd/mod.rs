//! Subcommands and what they share: logging set-up, and the mapping of errors
//! to exit codes (2 = bad input, nothing changed; 1 = failure while running).

pub mod ablate;
pub mod admit;
pub mod advise;
pub mod balance;
pub mod budget;
pub mod evaluate;
pub mod flags;
pub mod lb;
pub mod load_worker;
pub mod manuals;
pub mod measure;
pub mod output;
pub mod partition;
pub mod progress;
pub mod reserve;
pub mod run;
pub mod serve;
pub mod status;
pub mod top;

use std::process::ExitCode;

pub use rtmgr_linux::machine_access::{host_from_env as host, machine_lock, require_root};

/// An error caused by the user's input, detected before anything changed: exit 2.
#[derive(Debug)]
pub struct BadInput(pub String);

impl std::fmt::Display for BadInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for BadInput {}

/// Shorthand: return a bad-input error.
pub fn bad_input<T>(msg: impl Into<String>) -> anyhow::Result<T> {
    Err(BadInput(msg.into()).into())
}

/// How a subcommand ended; `Code(n)` forwards a child's exit status.
pub enum Outcome {
    Ok,
    Code(u8),
}

/// Log to stderr at `RTMGR_LOG` (`warn` when unset or unreadable): a level
/// (`info`), targets at levels (`rtmgr_linux::daemon=debug`), or both,
/// comma-separated (tracing-subscriber's `Targets`).
pub fn init_logging() {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = std::env::var("RTMGR_LOG")
        .ok()
        .and_then(|s| s.parse::<tracing_subscriber::filter::Targets>().ok())
        .unwrap_or_else(|| {
            tracing_subscriber::filter::Targets::new().with_default(tracing::Level::WARN)
        });
    // The fmt builder's own default keeps only INFO and above: let the
    // targets above decide (`rtmgr_linux=debug` would show nothing more).
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(std::io::stderr)
        .without_time()
        .finish()
        .with(filter)
        .try_init();
}

pub fn finish(result: anyhow::Result<Outcome>) -> ExitCode {
    match result {
        Ok(Outcome::Ok) => ExitCode::SUCCESS,
        Ok(Outcome::Code(c)) => ExitCode::from(c),
        Err(e) => {
            if let Some(bad) = e.downcast_ref::<BadInput>() {
                eprintln!("rtmgr: error: {bad}");
                ExitCode::from(2)
            } else if is_engine_input(&e) {
                eprintln!("rtmgr: error: {e:#}");
                ExitCode::from(2)
            } else {
                eprintln!("rtmgr: error: {e:#}");
                ExitCode::from(1)
            }
        }
    }
}

/// An engine's bad-input error (nothing was changed), under any context.
fn is_engine_input(e: &anyhow::Error) -> bool {
    e.downcast_ref::<rtmgr_lab::experiment::Error>()
        .is_some_and(|x| x.is_input())
        || e.downcast_ref::<rtmgr_linux::machine_access::AccessError>()
            .is_some_and(|x| x.is_input())
}
