//! cpusets on cgroup v1 and v2: finding where the cpuset controller is,
//! creating rtmgr's RT and NRT sets, moving tasks. ARTiS §2.1's CPU partition
//! done with cpusets instead of a kernel patch (DROPS §4.1: the resource
//! manager owns the CPUs). On v2 the RT set is an `isolated` (or `root`)
//! partition, which takes its CPUs away from every other cgroup by itself.

use crate::host::{Host, HostError, Result};
use rtmgr_core::CpuSet;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "version", content = "mount")]
pub enum Layout {
    /// cgroup v1 with the cpuset controller mounted here.
    V1(PathBuf),
    /// cgroup v2 (unified) with the cpuset controller available at its root.
    V2(PathBuf),
}

impl Layout {
    pub fn mount(&self) -> &Path {
        match self {
            Layout::V1(p) | Layout::V2(p) => p,
        }
    }
    pub fn name(&self) -> &'static str {
        match self {
            Layout::V1(_) => "v1",
            Layout::V2(_) => "v2",
        }
    }
    /// A cgroup directory (machine path) from a path relative to the mount.
    pub fn dir(&self, rel: &str) -> PathBuf {
        self.mount().join(rel.trim_start_matches('/'))
    }
}

/// All cgroup mounts seen, for `status`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Mounts {
    pub v1_cpuset: Option<PathBuf>,
    pub v2: Option<PathBuf>,
    pub v2_controllers: Vec<String>,
}

impl Mounts {
    /// Where rtmgr will create its cpusets: v1 cpuset if mounted (then the
    /// controller cannot be on v2), else v2 if its root offers cpuset.
    pub fn layout(&self) -> Option<Layout> {
        if let Some(p) = &self.v1_cpuset {
            return Some(Layout::V1(p.clone()));
        }
        match &self.v2 {
            Some(p) if self.v2_controllers.iter().any(|c| c == "cpuset") => {
                Some(Layout::V2(p.clone()))
            }
            _ => None,
        }
    }
}

/// Read /proc/self/mountinfo for cgroup mounts.
pub fn mounts(host: &Host) -> Result<Mounts> {
    let text = host.read("/proc/self/mountinfo")?;
    let mut m = Mounts::default();
    for line in text.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        let mount_point = left.split_whitespace().nth(4).unwrap_or("");
        let mut r = right.split_whitespace();
        let fstype = r.next().unwrap_or("");
        let options = r.nth(1).unwrap_or("");
        match fstype {
            "cgroup" if options.split(',').any(|o| o == "cpuset") => {
                m.v1_cpuset
                    .get_or_insert_with(|| PathBuf::from(mount_point));
            }
            "cgroup2" if m.v2.is_none() => m.v2 = Some(PathBuf::from(mount_point)),
            _ => {}
        }
    }
    if let Some(v2) = &m.v2 {
        m.v2_controllers = host
            .read_opt(v2.join("cgroup.controllers"))
            .map(|t| t.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default();
    }
    Ok(m)
}

/// The cgroup (path relative to the mount) a task is in, for this layout.
pub fn task_cgroup(host: &Host, layout: &Layout, tid: u32) -> Option<String> {
    let text = host.read_opt(format!("/proc/{tid}/cgroup"))?;
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let hit = match layout {
            Layout::V1(_) => controllers.split(',').any(|c| c == "cpuset"),
            Layout::V2(_) => controllers.is_empty(),
        };
        if hit {
            return Some(path.to_string());
        }
    }
    None
}

fn file(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// Create a cpuset directory (machine path); the kernel adds its control files.
pub fn create(host: &Host, _layout: &Layout, dir: &Path) -> Result<()> {
    host.mkdir(dir)
}

/// Set a v1 cpuset's CPUs and memory nodes (both are needed before tasks can join).
pub fn configure_v1(host: &Host, dir: &Path, cpus: &CpuSet, mems: &str) -> Result<()> {
    host.write(file(dir, "cpuset.cpus"), &cpus.to_list())?;
    host.write(file(dir, "cpuset.mems"), mems)
}

/// The memory nodes of the cpuset root.
pub fn root_mems(host: &Host, layout: &Layout) -> String {
    let name = match layout {
        Layout::V1(_) => "cpuset.mems",
        Layout::V2(_) => "cpuset.mems.effective",
    };
    host.read_opt(layout.mount().join(name))
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "0".into())
}

/// Result of turning a v2 cgroup into a partition root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub requested: &'static str,
    /// What cpuset.cpus.partition reads back, e.g. "isolated" or "root invalid (…)".
    pub actual: String,
}

impl PartitionState {
    pub fn valid(&self) -> bool {
        !self.actual.contains("invalid")
    }
}

/// Configure a v2 cgroup as an RT partition: CPUs, exclusive CPUs where the
/// kernel has them, then `isolated` (no load balancing, kernel ≥ 6.2) or `root`.
pub fn configure_v2_partition(
    host: &Host,
    dir: &Path,
    cpus: &CpuSet,
) -> Result<Option<PartitionState>> {
    host.write(file(dir, "cpuset.cpus"), &cpus.to_list())?;
    if host.exists(file(dir, "cpuset.cpus.exclusive")) {
        // Older kernels have no such file; failure here only costs exclusivity.
        let _ = host.write(file(dir, "cpuset.cpus.exclusive"), &cpus.to_list());
    }
    let part = file(dir, "cpuset.cpus.partition");
    if !host.exists(&part) {
        return Ok(None);
    }
    for mode in ["isolated", "root"] {
        if host.write(&part, mode).is_ok() {
            let actual = host.read(&part)?.trim().to_string();
            let state = PartitionState {
                requested: mode,
                actual,
            };
            if state.valid() {
                return Ok(Some(state));
            }
        }
    }
    let actual = host.read(&part)?.trim().to_string();
    Ok(Some(PartitionState {
        requested: "root",
        actual,
    }))
}

/// Move one thread (v1: `tasks`) or one whole process (v2: `cgroup.procs`).
pub fn attach(host: &Host, layout: &Layout, dir: &Path, id: u32) -> Result<()> {
    let name = match layout {
        Layout::V1(_) => "tasks",
        Layout::V2(_) => "cgroup.procs",
    };
    host.write(file(dir, name), &id.to_string())
}

/// Thread ids (v1) or process ids (v2) in a cgroup.
pub fn members(host: &Host, layout: &Layout, dir: &Path) -> Vec<u32> {
    let name = match layout {
        Layout::V1(_) => "tasks",
        Layout::V2(_) => "cgroup.procs",
    };
    host.read_opt(file(dir, name))
        .map(|t| t.lines().filter_map(|l| l.trim().parse().ok()).collect())
        .unwrap_or_default()
}

/// A cgroup directory's path relative to the mount, as /proc/<tid>/cgroup names it.
pub fn rel_path(layout: &Layout, dir: &Path) -> String {
    let rel = dir.strip_prefix(layout.mount()).unwrap_or(dir);
    format!("/{}", rel.display()).replace("//", "/")
}

/// Is this error the kernel refusing to move a per-CPU kernel thread?
pub fn is_refused(e: &HostError) -> bool {
    matches!(
        e.errno(),
        Some(libc::EINVAL) | Some(libc::EPERM) | Some(libc::EBUSY)
    )
}
