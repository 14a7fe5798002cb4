//! How an experiment engine fails: either the user's input was wrong and
//! nothing was changed (the CLI's exit code 2), or something failed while it
//! ran (exit code 1), with what it was doing in front of the cause.

use crate::measure::MeasureError;
use rtmgr_linux::balance::BalanceError;
use rtmgr_linux::machine_access::AccessError;
use rtmgr_linux::partition::PartitionError;
use rtmgr_linux::HostError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input, found before anything changed.
    #[error("{0}")]
    Input(String),
    /// A failure while running, with the step it happened in. The cause is
    /// part of the message (not a `source`), so it is printed once.
    #[error("{context}: {cause}")]
    Context { context: String, cause: Box<Error> },
    #[error(transparent)]
    Measure(MeasureError),
    #[error(transparent)]
    Partition(#[from] PartitionError),
    #[error(transparent)]
    Host(#[from] HostError),
    #[error(transparent)]
    Balance(#[from] BalanceError),
    #[error("{what}: {cause}")]
    Io { what: String, cause: std::io::Error },
    #[error("{0}")]
    Failed(String),
}

impl Error {
    /// Was this the user's input (nothing changed)? Looks through contexts.
    pub fn is_input(&self) -> bool {
        match self {
            Error::Input(_) => true,
            Error::Context { cause, .. } => cause.is_input(),
            _ => false,
        }
    }

    pub fn io(what: impl Into<String>, cause: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            cause,
        }
    }

    /// Put what was being done in front of this error.
    pub fn context(self, context: impl Into<String>) -> Self {
        Error::Context {
            context: context.into(),
            cause: Box::new(self),
        }
    }
}

/// Not root (or a fake tree asked of a build without one) is bad input; a
/// lock file that fails failed while running.
impl From<AccessError> for Error {
    fn from(e: AccessError) -> Self {
        match e {
            AccessError::Input(msg) => Error::Input(msg),
            AccessError::Lock { what, cause } => Error::Io { what, cause },
        }
    }
}

/// A missing tool is bad input (nothing was changed yet); the rest failed while running.
impl From<MeasureError> for Error {
    fn from(e: MeasureError) -> Self {
        match e {
            MeasureError::MissingTool(..) => Error::Input(e.to_string()),
            e => Error::Measure(e),
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// Shorthand: return a bad-input error.
pub fn bad_input<T>(msg: impl Into<String>) -> Result<T> {
    Err(Error::Input(msg.into()))
}

/// `.context(…)` on any result whose error converts into an engine error.
pub trait Context<T> {
    fn context(self, context: impl Into<String>) -> Result<T>;
    fn with_context<S: Into<String>>(self, f: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: Into<Error>> Context<T> for std::result::Result<T, E> {
    fn context(self, context: impl Into<String>) -> Result<T> {
        self.map_err(|e| e.into().context(context))
    }
    fn with_context<S: Into<String>>(self, f: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| e.into().context(f()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn input_survives_context_and_messages_chain_once() {
        let e = Error::Input("--rounds must be at least 1".into()).context("evaluate");
        assert!(e.is_input());
        assert_eq!(e.to_string(), "evaluate: --rounds must be at least 1");
        let missing: Error = MeasureError::MissingTool("stress-ng", "stress-ng").into();
        assert!(missing.is_input());
        let setup: Error = MeasureError::Setup("no".into()).into();
        assert!(!setup.is_input());
        let r: std::result::Result<(), MeasureError> = Err(MeasureError::Setup("x".into()));
        assert_eq!(
            r.context("round 1 stock").unwrap_err().to_string(),
            "round 1 stock: x"
        );
    }
}
