//! What every command that changes the machine takes first: the machine to work
//! on (real, or a fake tree for tests), the root check, and the machine-wide lock
//! (DROPS §4.1: one manager owns the resources; docs/architecture.md "Rules of the design").

use crate::lock::{MachineLock, DEFAULT_LOCK_PATH};
use crate::Host;
use std::path::Path;

/// Why the machine could not be taken: bad input (nothing changed), or the
/// lock file failed.
#[derive(Debug, thiserror::Error)]
pub enum AccessError {
    /// Not root, or RTMGR_SYSROOT in a build without the fake machine.
    #[error("{0}")]
    Input(String),
    /// The lock file could not be opened or locked. The cause is part of the
    /// message (not a `source`), so it is printed once.
    #[error("{what}: {cause}")]
    Lock { what: String, cause: std::io::Error },
}

impl AccessError {
    /// Was this the user's input (nothing changed)?
    pub fn is_input(&self) -> bool {
        matches!(self, AccessError::Input(_))
    }
}

/// The machine to work on: the real one, or (tests, feature `fake`) a fake
/// tree named by RTMGR_SYSROOT (see `Host::from_env`).
pub fn host_from_env() -> Result<Host, AccessError> {
    Host::from_env().map_err(AccessError::Input)
}

/// Refuse to change the machine unless root (checked before anything changes).
pub fn require_root(host: &Host, what: &str) -> Result<(), AccessError> {
    if !host.privileged() {
        return Err(AccessError::Input(format!(
            "{what} needs root (CAP_SYS_ADMIN and CAP_SYS_NICE): run it with sudo"
        )));
    }
    Ok(())
}

/// Take the machine-wide lock so no other rtmgr changes the machine meanwhile.
/// A test (or script) that already holds the lock and runs rtmgr under it sets
/// RTMGR_LOCK_HELD=1; then no lock is taken (it would wait for its own parent).
pub fn machine_lock(host: &Host) -> Result<Option<MachineLock>, AccessError> {
    if std::env::var_os("RTMGR_LOCK_HELD").is_some() {
        return Ok(None);
    }
    let path = host.path(DEFAULT_LOCK_PATH);
    let failed = |cause| AccessError::Lock {
        what: format!("take the machine lock {DEFAULT_LOCK_PATH}"),
        cause,
    };
    if let Some(l) = MachineLock::try_acquire(&path).map_err(failed)? {
        return Ok(Some(l));
    }
    eprintln!(
        "rtmgr: waiting for another rtmgr to release {}",
        Path::new(DEFAULT_LOCK_PATH).display()
    );
    Ok(Some(MachineLock::acquire(&path).map_err(failed)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fake_tree_is_privileged_and_errors_say_what_they_are() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        assert!(require_root(&host, "rtmgr x").is_ok());
        let refused = AccessError::Input("rtmgr x needs root".into());
        assert!(refused.is_input());
        let lock = AccessError::Lock {
            what: "take the machine lock /run/lock/rtmgr.lock".into(),
            cause: std::io::Error::from_raw_os_error(libc::EACCES),
        };
        assert!(!lock.is_input());
        assert!(lock
            .to_string()
            .starts_with("take the machine lock /run/lock/rtmgr.lock: "));
    }

    #[test]
    fn the_lock_of_a_fake_tree_lives_in_the_tree() {
        if std::env::var_os("RTMGR_LOCK_HELD").is_some() {
            return; // no lock is taken under a holder
        }
        let dir = tempfile::tempdir().unwrap();
        let held = machine_lock(&Host::fake(dir.path())).unwrap();
        assert!(held.is_some());
        assert!(dir.path().join("run/lock/rtmgr.lock").exists());
    }
}
