//! The fake kernel behind `Host::fake` (tests, feature `fake`): files under a
//! temporary root stand for /proc, /sys and the cgroup tree, and the kernel's
//! reactions rtmgr relies on are emulated here — cgroup control files on
//! mkdir, membership and (v1) affinity on attach, v2 partitions' effective
//! CPUs, both spellings of an IRQ mask, task affinity in `status`.

use super::{io_err, task_err, Host, Kernel, Result};
use crate::sched::Policy;
use rtmgr_core::cgroupfs::{self, is_layout_line, rel_path, Layout};
use rtmgr_core::CpuSet;
use std::path::{Path, PathBuf};

#[derive(Debug)]
pub(super) struct FakeKernel;

/// A plain file read, no emulation.
fn read_plain(host: &Host, abs: &str) -> Option<String> {
    std::fs::read_to_string(host.path(abs)).ok()
}

/// The numeric entries of a /proc directory (pids, or a process's tids).
fn numeric_entries(host: &Host, abs: &str) -> Vec<u32> {
    let mut ids: Vec<u32> = std::fs::read_dir(host.path(abs))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    ids.sort_unstable();
    ids
}

/// A plain file write: create or replace, no emulation.
fn put(host: &Host, abs: &Path, value: &str) -> Result<()> {
    let p = host.path(abs);
    std::fs::write(&p, value).map_err(|e| io_err("write", &p, e))
}

/// The cpuset hierarchy and the cgroup directory `abs` is a control file of.
fn cgroup_of<'a>(host: &Host, abs: &'a Path) -> Option<(Layout, &'a Path)> {
    let mut mounts = cgroupfs::parse_mountinfo(&read_plain(host, "/proc/self/mountinfo")?);
    if let Some(v2) = &mounts.v2 {
        let ctl = read_plain(host, &v2.join("cgroup.controllers").to_string_lossy());
        mounts.v2_controllers = ctl
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_string)
            .collect();
    }
    let layout = mounts.layout()?;
    let dir = abs.parent()?;
    dir.starts_with(layout.mount()).then_some((layout, dir))
}

fn is_membership(abs: &Path) -> bool {
    abs.file_name()
        .is_some_and(|n| n == "tasks" || n == "cgroup.procs")
}

/// The error the kernel gives for a refused operation on `abs`.
fn refused(abs: &Path, errno: i32) -> super::HostError {
    io_err("write", abs, std::io::Error::from_raw_os_error(errno))
}

/// debugfs locked down in this fake tree (EPERM on every access).
fn debugfs_locked(host: &Host, abs: &Path) -> bool {
    abs.starts_with("/sys/kernel/debug") && host.path(super::FAKE_DEBUGFS_LOCKED).exists()
}

/// What the kernel checks before it takes a new IRQ affinity: the IRQ exists
/// (ENOENT), managed IRQs refuse any write (EIO), the mask or list parses (EINVAL).
fn check_irq_write(host: &Host, dir: &Path, file: &str, value: &str) -> Result<()> {
    if !host.path(dir).is_dir() {
        return Err(refused(&dir.join(file), libc::ENOENT));
    }
    if host.path(dir.join(super::FAKE_IRQ_MANAGED)).exists() {
        return Err(refused(&dir.join(file), libc::EIO));
    }
    let parsed = if file == "smp_affinity" {
        CpuSet::parse_mask(value).is_ok()
    } else {
        CpuSet::parse_list(value).is_ok()
    };
    if parsed {
        Ok(())
    } else {
        Err(refused(&dir.join(file), libc::EINVAL))
    }
}

/// debugfs `sched/preempt` takes one of its words and shows it in parentheses.
fn preempt_write(host: &Host, abs: &Path, value: &str) -> Result<()> {
    let text = host.read(abs)?;
    let words: Vec<String> = text
        .split_whitespace()
        .map(|w| w.trim_matches(|c| c == '(' || c == ')').to_string())
        .collect();
    let want = value.trim();
    if !words.iter().any(|w| w == want) {
        return Err(refused(abs, libc::EINVAL));
    }
    let shown: Vec<String> = words
        .iter()
        .map(|w| {
            if w == want {
                format!("({w})")
            } else {
                w.clone()
            }
        })
        .collect();
    put(host, abs, &(shown.join(" ") + "\n"))
}

impl Kernel for FakeKernel {
    fn read(&self, host: &Host, abs: &Path) -> Result<String> {
        if debugfs_locked(host, abs) {
            return Err(refused(abs, libc::EPERM));
        }
        if is_membership(abs) {
            if let Some((layout, dir)) = cgroup_of(host, abs) {
                let ids: Vec<String> = members(host, &layout, dir)
                    .iter()
                    .map(u32::to_string)
                    .collect();
                return Ok(ids.join("\n"));
            }
        }
        let p = host.path(abs);
        std::fs::read_to_string(&p).map_err(|e| io_err("read", &p, e))
    }

    fn write(&self, host: &Host, abs: &Path, value: &str) -> Result<()> {
        let name = abs.file_name().map(|n| n.to_string_lossy().into_owned());
        match name.as_deref() {
            Some("cgroup.subtree_control") => return subtree_control(host, abs, value),
            Some("tasks" | "cgroup.procs") => {
                if let (Some((layout, dir)), Ok(id)) = (cgroup_of(host, abs), value.trim().parse())
                {
                    return attach(host, &layout, dir, id);
                }
            }
            _ => {}
        }
        if debugfs_locked(host, abs) {
            return Err(refused(abs, libc::EPERM));
        }
        if abs == Path::new("/sys/kernel/debug/sched/preempt") {
            return preempt_write(host, abs, value);
        }
        let irq_dir = abs
            .parent()
            .filter(|d| d.parent() == Some(Path::new("/proc/irq")));
        if let (Some(f @ ("smp_affinity" | "smp_affinity_list")), Some(d)) =
            (name.as_deref(), irq_dir)
        {
            check_irq_write(host, d, f, value)?;
        }
        put(host, abs, value)?;
        match (name.as_deref(), irq_dir) {
            // The kernel keeps both spellings of an IRQ's mask in step.
            (Some("smp_affinity"), Some(d)) => {
                if let Ok(set) = CpuSet::parse_mask(value) {
                    put(host, &d.join("smp_affinity_list"), &set.to_list())?;
                }
            }
            (Some("smp_affinity_list"), Some(d)) => {
                if let Ok(set) = CpuSet::parse_list(value) {
                    put(host, &d.join("smp_affinity"), &set.to_mask(1))?;
                }
            }
            // An accepted partition takes its CPUs as its effective CPUs.
            (Some("cpuset.cpus.partition"), _) if matches!(value, "isolated" | "root") => {
                let dir = abs.parent().unwrap_or(Path::new("/"));
                let cpus = host.read_opt(dir.join("cpuset.cpus")).unwrap_or_default();
                put(host, &dir.join("cpuset.cpus.effective"), &cpus)?;
            }
            _ => {}
        }
        Ok(())
    }

    fn mkdir(&self, host: &Host, abs: &Path) -> Result<()> {
        let p = host.path(abs);
        std::fs::create_dir(&p).map_err(|e| io_err("mkdir", &p, e))?;
        let Some((layout, parent)) = cgroup_of(host, abs) else {
            return Ok(());
        };
        // The kernel gives a new cgroup its control files.
        let names: &[&str] = match layout {
            Layout::V1(_) => &[
                "cpuset.cpus",
                "cpuset.mems",
                "tasks",
                "cgroup.procs",
                "cpuset.cpu_exclusive",
                "cpuset.sched_load_balance",
            ],
            Layout::V2(_) => &[
                "cpuset.cpus",
                "cpuset.mems",
                "cgroup.procs",
                "cpuset.cpus.partition",
                "cpuset.cpus.exclusive",
                "cpuset.cpus.effective",
            ],
        };
        for n in names {
            put(host, &abs.join(n), "")?;
        }
        if matches!(layout, Layout::V2(_)) {
            put(host, &abs.join("cpuset.cpus.partition"), "member\n")?;
            let eff = host
                .read_opt(parent.join("cpuset.cpus.effective"))
                .unwrap_or_default();
            put(host, &abs.join("cpuset.cpus.effective"), &eff)?;
        }
        Ok(())
    }

    /// The emulated control files go with the directory.
    fn rmdir(&self, host: &Host, abs: &Path) -> Result<()> {
        let p = host.path(abs);
        std::fs::remove_dir_all(&p).map_err(|e| io_err("rmdir", &p, e))
    }

    fn get_affinity(&self, host: &Host, tid: u32) -> Result<CpuSet> {
        let path = status_path(tid);
        let status = host.read(&path)?;
        let line = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .ok_or_else(|| host.parse_err(&path, "no Cpus_allowed_list"))?;
        CpuSet::parse_list(line).map_err(|e| host.parse_err(&path, e.to_string()))
    }

    /// Per-CPU kernel threads carry a marker in their fake `status`: EINVAL.
    fn set_affinity(&self, host: &Host, tid: u32, cpus: &CpuSet) -> Result<()> {
        hold_while_marked(host);
        let path = status_path(tid);
        let status = host.read(&path)?;
        if status.contains("rtmgr_fake_no_setaffinity") {
            let e = std::io::Error::from_raw_os_error(libc::EINVAL);
            return Err(task_err("sched_setaffinity", tid, e));
        }
        let mut out = String::new();
        for line in status.lines() {
            if line.starts_with("Cpus_allowed_list:") {
                out.push_str(&format!("Cpus_allowed_list:\t{}\n", cpus.to_list()));
            } else {
                out.push_str(line);
                out.push('\n');
            }
        }
        put(host, Path::new(&path), &out)
    }

    /// Kept beside the task (`.rtmgr_policy`, JSON); a task without one is
    /// SCHED_OTHER at nice 0.
    fn get_policy(&self, host: &Host, tid: u32) -> Result<Policy> {
        Ok(read_plain(host, &format!("/proc/{tid}/.rtmgr_policy"))
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Policy::Other { nice: 0 }))
    }

    /// Accepted; a task of the tree keeps it (`get_policy` shows it).
    fn set_policy(&self, host: &Host, tid: u32, policy: Policy) -> Result<()> {
        let text = serde_json::to_string(&policy).expect("a policy serializes");
        write_beside(host, tid, ".rtmgr_policy", &text)
    }

    /// Kept beside the task (`.rtmgr_attr`: policy flags nice priority
    /// runtime deadline period); a task without one is SCHED_OTHER.
    fn get_attr(&self, host: &Host, tid: u32) -> Result<rtmgr_sys::sched::SchedAttr> {
        let text = read_plain(host, &format!("/proc/{tid}/.rtmgr_attr")).unwrap_or_default();
        let n: Vec<u64> = text
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let &[policy, flags, nice, priority, runtime, deadline, period] = n.as_slice() else {
            return Ok(rtmgr_sys::sched::SchedAttr::default());
        };
        Ok(rtmgr_sys::sched::SchedAttr {
            policy: policy as u32,
            flags,
            nice: nice as i64 as i32,
            priority: priority as u32,
            runtime,
            deadline,
            period,
        })
    }

    /// Accepted (but SCHED_DEADLINE where `FAKE_DL_REFUSED` says no); a
    /// task of the tree keeps it (`get_attr` shows it).
    fn set_attr(&self, host: &Host, tid: u32, a: &rtmgr_sys::sched::SchedAttr) -> Result<()> {
        if a.policy == rtmgr_sys::sched::SCHED_DEADLINE {
            if let Some(errno) = dl_refused(host, tid) {
                return Err(io_err(
                    "sched_setattr",
                    Path::new(&format!("/proc/{tid}")),
                    std::io::Error::from_raw_os_error(errno),
                ));
            }
        }
        let line = format!(
            "{} {} {} {} {} {} {}",
            a.policy, a.flags, a.nice as i64 as u64, a.priority, a.runtime, a.deadline, a.period
        );
        write_beside(host, tid, ".rtmgr_attr", &line)?;
        // How many times it was set (`ATTR_SETS`), for tests of the calls made.
        let sets = host
            .read(format!("/proc/{tid}/{ATTR_SETS}"))
            .ok()
            .and_then(|n| n.trim().parse::<u64>().ok())
            .unwrap_or(0);
        write_beside(host, tid, ATTR_SETS, &(sets + 1).to_string())
    }

    /// Kept beside the process (`.rtmgr_limit_<kind>`); unset is unlimited.
    fn get_limit(&self, host: &Host, pid: u32, kind: super::LimitKind) -> Result<super::Limit> {
        Ok(read_limit(host, pid, kind).unwrap_or_default())
    }

    /// Accepted; a process of the tree keeps it (`get_limit` shows it).
    fn set_limit(
        &self,
        host: &Host,
        pid: u32,
        kind: super::LimitKind,
        limit: super::Limit,
    ) -> Result<()> {
        let text = serde_json::to_string(&limit).expect("a limit serializes");
        write_beside(host, pid, &limit_file(kind), &text)
    }

    /// Kept in a file beside the task's: a task that does not exist is ESRCH.
    fn get_ioprio(&self, host: &Host, tid: u32) -> Result<u16> {
        let dir = PathBuf::from(format!("/proc/{tid}"));
        if !host.path(&dir).exists() {
            return Err(task_err(
                "ioprio_get",
                tid,
                std::io::Error::from_raw_os_error(libc::ESRCH),
            ));
        }
        Ok(
            std::fs::read_to_string(host.path(dir.join(".rtmgr_ioprio")))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0),
        )
    }

    fn set_ioprio(&self, host: &Host, tid: u32, raw: u16) -> Result<()> {
        self.get_ioprio(host, tid)?;
        put(
            host,
            &PathBuf::from(format!("/proc/{tid}/.rtmgr_ioprio")),
            &raw.to_string(),
        )
    }

    fn privileged(&self) -> bool {
        true
    }

    /// A fake tree has debugfs "mounted": `Host` reads its files directly.
    fn read_debugfs(&self, rel: &str) -> Result<String> {
        Err(io_err(
            "read",
            &Path::new("/sys/kernel/debug").join(rel),
            std::io::Error::from_raw_os_error(libc::ENOENT),
        ))
    }

    /// As `read_debugfs`: a fake tree's debugfs files are opened directly.
    fn open_debugfs(&self, rel: &str) -> Result<std::fs::File> {
        Err(io_err(
            "open",
            &Path::new("/sys/kernel/debug").join(rel),
            std::io::Error::from_raw_os_error(libc::ENOENT),
        ))
    }

    fn write_debugfs(&self, rel: &str, _value: &str) -> Result<()> {
        self.read_debugfs(rel).map(|_| ())
    }

    /// The fake's /proc/self/mountinfo line of `target` gets `rw,<data>` as
    /// its superblock options (EINVAL when nothing is mounted there).
    fn remount(&self, host: &Host, target: &Path, _mount_options: &str, data: &str) -> Result<()> {
        let info = Path::new("/proc/self/mountinfo");
        let text = read_plain(host, "/proc/self/mountinfo").unwrap_or_default();
        let want = target.to_string_lossy();
        let mut found = false;
        let lines: Vec<String> = text
            .lines()
            .map(|line| match rtmgr_core::cgroupfs::mount_line(line) {
                Some((mount_point, _, old)) if mount_point == want => {
                    found = true;
                    let opts = if data.is_empty() {
                        "rw".to_string()
                    } else {
                        format!("rw,{data}")
                    };
                    // The superblock options are the line's last field.
                    let kept = line.strip_suffix(old).unwrap_or(line);
                    format!("{kept}{opts}")
                }
                _ => line.to_string(),
            })
            .collect();
        if !found {
            return Err(refused(target, libc::EINVAL));
        }
        put(host, info, &(lines.join("\n") + "\n"))
    }

    fn probe_deadline(&self) -> Option<std::result::Result<(), String>> {
        None
    }

    fn probe_fifo(&self, host: &Host) -> Option<std::result::Result<(), i32>> {
        let errno = read_plain(host, super::FAKE_FIFO_ERRNO)?;
        errno.trim().parse().ok().map(Err)
    }

    /// None: a fake tree's tids are not this machine's.
    fn task_handle(&self, _tid: u32) -> Option<rtmgr_sys::pidfd::Pidfd> {
        None
    }

    fn sched_clock_offset(&self, host: &Host) -> std::result::Result<i64, String> {
        read_plain(host, super::FAKE_SCHED_CLOCK_OFFSET)
            .map_or(Ok(0), |v| v.trim().parse().map_err(|e| format!("{e}")))
    }
}

/// A process's emulated limit, kept as JSON in a hidden file of its /proc directory.
fn read_limit(host: &Host, pid: u32, kind: super::LimitKind) -> Option<super::Limit> {
    let text = read_plain(host, &format!("/proc/{pid}/{}", limit_file(kind)))?;
    serde_json::from_str(&text).ok()
}

/// Keep a task's emulated kernel state; a task not in the tree keeps nothing.
/// The errno `FAKE_DL_REFUSED` gives a SCHED_DEADLINE request of `tid`.
fn dl_refused(host: &Host, tid: u32) -> Option<i32> {
    let text = read_plain(host, super::FAKE_DL_REFUSED)?;
    let (errno, cpus) = text.trim().split_once(' ')?;
    let cpus = CpuSet::parse_list(cpus).ok()?;
    let on = crate::tasks::run_queue_cpu(host, tid)?;
    cpus.contains(on).then(|| errno.parse().ok()).flatten()
}

fn write_beside(host: &Host, tid: u32, name: &str, text: &str) -> Result<()> {
    let dir = PathBuf::from(format!("/proc/{tid}"));
    if !host.path(&dir).is_dir() {
        return Ok(());
    }
    put(host, &dir.join(name), text)
}

fn limit_file(kind: super::LimitKind) -> String {
    format!(".rtmgr_limit_{kind:?}")
}

fn status_path(tid: u32) -> String {
    format!("/proc/{tid}/status")
}

/// cgroup.subtree_control takes "+ctl"/"-ctl" tokens and shows the result.
fn subtree_control(host: &Host, abs: &Path, value: &str) -> Result<()> {
    let mut enabled: Vec<String> = host
        .read_opt(abs)
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect();
    for token in value.split_whitespace() {
        let (add, name) = token.split_at(1);
        enabled.retain(|c| c != name);
        if add == "+" {
            enabled.push(name.to_string());
        }
    }
    put(host, abs, &(enabled.join(" ") + "\n"))
}

/// Move one thread (v1) or one process (v2) into `dir`: its `/proc/*/cgroup`
/// line changes, and on v1 its affinity becomes the cpuset's CPUs.
/// A test holds a step here while this file is in the fake root (at most
/// 10 s): a grant's kernel steps in flight on the grant worker.
/// Beside a fake task: how many times its scheduling attributes were set.
pub const ATTR_SETS: &str = ".rtmgr_attr_sets";

pub const HOLD_AFFINITY: &str = "/rtmgr_fake_hold_affinity";

fn hold_while_marked(host: &Host) {
    let t0 = std::time::Instant::now();
    while host.exists(HOLD_AFFINITY) && t0.elapsed() < std::time::Duration::from_secs(10) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

fn attach(host: &Host, layout: &Layout, dir: &Path, id: u32) -> Result<()> {
    let rel = rel_path(layout, dir);
    let tids = match layout {
        Layout::V1(_) => vec![id],
        Layout::V2(_) => numeric_entries(host, &format!("/proc/{id}/task")),
    };
    for tid in tids {
        let path = format!("/proc/{tid}/cgroup");
        let text = host.read(&path)?;
        let mut out = String::new();
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (hid, ctl) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            if is_layout_line(layout, ctl) {
                out.push_str(&format!("{hid}:{ctl}:{rel}\n"));
            } else {
                out.push_str(line);
                out.push('\n');
            }
        }
        put(host, Path::new(&path), &out)?;
        if let Layout::V1(_) = layout {
            // The kernel resets a task's affinity to the cpuset's CPUs on attach.
            if let Some(cpus) = host
                .read_opt(dir.join("cpuset.cpus"))
                .and_then(|c| CpuSet::parse_list(&c).ok())
            {
                host.set_affinity(tid, &cpus)?;
            }
        }
    }
    Ok(())
}

/// Thread ids (v1) or process ids (v2) whose `/proc/*/cgroup` names `dir`.
fn members(host: &Host, layout: &Layout, dir: &Path) -> Vec<u32> {
    let rel = rel_path(layout, dir);
    let mut out = Vec::new();
    for pid in numeric_entries(host, "/proc") {
        for tid in numeric_entries(host, &format!("/proc/{pid}/task")) {
            let text = read_plain(host, &format!("/proc/{tid}/cgroup")).unwrap_or_default();
            if cgroupfs::task_cgroup(&text, layout).as_deref() == Some(rel.as_str()) {
                match layout {
                    Layout::V1(_) => out.push(tid),
                    Layout::V2(_) => {
                        if !out.contains(&pid) {
                            out.push(pid)
                        }
                    }
                }
            }
        }
    }
    out
}
