//! Subcommands and what they share: logging set-up, and the mapping of errors
//! to exit codes (2 = bad input, nothing changed; 1 = failure while running).

pub mod balance;
pub mod budget;
pub mod evaluate;
pub mod lb;
pub mod measure;
pub mod partition;
pub mod run;
pub mod status;

use rtmgr_linux::lock::{MachineLock, DEFAULT_LOCK_PATH};
use rtmgr_linux::Host;
use std::path::Path;
use std::process::ExitCode;

/// The machine to work on: the real one, or a fake tree named by
/// RTMGR_SYSROOT (tests only; then root is not required).
pub fn host() -> Host {
    match std::env::var_os("RTMGR_SYSROOT") {
        Some(root) => Host::fake(root),
        None => Host::real(),
    }
}

/// Refuse to change the machine unless root (checked before anything changes).
pub fn require_root(host: &Host, what: &str) -> anyhow::Result<()> {
    if !host.is_fake() && !rtmgr_linux::sched::is_root() {
        return bad_input(format!(
            "{what} needs root (CAP_SYS_ADMIN and CAP_SYS_NICE): run it with sudo"
        ));
    }
    Ok(())
}

/// Take the machine-wide lock so no other rtmgr changes the machine meanwhile.
/// A test (or script) that already holds the lock and runs rtmgr under it sets
/// RTMGR_LOCK_HELD=1; then no lock is taken (it would wait for its own parent).
pub fn machine_lock(host: &Host) -> anyhow::Result<Option<MachineLock>> {
    if std::env::var_os("RTMGR_LOCK_HELD").is_some() {
        return Ok(None);
    }
    let path = host.path(DEFAULT_LOCK_PATH);
    if let Some(l) = MachineLock::try_acquire(&path)? {
        return Ok(Some(l));
    }
    eprintln!(
        "rtmgr: waiting for another rtmgr to release {}",
        Path::new(DEFAULT_LOCK_PATH).display()
    );
    Ok(Some(MachineLock::acquire(&path)?))
}

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

pub fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RTMGR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .without_time()
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
            } else {
                eprintln!("rtmgr: error: {e:#}");
                ExitCode::from(1)
            }
        }
    }
}
