//! Who a client is (rtkit: the peer's uid, and pid plus start time so that a
//! reused pid is never mistaken for the client): SO_PEERCRED or SO_PEERPIDFD
//! gives the process, /proc its start time and groups, /etc/passwd and
//! /etc/group the names the policy rules use; and which threads are its own.

use crate::tasks;
use crate::Host;
use rtmgr_core::admission::policy::Peer;
use rtmgr_sys::pidfd::{PeerCred, Pidfd};

/// A connected client process.
#[derive(Debug)]
pub struct Client {
    pub cred: PeerCred,
    pub start_time: u64,
    pub peer: Peer,
    /// Readable once the process exits (None in fake trees or when it
    /// could not be opened: then liveness falls back to pid + start time).
    pub pidfd: Option<Pidfd>,
}

/// Identify the process behind a socket's credentials. None when it is
/// already gone (its pid no longer names the process that connected).
pub fn identify(host: &Host, cred: PeerCred, pidfd: Option<Pidfd>) -> Option<Client> {
    let pidfd = pidfd.or_else(|| Pidfd::open(cred.pid).ok());
    // The pidfd holds the process; reading /proc after it names the same one.
    let info = tasks::info(host, cred.pid, cred.pid)?;
    if pidfd.as_ref().is_some_and(|p| p.exited()) {
        return None;
    }
    Some(Client {
        cred,
        start_time: info.start_time,
        peer: peer_of(host, cred.pid, cred.uid, cred.gid),
        pidfd,
    })
}

/// The policy's view of a user: names and groups (supplementary groups from
/// /proc/PID/status).
pub fn peer_of(host: &Host, pid: u32, uid: u32, gid: u32) -> Peer {
    let mut gids = vec![gid];
    if let Some(status) = host.read_opt(format!("/proc/{pid}/status")) {
        if let Some(line) = status.lines().find_map(|l| l.strip_prefix("Groups:")) {
            gids.extend(
                line.split_whitespace()
                    .filter_map(|g| g.parse::<u32>().ok()),
            );
        }
    }
    gids.sort_unstable();
    gids.dedup();
    let group_names = host.read_opt("/etc/group").unwrap_or_default();
    Peer {
        uid,
        user: name_of(&host.read_opt("/etc/passwd").unwrap_or_default(), uid),
        groups: gids
            .into_iter()
            .map(|g| (g, name_of(&group_names, g)))
            .collect(),
    }
}

/// The name with this id in a passwd/group-style file.
fn name_of(file: &str, id: u32) -> Option<String> {
    file.lines().find_map(|l| {
        let mut f = l.split(':');
        let name = f.next()?;
        let _ = f.next();
        (f.next()?.parse::<u32>().ok()? == id).then(|| name.to_string())
    })
}

/// Is `tid` a thread of process `pid`? Its start time if so.
pub fn thread_of(host: &Host, pid: u32, tid: u32) -> Option<u64> {
    if !host.exists(format!("/proc/{pid}/task/{tid}")) {
        return None;
    }
    tasks::info(host, pid, tid).map(|t| t.start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_passwd_and_group() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n";
        assert_eq!(name_of(passwd, 1000).as_deref(), Some("alice"));
        assert_eq!(name_of(passwd, 5), None);
        let group = "audio:x:29:alice\n";
        assert_eq!(name_of(group, 29).as_deref(), Some("audio"));
    }

    #[test]
    fn this_process_is_identified() {
        let host = Host::real();
        let me = std::process::id();
        let cred = PeerCred {
            pid: me,
            uid: 0,
            gid: 0,
        };
        let c = identify(&host, cred, None).unwrap();
        assert!(c.start_time > 0);
        assert_eq!(thread_of(&host, me, me), Some(c.start_time));
        assert_eq!(thread_of(&host, me, 1), None, "init is not our thread");
    }
}
