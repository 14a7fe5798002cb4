//! Who a client is (rtkit: the peer's uid, and pid plus start time so that a
//! reused pid is never mistaken for the client): SO_PEERCRED or SO_PEERPIDFD
//! gives the process, /proc its start time and groups, /etc/passwd and
//! /etc/group the names the policy rules use; and which threads are its own,
//! named as the client sees them (a client in another PID namespace, e.g. a
//! container: `NSpid` of /proc/PID/task/TID/status, issue 27).

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
    thread_info(host, pid, tid).map(|t| t.start_time)
}

/// Thread `tid` of process `pid` as /proc shows it now; None when it is not one.
/// One open and read where the thread is there (its `task/` entry proves
/// it is the process's); a fake tree may keep its `stat` at /proc/<tid>.
pub fn thread_info(host: &Host, pid: u32, tid: u32) -> Option<tasks::TaskInfo> {
    if let Some(text) = host.read_opt(format!("/proc/{pid}/task/{tid}/stat")) {
        return tasks::parse_stat(pid, tid, &text);
    }
    if !host.exists(format!("/proc/{pid}/task/{tid}")) {
        return None;
    }
    tasks::info(host, pid, tid)
}

/// The ids of `NSpid:` in a /proc status text: the task's id in each PID
/// namespace it is in, from the namespace of this /proc (the daemon's) to
/// its own innermost one. Empty when the line is missing (kernel < 4.1).
fn nspid(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .map(|v| {
            v.split_whitespace()
                .filter_map(|n| n.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The thread ids a client named, as the daemon sees them. A client in a
/// nested PID namespace names its threads by the ids it sees: each is
/// matched against the innermost `NSpid` id of the client's own threads
/// (at the client's namespace level) and replaced by the first, the
/// daemon's. An id no thread of the client has in its namespace is left as
/// it is: `check_threads` then refuses it unless it is the client's own
/// thread by the daemon's id. A client in the daemon's namespace: unchanged.
pub fn translate_tids(host: &Host, pid: u32, tids: &[u32]) -> Vec<u32> {
    let level = host
        .read_opt(format!("/proc/{pid}/status"))
        .map_or(0, |s| nspid(&s).len());
    if level <= 1 {
        return tids.to_vec();
    }
    let seen: Vec<(u32, u32)> = tasks::threads_of(host, pid)
        .into_iter()
        .filter_map(|tid| {
            let ids = nspid(&host.read_opt(format!("/proc/{pid}/task/{tid}/status"))?);
            let (&inner, &outer) = (ids.last()?, ids.first()?);
            (ids.len() == level).then_some((inner, outer))
        })
        .collect();
    tids.iter()
        .map(|&t| {
            seen.iter()
                .find(|(inner, _)| *inner == t)
                .map_or(t, |(_, outer)| *outer)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake /proc with one process `pid` and its threads, each line of
    /// `threads` being (daemon's tid, NSpid line).
    fn fake_proc(dir: &std::path::Path, pid: u32, threads: &[(u32, &str)]) -> Host {
        for (tid, ns) in threads {
            let d = dir.join(format!("proc/{pid}/task/{tid}"));
            std::fs::create_dir_all(&d).unwrap();
            let status = format!("Name:\tworker\nTgid:\t{pid}\nPid:\t{tid}\nNSpid:\t{ns}\n");
            std::fs::write(d.join("status"), &status).unwrap();
            if *tid == pid {
                std::fs::write(dir.join(format!("proc/{pid}/status")), &status).unwrap();
            }
        }
        Host::fake(dir)
    }

    #[test]
    fn a_client_in_a_pid_namespace_names_its_threads_as_it_sees_them() {
        let dir = tempfile::tempdir().unwrap();
        // The client is 1 in its namespace, 23219 in the daemon's; its
        // worker thread 42 there is 23260 here.
        let host = fake_proc(
            dir.path(),
            23219,
            &[(23219, "23219\t1"), (23260, "23260\t42")],
        );
        assert_eq!(translate_tids(&host, 23219, &[42, 1]), vec![23260, 23219]);
        // An id that is none of its threads there stays as it is (refused later).
        assert_eq!(translate_tids(&host, 23219, &[7]), vec![7]);
    }

    #[test]
    fn nested_namespaces_match_the_clients_level_and_the_daemons_namespace_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        // Two levels down: matched on the innermost id, at the same depth.
        let host = fake_proc(dir.path(), 500, &[(500, "500\t30\t1"), (501, "501\t31\t2")]);
        assert_eq!(translate_tids(&host, 500, &[2, 1]), vec![501, 500]);
        assert_eq!(translate_tids(&host, 500, &[31]), vec![31], "not its level");
        let dir = tempfile::tempdir().unwrap();
        let host = fake_proc(dir.path(), 600, &[(600, "600"), (601, "601")]);
        assert_eq!(translate_tids(&host, 600, &[601]), vec![601]);
        assert_eq!(nspid("Name:\tx\n"), Vec::<u32>::new());
    }

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
