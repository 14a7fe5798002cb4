//! Reservations for an existing process (`rtmgr reserve --pid`: what `chrt -p`
//! and `tuna` do for a running PID, under admission control; DROPS §4.1, the
//! manager gives resources to tasks on request). Who may: root, and a user
//! whose `[[client]]` rule has `existing_processes`, for processes it owns by
//! the kernel's credentials of the target. A pidfd opened first holds the
//! target against PID reuse; the grant is the target's, revoked when it exits.

use super::{refused, Manager};
use crate::daemon::peer::Client;
use crate::{tasks, Host};
use rtmgr_core::protocol::{ErrorCode, RefusalKind, Response, Target, MAX_THREADS};
use rtmgr_sys::pidfd::{PeerCred, Pidfd};

impl Manager {
    /// The process a request names as the grant's client: the requester's
    /// credentials and policy, the target's pid, start time and pidfd.
    pub(super) fn target_client(&self, requester: &Client, t: Target) -> Result<Client, Response> {
        let may = requester.cred.uid == 0
            || self
                .policy
                .rule_for(&requester.peer)
                .is_some_and(|(i, _)| self.existing_processes.get(i).copied().unwrap_or(false));
        if !may {
            return Err(refused(
                RefusalKind::Policy,
                format!(
                    "{} may not reserve for an existing process: its [[client]] rule has no existing_processes = true",
                    requester.peer.label()
                ),
            ));
        }
        let pidfd = match Pidfd::open(t.pid) {
            Ok(p) => Some(p),
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => return Err(no_process(t.pid)),
            // A kernel without pidfd_open: pid and start time only.
            Err(_) => None,
        };
        identify_target(&self.host, requester, t.pid, pidfd)
    }
}

fn no_process(pid: u32) -> Response {
    Response::error(ErrorCode::NotFound, format!("no process {pid}"))
}

/// The target `pid`, owned by the requester (or the requester is root), as
/// the process `pidfd` was opened on: what /proc says is that process's only
/// if it has not exited since, else its id may name another process now.
pub(in crate::daemon) fn identify_target(
    host: &Host,
    requester: &Client,
    pid: u32,
    pidfd: Option<Pidfd>,
) -> Result<Client, Response> {
    let status = host.read_opt(format!("/proc/{pid}/status"));
    let info = tasks::info(host, pid, pid);
    if pidfd.as_ref().is_some_and(|p| p.exited()) {
        return Err(Response::error(
            ErrorCode::Gone,
            format!("process {pid} exited after the request named it (its id may name another process now); nothing was reserved"),
        ));
    }
    let (Some(status), Some(info)) = (status, info) else {
        return Err(no_process(pid));
    };
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.split_whitespace().filter_map(|n| n.parse::<u32>().ok()))
    };
    let tgid = field("Tgid:").and_then(|mut v| v.next());
    if tgid != Some(pid) {
        return Err(Response::error(
            ErrorCode::InvalidRequest,
            format!(
                "{pid} is a thread of process {}, not a process: name the process with pid and the thread in threads",
                tgid.map_or("?".into(), |t| t.to_string())
            ),
        ));
    }
    if info.kthread {
        return Err(refused(
            RefusalKind::Permission,
            format!("process {pid} is a kernel thread"),
        ));
    }
    // Real, effective, saved and filesystem uid: all the requester's (a
    // set-uid program's are not), as the kernel's own ptrace check wants.
    let uids: Vec<u32> = field("Uid:").map(Iterator::collect).unwrap_or_default();
    let uid = requester.cred.uid;
    if uids.len() != 4 || (uid != 0 && uids.iter().any(|&u| u != uid)) {
        return Err(refused(
            RefusalKind::Permission,
            format!(
                "process {pid} ({}) belongs to uid {} (real, effective, saved, fs: {uids:?}), not to {}: only root reserves for another user's process",
                info.comm,
                uids.first().map_or("?".into(), |u| u.to_string()),
                requester.peer.label()
            ),
        ));
    }
    Ok(Client {
        cred: PeerCred {
            pid,
            ..requester.cred
        },
        start_time: info.start_time,
        peer: requester.peer.clone(),
        pidfd,
    })
}

/// Every thread of `pid` now (`all_threads`), at most MAX_THREADS.
pub(super) fn all_threads(host: &Host, pid: u32) -> Result<Vec<u32>, Response> {
    let tids = tasks::threads_of(host, pid);
    if tids.is_empty() {
        return Err(Response::error(
            ErrorCode::Gone,
            format!("process {pid} exited during the grant"),
        ));
    }
    if tids.len() > MAX_THREADS {
        return Err(Response::error(
            ErrorCode::InvalidRequest,
            format!(
                "process {pid} has {} threads; at most {MAX_THREADS} per reservation (name them with threads)",
                tids.len()
            ),
        ));
    }
    Ok(tids)
}

#[cfg(test)]
mod tests;
