//! rtkit's rules, decided in the daemon's loop (rtkit-daemon.c:
//! lookup_client, verify_burst, find_process/find_thread limits,
//! verify_process_user, verify_process_rttime), then rtmgr's admission: a
//! granted thread is an RT1+ reservation (ARTiS §2.1: soft real time, may
//! run on an RT CPU while it does not endanger RT0 latency) that takes the
//! Manager's grant path — journal, placement on an RT CPU, pidfd watch.

use super::bus::{Call, Caller, Fail};
use super::config::RtkitSection;
use super::high::{self, HighThreads};
use crate::daemon::manager::{Allowed, Manager};
use crate::daemon::peer::{self, thread_of, Client};
use crate::tasks;
use rtmgr_core::admission::rate::Burst;
use rtmgr_core::class::TaskClass;
use rtmgr_core::protocol::{RefusalKind, Reply, Response, ValidReserve};
use rtmgr_sys::pidfd::PeerCred;
use rtmgr_sys::time::mono_ns;
use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The name rtkit's grants carry (`rtmgr reservations` shows it).
pub const GRANT_NAME: &str = "rtkit";

/// The front end's state: bursts per user, threads at a raised nice level.
pub struct Rtkit {
    cfg: RtkitSection,
    bursts: BTreeMap<u32, Burst>,
    high: HighThreads,
    stop: Arc<AtomicBool>,
}

fn failed(m: impl Into<String>) -> Fail {
    Fail::Failed(m.into())
}
fn denied(m: impl Into<String>) -> Fail {
    Fail::Denied(m.into())
}

/// Process and thread ids as rtkit reads them: no process = the caller's,
/// thread 0 = the process's main thread.
fn ids(caller: Caller, process: Option<u64>, thread: u64) -> Result<(u32, u32), Fail> {
    let id = |v: u64| {
        u32::try_from(v)
            .ok()
            .filter(|v| *v > 0 && *v <= i32::MAX as u32)
            .ok_or_else(|| {
                failed(format!(
                    "Invalid argument: {v} is not a process or thread id"
                ))
            })
    };
    let pid = match process {
        Some(p) => id(p)?,
        None => caller.pid,
    };
    let tid = if thread == 0 { pid } else { id(thread)? };
    Ok((pid, tid))
}

impl Rtkit {
    pub fn new(cfg: RtkitSection, stop: Arc<AtomicBool>) -> Self {
        Rtkit {
            cfg,
            bursts: BTreeMap::new(),
            high: HighThreads::default(),
            stop,
        }
    }

    /// Decide one call.
    pub fn answer(&mut self, m: &mut Manager, caller: Caller, call: Call) -> Result<(), Fail> {
        self.high.forget_gone(m);
        match call {
            Call::Realtime {
                process,
                thread,
                priority,
            } => self.realtime(m, caller, process, thread, priority),
            Call::HighPriority {
                process,
                thread,
                priority,
            } => self.high_priority(m, caller, process, thread, priority),
            Call::ResetKnown => {
                root_only(caller, "ResetKnown")?;
                self.reset_known(m);
                Ok(())
            }
            Call::ResetAll => {
                root_only(caller, "ResetAll")?;
                self.reset_known(m);
                self.reset_unknown(m);
                Ok(())
            }
            Call::Exit => {
                root_only(caller, "Exit")?;
                tracing::info!("rtkit: Exit called: the daemon stops");
                self.stop.store(true, Ordering::Relaxed);
                Ok(())
            }
        }
    }

    fn realtime(
        &mut self,
        m: &mut Manager,
        caller: Caller,
        process: Option<u64>,
        thread: u64,
        priority: u32,
    ) -> Result<(), Fail> {
        let (pid, tid) = ids(caller, process, thread)?;
        if !(1..=99).contains(&priority) {
            return Err(failed(format!(
                "Invalid argument: SCHED_FIFO priority {priority} is not within 1..99"
            )));
        }
        let max = self.cfg.max_realtime_priority;
        if priority > u32::from(max) {
            return Err(denied(format!(
                "priority {priority} is above MaxRealtimePriority {max}"
            )));
        }
        let client = self.admit_caller(m, caller, pid, tid)?;
        self.check_rttime(m, pid)?;
        let held = rtkit_grant_of(m, tid);
        if let Some((id, p)) = held {
            if u32::from(p) == priority {
                return Ok(());
            }
            m.revoke_id(id);
        }
        self.high.lower(m, tid);
        let started = m.check_threads(pid, &[tid]).map_err(refusal)?;
        let priority = priority as u8;
        let v = ValidReserve {
            demand: self.cfg.demand(priority).map_err(failed)?,
            class: TaskClass::Rt1 { priority },
            cpu: None,
            threads: vec![tid],
            target: None,
            name: Some(GRANT_NAME.into()),
            irq: None,
            memlock_bytes: None,
            io_class: None,
            cache_share: None,
        };
        m.stats.requests += 1;
        let ask = Allowed {
            v: &v,
            tids: vec![tid],
            started,
            irq: None,
            limits: (self.cfg.rttime_usec_max, 0),
        };
        let resp = match m.grant_admitted(&client, ask) {
            Ok(r) | Err(r) => r,
        };
        m.count(&resp);
        match resp.reply {
            Reply::Granted { .. } => {
                tracing::info!(
                    "rtkit: thread {tid} of process {pid} (uid {}) RT at priority {priority}",
                    caller.uid
                );
                Ok(())
            }
            _ => Err(refusal(resp)),
        }
    }

    /// MakeThreadHighPriority: rtkit's checks, then the nice level (`high.rs`).
    fn high_priority(
        &mut self,
        m: &mut Manager,
        caller: Caller,
        process: Option<u64>,
        thread: u64,
        nice: i32,
    ) -> Result<(), Fail> {
        let (pid, tid) = ids(caller, process, thread)?;
        if !(-20..=19).contains(&nice) {
            return Err(failed(format!(
                "Invalid argument: nice level {nice} is not within -20..19"
            )));
        }
        let min = self.cfg.min_nice_level;
        if nice < min {
            return Err(denied(format!(
                "nice level {nice} is below MinNiceLevel {min}"
            )));
        }
        self.admit_caller(m, caller, pid, tid)?;
        // An RT thread of rtkit's goes back to SCHED_OTHER (as in rtkit);
        // one held by another rtmgr reservation is not rtkit's to change.
        let holder = m
            .grants()
            .find(|g| g.threads.iter().any(|t| t.tid == tid))
            .map(|g| (g.id, is_rtkit(g)));
        match holder {
            Some((id, false)) => {
                return Err(denied(format!("thread {tid} holds rtmgr reservation {id}")))
            }
            Some((id, true)) => {
                m.revoke_id(id);
            }
            None => {}
        }
        self.high.raise(m, caller.uid, pid, tid, nice)
    }

    /// Give every raised nice level back; what could not be.
    pub fn lower_all(&mut self, m: &Manager) -> Vec<String> {
        self.high.lower_all(m)
    }

    /// rtkit's checks on the caller before anything changes: limits per
    /// user, the burst, the process belongs to the caller's user, the
    /// thread to the process. The Manager's view of the client.
    fn admit_caller(
        &mut self,
        m: &Manager,
        caller: Caller,
        pid: u32,
        tid: u32,
    ) -> Result<Client, Fail> {
        self.check_counts(m, caller.uid, pid, tid)?;
        self.check_burst(caller.uid)?;
        let proc_dir = m.host.path(format!("/proc/{pid}"));
        let meta =
            std::fs::metadata(proc_dir).map_err(|_| failed(format!("No such process: {pid}")))?;
        if meta.uid() != caller.uid {
            return Err(denied(format!(
                "process {pid} belongs to uid {}, not to the caller's uid {}",
                meta.uid(),
                caller.uid
            )));
        }
        if thread_of(&m.host, pid, tid).is_none() {
            return Err(denied(format!(
                "thread {tid} is not a thread of process {pid}"
            )));
        }
        let cred = PeerCred {
            pid,
            uid: caller.uid,
            gid: meta.gid(),
        };
        peer::identify(&m.host, cred, None).ok_or_else(|| failed(format!("No such process: {pid}")))
    }

    /// rtkit: the client must have set its hard RLIMIT_RTTIME, at most
    /// RTTimeUSecMax (read from /proc/PID/limits as rtkit does: prlimit on
    /// another user's process needs CAP_SYS_RESOURCE).
    fn check_rttime(&self, m: &Manager, pid: u32) -> Result<(), Fail> {
        let max = self.cfg.rttime_usec_max;
        let hard = m
            .host
            .read_opt(format!("/proc/{pid}/limits"))
            .and_then(|t| rttime_hard(&t))
            .ok_or_else(|| failed(format!("No such process: {pid} (its limits)")))?;
        match hard {
            Some(h) if h <= max => Ok(()),
            Some(h) => Err(denied(format!(
                "process {pid}: RLIMIT_RTTIME {h} µs is above RTTimeUSecMax {max} µs"
            ))),
            None => Err(denied(format!(
                "process {pid}: RLIMIT_RTTIME is not set (unlimited); set it to at most RTTimeUSecMax {max} µs"
            ))),
        }
    }

    /// rtkit's actions per burst per user.
    fn check_burst(&mut self, uid: u32) -> Result<(), Fail> {
        let now = mono_ns();
        let burst_ns = u64::from(self.cfg.actions_burst_sec) * 1_000_000_000;
        self.bursts.retain(|_, b| !b.expired(now, burst_ns));
        let b = self.bursts.entry(uid).or_default();
        b.take(now, self.cfg.actions_per_burst_max, burst_ns)
            .map_err(|r| {
                failed(format!(
                    "Device or resource busy: uid {uid} made more than {} requests in {} s; ask again in {} ms",
                    r.limit,
                    self.cfg.actions_burst_sec,
                    r.retry_after_ns.div_ceil(1_000_000)
                ))
            })
    }

    /// rtkit's users_max, processes_per_user_max, threads_per_user_max
    /// (a thread or process already known does not count again).
    fn check_counts(&self, m: &Manager, uid: u32, pid: u32, tid: u32) -> Result<(), Fail> {
        let known = self.known(m);
        let users: BTreeSet<u32> = known.iter().map(|k| k.0).collect();
        let mine: Vec<_> = known.iter().filter(|k| k.0 == uid).collect();
        let pids: BTreeSet<u32> = mine.iter().map(|k| k.1).collect();
        let busy = |what: String| Err(failed(format!("Device or resource busy: {what}")));
        if !users.contains(&uid) && users.len() >= self.cfg.users_max as usize {
            return busy(format!("{} users at once is the most", self.cfg.users_max));
        }
        if !pids.contains(&pid) && pids.len() >= self.cfg.processes_per_user_max as usize {
            return busy(format!(
                "uid {uid}: {} processes at once is the most",
                self.cfg.processes_per_user_max
            ));
        }
        if !mine.iter().any(|k| k.2 == tid) && mine.len() >= self.cfg.threads_per_user_max as usize
        {
            return busy(format!(
                "uid {uid}: {} threads at once is the most",
                self.cfg.threads_per_user_max
            ));
        }
        Ok(())
    }

    /// (uid, pid, tid) of every thread rtkit raised: RT grants and nice levels.
    fn known(&self, m: &Manager) -> Vec<(u32, u32, u32)> {
        let mut out: Vec<_> = m
            .grants()
            .filter(|g| is_rtkit(g))
            .flat_map(|g| g.threads.iter().map(|t| (g.uid, g.pid, t.tid)))
            .collect();
        out.extend(self.high.known());
        out
    }

    /// Revoke every rtkit grant and give every raised nice level back.
    fn reset_known(&mut self, m: &mut Manager) {
        let ids: Vec<u64> = m.grants().filter(|g| is_rtkit(g)).map(|g| g.id).collect();
        for id in ids {
            m.revoke_id(id);
        }
        for p in self.high.lower_all(m) {
            tracing::warn!("rtkit: {p}");
        }
    }

    /// rtkit's ResetAll: every other SCHED_FIFO/RR thread of a process not
    /// owned by root, not held by an rtmgr grant, back to SCHED_OTHER nice 0.
    fn reset_unknown(&self, m: &Manager) {
        let held: BTreeSet<u32> = m
            .grants()
            .flat_map(|g| g.threads.iter().map(|t| t.tid))
            .collect();
        let me = std::process::id();
        for t in tasks::all(&m.host).unwrap_or_default() {
            if t.pid <= 1 || t.pid == me || t.kthread || !t.is_fifo_or_rr() || held.contains(&t.tid)
            {
                continue;
            }
            let owner = std::fs::metadata(m.host.path(format!("/proc/{}", t.pid)));
            if owner.map_or(true, |o| o.uid() == 0) {
                continue;
            }
            if let Err(e) = m.host.set_attr(t.tid, &high::normal()) {
                if !e.is_gone() {
                    tracing::warn!("rtkit: ResetAll: thread {}: {e}", t.tid);
                }
            } else {
                tracing::info!(
                    "rtkit: ResetAll demoted thread {} of process {}",
                    t.tid,
                    t.pid
                );
            }
        }
    }
}

fn root_only(caller: Caller, what: &str) -> Result<(), Fail> {
    if caller.uid == 0 {
        Ok(())
    } else {
        Err(denied(format!("{what} is for root only")))
    }
}

pub fn is_rtkit(g: &crate::daemon::grants_journal::Grant) -> bool {
    g.name.as_deref() == Some(GRANT_NAME)
}

/// The hard RLIMIT_RTTIME in /proc/PID/limits: Some(None) = unlimited.
fn rttime_hard(limits: &str) -> Option<Option<u64>> {
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max realtime timeout"))?;
    let hard = line["Max realtime timeout".len()..]
        .split_whitespace()
        .nth(1)?;
    match hard {
        "unlimited" => Some(None),
        v => v.parse().ok().map(Some),
    }
}

/// The rtkit grant holding `tid` and its priority.
fn rtkit_grant_of(m: &Manager, tid: u32) -> Option<(u64, u8)> {
    m.grants()
        .filter(|g| is_rtkit(g))
        .find(|g| g.threads.iter().any(|t| t.tid == tid))
        .map(|g| (g.id, g.demand.priority().unwrap_or(0)))
}

/// A Manager refusal as rtkit's error: admission (no RT CPU has room) and
/// errors are Failed (like rtkit's EBUSY), the others AccessDenied.
fn refusal(resp: Response) -> Fail {
    match resp.reply {
        Reply::Refused {
            reason: RefusalKind::Admission,
            message,
            ..
        } => failed(format!("no RT CPU has room for this thread: {message}")),
        Reply::Refused { message, .. } => denied(message),
        Reply::Error { message, .. } => failed(message),
        other => failed(format!("unexpected answer {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_follow_rtkit() {
        let c = Caller { uid: 1000, pid: 42 };
        assert_eq!(ids(c, None, 0).unwrap(), (42, 42));
        assert_eq!(ids(c, None, 43).unwrap(), (42, 43));
        assert_eq!(ids(c, Some(7), 0).unwrap(), (7, 7));
        assert!(ids(c, Some(u64::MAX), 1).is_err());
        assert!(ids(c, None, 1 << 40).is_err());
    }

    #[test]
    fn rttime_is_read_from_proc_limits() {
        let head = "Limit                     Soft Limit           Hard Limit           Units\n";
        let set = format!(
            "{head}Max realtime timeout      100000               200000               us\n"
        );
        assert_eq!(rttime_hard(&set), Some(Some(200_000)));
        let unset = format!(
            "{head}Max realtime timeout      unlimited            unlimited            us\n"
        );
        assert_eq!(rttime_hard(&unset), Some(None));
        assert_eq!(rttime_hard(head), None);
    }
}
