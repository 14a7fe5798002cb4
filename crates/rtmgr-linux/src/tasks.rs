//! The tasks (threads) of the machine as /proc shows them: kernel thread or
//! not, bound to one CPU or movable, scheduling class, start time (to tell a
//! reused thread id from the original). ARTiS §2.4: the partition moves every
//! movable task off the RT CPUs; McKenney §2.1: kernel daemons are pinned away.

use crate::host::{Host, Result};

const PF_KTHREAD: u64 = 0x0020_0000;
const PF_NO_SETAFFINITY: u64 = 0x0400_0000;
const PF_EXITING: u64 = 0x0000_0004;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskInfo {
    pub pid: u32,
    pub tid: u32,
    pub comm: String,
    /// R running or queued, S/D asleep, T/t stopped, Z zombie, X dead…
    pub state: char,
    pub kthread: bool,
    /// The kernel forbids changing this task's affinity (per-CPU kernel thread).
    pub no_setaffinity: bool,
    /// Start time in clock ticks after boot: with `tid`, identifies the task.
    pub start_time: u64,
    pub policy: u32,
    pub rt_priority: u32,
    /// User and system time since it started, in clock ticks.
    pub cpu_ticks: u64,
}

impl TaskInfo {
    pub fn is_fifo_or_rr(&self) -> bool {
        self.policy == libc::SCHED_FIFO as u32 || self.policy == libc::SCHED_RR as u32
    }
}

/// Parse /proc/<tid>/stat (`rtmgr_core::proctext::TaskStat`).
pub fn parse_stat(pid: u32, tid: u32, text: &str) -> Option<TaskInfo> {
    let st = rtmgr_core::proctext::TaskStat::parse(text.as_bytes())?;
    Some(TaskInfo {
        pid,
        tid,
        comm: st.comm.to_string(),
        state: st.state,
        kthread: st.flags & PF_KTHREAD != 0,
        no_setaffinity: st.flags & PF_NO_SETAFFINITY != 0,
        start_time: st.starttime,
        rt_priority: st.rt_priority.unwrap_or(0),
        policy: st.policy.unwrap_or(0),
        cpu_ticks: st.utime + st.stime,
    })
}

fn numeric(names: Vec<String>) -> Vec<u32> {
    let mut v: Vec<u32> = names.iter().filter_map(|n| n.parse().ok()).collect();
    v.sort_unstable();
    v
}

/// Process ids.
pub fn pids(host: &Host) -> Result<Vec<u32>> {
    Ok(numeric(host.list_dir("/proc")?))
}

/// Thread ids of one process (empty if it is gone).
pub fn threads_of(host: &Host, pid: u32) -> Vec<u32> {
    host.list_dir(format!("/proc/{pid}/task"))
        .map(numeric)
        .unwrap_or_default()
}

/// The threads of process `pid` whose name (`comm`, as `ps -L` and `top -H`
/// show it) matches one of `patterns` (`*` any run of characters, `?` any
/// one), in tid order. Each pattern must match a thread: otherwise the error
/// names the pattern and lists the process's threads with their names.
pub fn threads_named(
    host: &Host,
    pid: u32,
    patterns: &[String],
) -> std::result::Result<Vec<u32>, String> {
    let named: Vec<(u32, String)> = threads_of(host, pid)
        .into_iter()
        .filter_map(|tid| Some((tid, info(host, pid, tid)?.comm)))
        .collect();
    if named.is_empty() {
        return Err(format!("no process {pid}"));
    }
    let globs: Vec<wildmatch::WildMatch> = patterns
        .iter()
        .map(|p| wildmatch::WildMatch::new(p))
        .collect();
    if let Some(unmatched) = patterns
        .iter()
        .zip(&globs)
        .find(|(_, g)| !named.iter().any(|(_, name)| g.matches(name)))
        .map(|(p, _)| p)
    {
        let threads: Vec<String> = named.iter().map(|(t, n)| format!("{t} {n}")).collect();
        return Err(format!(
            "process {pid} has no thread named {unmatched:?} (its threads: {})",
            threads.join(", ")
        ));
    }
    Ok(named
        .into_iter()
        .filter(|(_, name)| globs.iter().any(|g| g.matches(name)))
        .map(|(tid, _)| tid)
        .collect())
}

/// One task, or None if it is gone.
pub fn info(host: &Host, pid: u32, tid: u32) -> Option<TaskInfo> {
    let text = host
        .read_opt(format!("/proc/{pid}/task/{tid}/stat"))
        .or_else(|| host.read_opt(format!("/proc/{tid}/stat")))?;
    parse_stat(pid, tid, &text)
}

/// Every thread of every process. Tasks that vanish while listing are skipped.
pub fn all(host: &Host) -> Result<Vec<TaskInfo>> {
    let mut out = Vec::new();
    for pid in pids(host)? {
        for tid in threads_of(host, pid) {
            if let Some(t) = info(host, pid, tid) {
                out.push(t);
            }
        }
    }
    Ok(out)
}

/// The first user process (lowest pid) whose name is `comm`, e.g. a daemon
/// such as irqbalance or tuned.
pub fn find_process(host: &Host, comm: &str) -> Option<TaskInfo> {
    pids(host)
        .ok()?
        .into_iter()
        .filter_map(|pid| info(host, pid, pid))
        .find(|t| t.comm == comm && !t.kthread)
}

/// Does the task (tid) still exist with this start time?
///
/// A granted thread is held by a handle (a thread pidfd taken when its
/// request was checked, `Host::hold_task`): while it has not exited it is
/// still that thread, and the answer costs a poll(2) instead of a /proc read
/// and parse. Any other thread is read.
pub fn same_task(host: &Host, tid: u32, start_time: u64) -> bool {
    host.held_task_alive(tid, start_time)
        || host
            .read_opt(format!("/proc/{tid}/stat"))
            .and_then(|t| parse_stat(tid, tid, &t))
            .is_some_and(|t| t.start_time == start_time)
}

/// Is the task runnable (state R in /proc/<tid>/stat: running or queued)?
/// False when it sleeps, is stopped, or is gone.
pub fn runnable(host: &Host, tid: u32) -> bool {
    host.read_opt(format!("/proc/{tid}/stat"))
        .and_then(|t| state_of(&t))
        == Some('R')
}

/// The task's state letter in /proc/<tid>/stat (R running or queued, S/D
/// asleep, T/t stopped, Z zombie, X dead); None when it is gone.
pub fn state(host: &Host, tid: u32) -> Option<char> {
    host.read_opt(format!("/proc/{tid}/stat"))
        .and_then(|t| state_of(&t))
}

/// The CPU whose run queue holds the task now (field 39 of
/// /proc/<tid>/stat, `task_cpu`): a sleeping or stopped task stays on the
/// CPU it last ran on until it next wakes.
pub fn run_queue_cpu(host: &Host, tid: u32) -> Option<u32> {
    run_queue(host, tid).map(|(cpu, _)| cpu)
}

/// `run_queue_cpu` and the task's state letter, from one read: a runnable
/// task (`R`) is moved at once when its affinity leaves that CPU, a
/// sleeping or stopped one only when it next wakes.
pub fn run_queue(host: &Host, tid: u32) -> Option<(u32, char)> {
    let text = host.read_opt(format!("/proc/{tid}/stat"))?;
    let stat = rtmgr_core::proctext::TaskStat::parse(text.as_bytes())?;
    Some((stat.processor?, stat.state))
}

/// The task's CPU time so far, ns (the first field of /proc/<tid>/schedstat:
/// `sum_exec_runtime`, exact, unlike the tick-based times of stat).
pub fn exec_ns(host: &Host, tid: u32) -> Option<u64> {
    host.read_opt(format!("/proc/{tid}/schedstat"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The state letter of a /proc/<tid>/stat line (after the comm's last ')';
/// the rest of the line need not be there).
/// Is the task exiting (PF_EXITING in its flags: killed or returning from
/// its last function, its exit not done)? None when it is gone.
pub fn exiting(host: &Host, tid: u32) -> Option<bool> {
    let text = host.read_opt(format!("/proc/{tid}/stat"))?;
    let st = rtmgr_core::proctext::TaskStat::parse(text.as_bytes())?;
    Some(st.flags & PF_EXITING != 0)
}

fn state_of(stat: &str) -> Option<char> {
    stat.get(stat.rfind(')')? + 1..)?
        .trim_start()
        .chars()
        .next()
}

/// Context switches of one thread (voluntary, involuntary) from its status file.
pub fn context_switches(host: &Host, tid: u32) -> Option<(u64, u64)> {
    let status = host.read_opt(format!("/proc/{tid}/status"))?;
    let get = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((
        get("voluntary_ctxt_switches:")?,
        get("nonvoluntary_ctxt_switches:")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fake /proc with process 812's threads 812 "pipewire", 815
    /// "data-loop.0", 816 "data-loop.1" and 820 "pw-io".
    fn fake_process() -> (tempfile::TempDir, Host) {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        for (tid, comm) in [
            (812, "pipewire"),
            (815, "data-loop.0"),
            (816, "data-loop.1"),
            (820, "pw-io"),
        ] {
            let stat = format!(
                "{tid} ({comm}) S 1 812 812 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 4 0 {tid} 0 0"
            );
            crate::host::write_fake_file(&host, &format!("/proc/812/task/{tid}/stat"), &stat);
        }
        (dir, host)
    }

    #[test]
    fn threads_are_picked_by_name_and_a_name_that_matches_none_is_an_error() {
        let (_dir, host) = fake_process();
        let names = |ps: &[&str]| ps.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        assert_eq!(
            threads_named(&host, 812, &names(&["data-loop*"])),
            Ok(vec![815, 816])
        );
        assert_eq!(
            threads_named(&host, 812, &names(&["pw-io", "pipewire"])),
            Ok(vec![812, 820])
        );
        assert_eq!(
            threads_named(&host, 812, &names(&["data-loop.?"])),
            Ok(vec![815, 816])
        );
        // Whole names only: "data" is not "data-loop.0".
        let err = threads_named(&host, 812, &names(&["pw-io", "data"])).unwrap_err();
        assert_eq!(
            err,
            "process 812 has no thread named \"data\" (its threads: 812 pipewire, 815 data-loop.0, 816 data-loop.1, 820 pw-io)"
        );
        assert_eq!(
            threads_named(&host, 9, &names(&["x"])),
            Err("no process 9".into())
        );
    }

    #[test]
    fn parses_stat_with_odd_comm() {
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 99 1 0 0 0";
        let t = parse_stat(42, 42, line).unwrap();
        assert_eq!(t.comm, "a (b) c");
        assert_eq!(t.start_time, 777);
        assert_eq!(t.cpu_ticks, 0);
        assert_eq!(t.rt_priority, 99);
        assert_eq!(t.policy, 1);
        assert!(!t.kthread);
        assert!(t.is_fifo_or_rr());
    }

    #[test]
    fn reads_the_state_after_an_odd_comm() {
        assert_eq!(state_of("42 (a (R) c) S 1 42"), Some('S'));
        assert_eq!(state_of("7 (x) R 2 0"), Some('R'));
        assert_eq!(state_of("7 (x"), None);
        // This thread is running while it reads its own state; a gone one is not.
        let host = Host::real();
        assert!(runnable(&host, rtmgr_sys::sched::gettid()));
        assert!(!runnable(&host, u32::MAX));
    }

    /// PF_EXITING (0x4) in the flags after an odd name; a gone task is
    /// not known; this thread is not exiting.
    #[test]
    fn tells_an_exiting_task() {
        let m = crate::fake::FakeMachine::new(2).build();
        let host = m.host();
        for (tid, flags, dying) in [(42, 4194564, true), (43, 4194560, false)] {
            std::fs::create_dir_all(host.path(format!("/proc/{tid}"))).unwrap();
            let line =
                format!("{tid} (a (b) c) R 1 42 42 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 777");
            host.write(format!("/proc/{tid}/stat"), &line).unwrap();
            assert_eq!(exiting(&host, tid), Some(dying), "{line}");
        }
        assert_eq!(exiting(&host, 44), None);
        let me = rtmgr_sys::sched::gettid();
        assert_eq!(exiting(&Host::real(), me), Some(false));
    }

    #[test]
    fn reads_the_run_queue_cpu_and_the_cpu_time() {
        let m = crate::fake::FakeMachine::new(2).build();
        let host = m.host();
        let line = "42 (a (b) c) S 1 42 42 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 777 0 0 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 99 1 0 0 0";
        std::fs::create_dir_all(host.path("/proc/42")).unwrap();
        host.write("/proc/42/stat", line).unwrap();
        host.write("/proc/42/schedstat", "123456 7 8\n").unwrap();
        assert_eq!(run_queue_cpu(&host, 42), Some(1));
        assert_eq!(state(&host, 42), Some('S'));
        assert_eq!(exec_ns(&host, 42), Some(123_456));
        assert_eq!(run_queue_cpu(&host, 43), None);
        assert_eq!(exec_ns(&host, 43), None);
        // This thread runs, so its CPU time grows.
        let real = Host::real();
        let me = rtmgr_sys::sched::gettid();
        let before = exec_ns(&real, me).unwrap();
        let t = std::time::Instant::now();
        while exec_ns(&real, me).unwrap() == before {
            assert!(t.elapsed().as_secs() < 10, "CPU time did not grow");
        }
        assert!(run_queue_cpu(&real, me).is_some());
    }

    #[test]
    fn detects_kernel_threads() {
        // flags = PF_KTHREAD | PF_NO_SETAFFINITY
        let flags = PF_KTHREAD | PF_NO_SETAFFINITY;
        let line = format!("7 (ksoftirqd/1) S 2 0 0 0 -1 {flags} 0 0 0 0 0 0 0 0 20 0 1 0 5 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0");
        let t = parse_stat(7, 7, &line).unwrap();
        assert!(t.kthread && t.no_setaffinity);
    }

    #[test]
    fn lists_real_tasks_including_self() {
        let host = Host::real();
        let me = std::process::id();
        let all = all(&host).unwrap();
        assert!(all.iter().any(|t| t.pid == me));
        assert!(context_switches(&host, me).is_some());
    }
}
