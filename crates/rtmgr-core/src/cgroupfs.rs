//! What the kernel's cgroup files say, as text (ARTiS §2.1's partition on
//! cpusets; DROPS §4.1): which hierarchy holds the cpuset controller
//! (/proc/self/mountinfo), which cgroup a task is in (/proc/<tid>/cgroup),
//! and a cgroup's path as those files name it. Pure: text in, paths out.

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

/// The cgroup mounts of /proc/self/mountinfo (v2 controllers are filled in
/// by the caller from the v2 root's `cgroup.controllers`).
pub fn parse_mountinfo(text: &str) -> Mounts {
    let mut m = Mounts::default();
    for (mount_point, fstype, options) in text.lines().filter_map(mount_line) {
        match fstype {
            "cgroup" if options.split(',').any(|o| o == "cpuset") => {
                m.v1_cpuset
                    .get_or_insert_with(|| PathBuf::from(mount_point));
            }
            "cgroup2" if m.v2.is_none() => m.v2 = Some(PathBuf::from(mount_point)),
            _ => {}
        }
    }
    m
}

/// One /proc/self/mountinfo line: (mount point, file system type, super
/// options), or None when it has no " - " separator.
pub fn mount_line(line: &str) -> Option<(&str, &str, &str)> {
    let (left, right) = line.split_once(" - ")?;
    let mount_point = left.split_whitespace().nth(4).unwrap_or("");
    let mut r = right.split_whitespace();
    let fstype = r.next().unwrap_or("");
    let options = r.nth(1).unwrap_or("");
    Some((mount_point, fstype, options))
}

/// A cgroup2 mount of /proc/self/mountinfo: where, its per-mount options
/// (`rw,nosuid,relatime`: a remount must give them again or it drops them)
/// and its superblock options (`rw,nsdelegate,favordynmods`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cgroup2Mount {
    pub mount_point: PathBuf,
    pub mount_options: String,
    pub super_options: String,
}

impl Cgroup2Mount {
    /// Does its superblock carry `option` (e.g. "favordynmods")?
    pub fn has(&self, option: &str) -> bool {
        self.super_options.split(',').any(|o| o == option)
    }

    /// The data of a remount that keeps every cgroup2 option it has and adds
    /// (`on`) or drops `option`: the kernel sets each root flag from the
    /// options a remount gives, so one left out is cleared. `rw`/`ro` are the
    /// superblock's, given as flags, not data.
    pub fn remount_data(&self, option: &str, on: bool) -> String {
        let mut kept: Vec<&str> = self
            .super_options
            .split(',')
            .filter(|o| !o.is_empty() && !matches!(*o, "rw" | "ro") && *o != option)
            .collect();
        if on {
            kept.push(option);
        }
        kept.join(",")
    }
}

/// Every cgroup2 mount of a /proc/self/mountinfo text, in its order.
pub fn cgroup2_mounts(mountinfo: &str) -> Vec<Cgroup2Mount> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let (mount_point, fstype, super_options) = mount_line(line)?;
            let mount_options = line.split_whitespace().nth(5)?;
            (fstype == "cgroup2").then(|| Cgroup2Mount {
                mount_point: PathBuf::from(mount_point),
                mount_options: mount_options.to_string(),
                super_options: super_options.to_string(),
            })
        })
        .collect()
}

/// The cgroup (path relative to the mount) of the hierarchy `layout` names,
/// from the text of /proc/<tid>/cgroup.
pub fn task_cgroup(text: &str, layout: &Layout) -> Option<String> {
    for line in text.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        if is_layout_line(layout, controllers) {
            return Some(path.to_string());
        }
    }
    None
}

/// Does a /proc/<tid>/cgroup line with these controllers belong to `layout`'s
/// hierarchy (v1: the one with cpuset; v2: the unified one, no controllers)?
pub fn is_layout_line(layout: &Layout, controllers: &str) -> bool {
    match layout {
        Layout::V1(_) => controllers.split(',').any(|c| c == "cpuset"),
        Layout::V2(_) => controllers.is_empty(),
    }
}

/// A cgroup directory's path relative to the mount, as /proc/<tid>/cgroup names it.
pub fn rel_path(layout: &Layout, dir: &Path) -> String {
    let rel = dir.strip_prefix(layout.mount()).unwrap_or(dir);
    format!("/{}", rel.display()).replace("//", "/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup2_mounts_and_their_remount_data() {
        let mi = "30 25 0:26 / /sys/fs/cgroup/cpuset rw,relatime shared:9 - cgroup cgroup rw,cpuset\n\
                  35 25 0:31 / /sys/fs/cgroup/unified rw,nosuid,nodev,relatime shared:14 - cgroup2 cgroup2 rw,nsdelegate\n";
        let m = cgroup2_mounts(mi);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].mount_point, PathBuf::from("/sys/fs/cgroup/unified"));
        assert_eq!(m[0].mount_options, "rw,nosuid,nodev,relatime");
        assert!(m[0].has("nsdelegate") && !m[0].has("favordynmods"));
        assert_eq!(
            m[0].remount_data("favordynmods", true),
            "nsdelegate,favordynmods"
        );
        let on = Cgroup2Mount {
            super_options: "rw,favordynmods,nsdelegate".into(),
            ..m[0].clone()
        };
        assert_eq!(on.remount_data("favordynmods", false), "nsdelegate");
        assert_eq!(
            on.remount_data("favordynmods", true),
            "nsdelegate,favordynmods"
        );
        assert!(cgroup2_mounts("garbage\n").is_empty());
    }

    #[test]
    fn mountinfo_and_task_lines() {
        let m = parse_mountinfo(
            "30 25 0:26 / /sys/fs/cgroup/cpuset rw,relatime shared:9 - cgroup cgroup rw,cpuset\n\
             35 25 0:31 / /sys/fs/cgroup/unified rw,relatime shared:14 - cgroup2 cgroup2 rw\n",
        );
        let v1 = Layout::V1("/sys/fs/cgroup/cpuset".into());
        assert_eq!(m.layout(), Some(v1.clone()));
        assert_eq!(m.v2.as_deref(), Some(Path::new("/sys/fs/cgroup/unified")));
        let text = "12:cpuset:/rtmgr-rt\n0::/init.scope\n";
        assert_eq!(task_cgroup(text, &v1).as_deref(), Some("/rtmgr-rt"));
        let v2 = Layout::V2("/sys/fs/cgroup".into());
        assert_eq!(task_cgroup(text, &v2).as_deref(), Some("/init.scope"));
        assert_eq!(
            rel_path(&v1, Path::new("/sys/fs/cgroup/cpuset/rtmgr-rt")),
            "/rtmgr-rt"
        );
        assert_eq!(rel_path(&v1, Path::new("/sys/fs/cgroup/cpuset")), "/");
    }
}
