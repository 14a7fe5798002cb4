//! Parsers of the /proc files the live balancer reads at every sample
//! (ARTiS §2.3 on an unpatched kernel): a task's `status` lines, `schedstat`,
//! CPU pressure (PSI), `loadavg`, the per-CPU interrupt ticks and times of
//! /proc/stat (the times also for `rtmgr top`),
//! a task's `stat`, and the ARTiS class of a scheduling policy. Pure: text
//! in, numbers out.

use crate::class::{TaskClass, RT0_PRIORITY};
use crate::cpuset::CpuSet;
use std::collections::BTreeMap;

/// SCHED_FIFO and SCHED_RR as /proc/…/stat numbers them.
const SCHED_FIFO: u32 = 1;
const SCHED_RR: u32 = 2;

/// The class of a task from its scheduling policy and real-time priority
/// (the `policy` and `rt_priority` fields of /proc/…/stat).
pub fn class_of_policy(policy: u32, prio: u32) -> TaskClass {
    let rt = policy == SCHED_FIFO || policy == SCHED_RR;
    match (rt, prio) {
        (false, _) => TaskClass::Linux,
        (true, p) if p >= u32::from(RT0_PRIORITY) => TaskClass::Rt0,
        (true, p) => TaskClass::Rt1 {
            priority: p.clamp(1, 98) as u8,
        },
    }
}

/// The fields of /proc/…/stat that rtmgr reads (proc(5) numbers them from
/// 1: pid, comm, state…). `comm` may hold spaces and parentheses: the
/// fields after it start at the last ')'.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskStat<'a> {
    pub comm: &'a str,
    /// Field 3: R, S, D, T, t, Z, I…
    pub state: char,
    /// Field 9: PF_* flags.
    pub flags: u64,
    /// Fields 14 and 15: user and system time, clock ticks.
    pub utime: u64,
    pub stime: u64,
    /// Field 22: clock ticks after boot.
    pub starttime: u64,
    /// Fields 39–41 (absent before Linux 2.5.19): last CPU, RT priority, policy.
    pub processor: Option<u32>,
    pub rt_priority: Option<u32>,
    pub policy: Option<u32>,
}

impl<'a> TaskStat<'a> {
    pub fn parse(text: &'a [u8]) -> Option<TaskStat<'a>> {
        let text = std::str::from_utf8(text).ok()?;
        let open = text.find('(')?;
        let close = text.rfind(')')?;
        let comm = text.get(open + 1..close)?;
        let mut rest = text.get(close + 1..)?.split_ascii_whitespace();
        let state = rest.next()?.chars().next()?;
        // fields[n] is field n, from 4 (ppid) to 41 (policy); some are
        // signed (priority, nice), some above i64::MAX (rsslim).
        let mut fields = [0u64; 42];
        let mut last = 3;
        for (slot, word) in fields[4..].iter_mut().zip(rest) {
            *slot = word
                .parse::<u64>()
                .or_else(|_| word.parse::<i64>().map(|v| v as u64))
                .ok()?;
            last += 1;
        }
        let field = |n: usize| (n <= last).then(|| fields[n]);
        Some(TaskStat {
            comm,
            state,
            flags: field(9)?,
            utime: field(14)?,
            stime: field(15)?,
            starttime: field(22)?,
            processor: field(39).map(|c| c as u32),
            rt_priority: field(40).map(|p| p as u32),
            policy: field(41).map(|p| p as u32),
        })
    }
}

/// The three lines of /proc/…/status the balancer needs: affinity and
/// voluntary/involuntary context switches (procfs's full parser allocates
/// a map of every line, too much at every sample).
#[derive(Debug, Default, PartialEq)]
pub struct StatusLines {
    pub affinity: Option<CpuSet>,
    /// The parent process (`PPid`), 0 when absent.
    pub ppid: u32,
    pub voluntary: u64,
    pub involuntary: u64,
}

pub fn parse_status(text: &[u8]) -> StatusLines {
    let mut out = StatusLines::default();
    for line in String::from_utf8_lossy(text).lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Cpus_allowed_list" => out.affinity = CpuSet::parse_list(value).ok(),
            "PPid" => out.ppid = value.parse().unwrap_or(0),
            "voluntary_ctxt_switches" => out.voluntary = value.parse().unwrap_or(0),
            "nonvoluntary_ctxt_switches" => out.involuntary = value.parse().unwrap_or(0),
            _ => {}
        }
    }
    out
}

/// "run_ns delay_ns timeslices" of /proc/…/schedstat.
pub fn parse_schedstat(text: &[u8]) -> Option<(u64, u64, u64)> {
    let s = std::str::from_utf8(text).ok()?;
    let mut f = s.split_whitespace().map(|x| x.parse::<u64>());
    Some((f.next()?.ok()?, f.next()?.ok()?, f.next()?.ok()?))
}

/// Total time (µs) some task waited for a CPU, from /proc/pressure/cpu
/// ("some avg10=0.00 avg60=0.00 avg300=0.00 total=12345").
pub fn parse_pressure(text: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(text).ok()?;
    let line = s.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

/// Running tasks and the last pid handed out, from /proc/loadavg
/// ("0.10 0.20 0.30 2/650 12345").
pub fn parse_loadavg(text: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(text).ok()?;
    let mut f = s.split_whitespace().skip(3);
    let running = f.next()?.split('/').next()?.parse().ok()?;
    let last_pid = f.next()?.parse().ok()?;
    Some((running, last_pid))
}

/// Interrupt + softirq ticks per CPU from /proc/stat (per-CPU lines only).
pub fn irq_ticks(text: &str) -> Vec<u64> {
    let mut now = Vec::new();
    for line in text.lines() {
        // "cpu3 user nice system idle iowait irq softirq …", not the aggregate "cpu  …".
        let mut f = line.split_whitespace();
        let Some(Ok(cpu)) = f
            .next()
            .and_then(|n| n.strip_prefix("cpu"))
            .map(|c| c.parse::<usize>())
        else {
            continue;
        };
        if cpu >= crate::cpuset::MAX_CPUS as usize {
            continue;
        }
        let v: Vec<u64> = f.take(7).filter_map(|x| x.parse().ok()).collect();
        let irq = v.get(5).copied().unwrap_or(0) + v.get(6).copied().unwrap_or(0);
        if now.len() <= cpu {
            now.resize(cpu + 1, 0);
        }
        now[cpu] = irq;
    }
    now
}

/// One CPU's times since boot from its `cpuN` line of /proc/stat, in clock
/// ticks (USER_HZ): all of them, the busy part (neither idle nor iowait), and steal.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    pub total: u64,
    pub busy: u64,
    pub steal: u64,
}

/// [`CpuTimes`] of every CPU line of /proc/stat (not the aggregate "cpu").
pub fn cpu_times(text: &str) -> std::collections::BTreeMap<u32, CpuTimes> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        let Some(Ok(cpu)) = f.next().and_then(|n| n.strip_prefix("cpu")).map(str::parse) else {
            continue;
        };
        // user nice system idle iowait irq softirq steal (guest time is in user)
        let v: Vec<u64> = f.take(8).map(|x| x.parse().unwrap_or(0)).collect();
        let at = |i: usize| v.get(i).copied().unwrap_or(0);
        let total: u64 = v.iter().sum();
        out.insert(
            cpu,
            CpuTimes {
                total,
                busy: total - at(3) - at(4),
                steal: at(7),
            },
        );
    }
    out
}

/// Read and write system calls so far (`syscr`, `syscw` of /proc/…/io): a
/// lower bound of a task's kernel entries (other system calls are not counted).
pub fn parse_io(text: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(text).ok()?;
    let get = |key: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    Some((get("syscr:")?, get("syscw:")?))
}

/// A number of a task's `/proc/<tid>/sched` ("dl.deadline  :  123"), by its
/// name; None when the kernel does not show it (the `dl.` fields only for a
/// SCHED_DEADLINE task).
pub fn sched_field(text: &str, key: &str) -> Option<i64> {
    sched_value(text, key)?.parse().ok()
}

/// A time of a task's `/proc/<tid>/sched` that the kernel prints in ms
/// with six decimals ("se.sum_exec_runtime  :  1234.567890"), in ns.
pub fn sched_field_ms_as_ns(text: &str, key: &str) -> Option<u64> {
    let v = sched_value(text, key)?;
    let (ms, frac) = v.split_once('.').unwrap_or((v, "0"));
    if frac.len() > 6 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let frac_ns: u64 = format!("{frac:0<6}").parse().ok()?;
    ms.parse::<u64>()
        .ok()?
        .checked_mul(1_000_000)?
        .checked_add(frac_ns)
}

/// The text after the last ':' of the `/proc/<tid>/sched` line named `key`.
fn sched_value<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    Some(
        text.lines()
            .find(|l| l.split_whitespace().next() == Some(key))?
            .rsplit(':')
            .next()?
            .trim(),
    )
}

/// Steal time per CPU in clock ticks (USER_HZ), from the `cpuN` lines of `/proc/stat`.
pub fn parse_steal(stat: &str) -> BTreeMap<u32, u64> {
    cpu_times(stat)
        .into_iter()
        .map(|(cpu, t)| (cpu, t.steal))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::TaskStat;

    /// A SCHED_FIFO 20 thread's stat, its comm with a space and parentheses.
    const FIFO_STAT: &str = "5826 (py (x) 3) S 5823 4286 30263 0 -1 4194368 494 0 0 0 54 8 0 0 -21 0 1 0 3433473 28348416 3859 18446744073709551615 1 1 0 0 0 0 0 16781312 16386 0 0 0 17 1 20 1 0 0 0 0 0 0 0 0 0 0\n";

    #[test]
    fn a_time_in_ms_is_read_in_ns() {
        let text = "se.sum_exec_runtime                          :          1234.056789\nse.nr_migrations : 3\n";
        assert_eq!(
            super::sched_field_ms_as_ns(text, "se.sum_exec_runtime"),
            Some(1_234_056_789)
        );
        assert_eq!(super::sched_field_ms_as_ns("x : 7\n", "x"), Some(7_000_000));
        assert_eq!(
            super::sched_field_ms_as_ns("x : 1.5\n", "x"),
            Some(1_500_000)
        );
        assert_eq!(super::sched_field_ms_as_ns("x : 1.-5\n", "x"), None);
        assert_eq!(
            super::sched_field_ms_as_ns("x : 1.5\n", "se.sum_exec_runtime"),
            None
        );
    }

    #[test]
    fn a_sched_field_is_read_by_its_whole_name() {
        let text = "t (300, #threads: 1)\n---\nse.exec_start   :   1000.500000\ndl.runtime   :   -25000\ndl.deadline   :   1012000000\n";
        assert_eq!(super::sched_field(text, "dl.runtime"), Some(-25000));
        assert_eq!(super::sched_field(text, "dl.deadline"), Some(1012000000));
        assert_eq!(super::sched_field(text, "dl."), None);
        assert_eq!(
            super::sched_field(text, "se.exec_start"),
            None,
            "not an integer"
        );
    }

    #[test]
    fn a_task_stat_reads_past_an_odd_comm_and_negative_and_huge_fields() {
        let st = TaskStat::parse(FIFO_STAT.as_bytes()).unwrap();
        assert_eq!(st.comm, "py (x) 3");
        assert_eq!(st.state, 'S');
        assert_eq!(st.flags, 4194368);
        assert_eq!((st.utime, st.stime), (54, 8));
        assert_eq!(st.starttime, 3433473);
        assert_eq!(st.processor, Some(1));
        assert_eq!(st.rt_priority, Some(20));
        assert_eq!(st.policy, Some(1));
    }

    #[test]
    fn an_old_kernel_stat_has_no_policy_and_garbage_is_none() {
        let short: String = FIFO_STAT.split(' ').take(38).collect::<Vec<_>>().join(" ");
        let st = TaskStat::parse(short.as_bytes()).unwrap();
        assert_eq!(
            (st.processor, st.rt_priority, st.policy),
            (None, None, None)
        );
        assert_eq!(st.starttime, 3433473);
        for bad in ["", "5826 (py", "5826 (py) S 1 2", "5826 (py) S x 4286"] {
            assert_eq!(TaskStat::parse(bad.as_bytes()), None, "{bad:?}");
        }
    }

    use super::*;

    #[test]
    fn cpu_times_split_busy_idle_and_steal_per_cpu() {
        let stat =
            "cpu  10 0 10 100 0 0 0 5 0 0\ncpu0 4 1 2 50 3 1 1 5 9 0\ncpu1 1 0 0 9\nintr 5\n";
        let t = cpu_times(stat);
        assert_eq!(t.len(), 2, "{t:?}");
        assert_eq!(
            t[&0],
            CpuTimes {
                total: 67,
                busy: 14,
                steal: 5
            }
        );
        assert_eq!(
            t[&1],
            CpuTimes {
                total: 10,
                busy: 1,
                steal: 0
            }
        );
    }

    #[test]
    fn irq_ticks_skip_the_aggregate_line() {
        let text = "cpu  9999999 0 5 100 0 40 60 0 0 0\ncpu0 10 0 5 50 0 4 6 0 0 0\ncpu1 10 0 5 50 0 36 54 0 0 0\nintr 123\nctxt 5\n";
        assert_eq!(irq_ticks(text), vec![10, 90]);
        assert!(irq_ticks("cpu99999999 1 2 3 4 5 6 7\n").is_empty());
    }

    #[test]
    fn parsers() {
        assert_eq!(parse_schedstat(b"123 456 7\n"), Some((123, 456, 7)));
        assert_eq!(parse_schedstat(b"x"), None);
        assert_eq!(
            parse_loadavg(b"0.52 0.58 0.59 3/612 40123\n"),
            Some((3, 40123))
        );
        assert_eq!(
            parse_pressure(
                b"some avg10=1.00 avg60=0.50 avg300=0.10 total=987\nfull avg10=0 total=5\n"
            ),
            Some(987)
        );
        assert_eq!(parse_pressure(b""), None);
        let st = parse_status(b"Name:\tx\nCpus_allowed_list:\t0-2,5\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n");
        assert_eq!(st.affinity, Some([0, 1, 2, 5].into_iter().collect()));
        assert_eq!((st.voluntary, st.involuntary), (12, 3));
    }

    #[test]
    fn io_counters() {
        let io = b"rchar: 10\nwchar: 20\nsyscr: 3\nsyscw: 4\nread_bytes: 0\n";
        assert_eq!(parse_io(io), Some((3, 4)));
        assert_eq!(parse_io(b"rchar: 1\n"), None);
    }

    #[test]
    fn classes_from_policy() {
        assert_eq!(class_of_policy(0, 0), TaskClass::Linux);
        assert_eq!(class_of_policy(SCHED_FIFO, 99), TaskClass::Rt0);
        assert_eq!(
            class_of_policy(SCHED_RR, 10),
            TaskClass::Rt1 { priority: 10 }
        );
    }
}
