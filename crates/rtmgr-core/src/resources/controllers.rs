//! Where a cgroup controller lives (memory, io/blkio) and its control files'
//! names under each version: cgroup v1 mounts one hierarchy per controller,
//! v2 one tree whose root lists the controllers it offers (DROPS §4.3–4.4
//! mapped onto today's memory and io controllers).

use std::path::PathBuf;

/// A controller's hierarchy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hierarchy {
    /// A v1 mount of this controller.
    V1(PathBuf),
    /// The v2 tree (it offers the controller).
    V2(PathBuf),
}

impl Hierarchy {
    pub fn mount(&self) -> &std::path::Path {
        match self {
            Hierarchy::V1(p) | Hierarchy::V2(p) => p,
        }
    }

    pub fn is_v2(&self) -> bool {
        matches!(self, Hierarchy::V2(_))
    }
}

/// The v1 mount of `v1_name` (e.g. "memory", "blkio"), else the v2 tree when
/// its root offers `v2_name` (e.g. "memory", "io"; `v2_controllers` is the
/// root's cgroup.controllers). A controller mounted on v1 is not on v2.
pub fn find(
    mountinfo: &str,
    v1_name: &str,
    v2_name: &str,
    v2_controllers: &str,
) -> Option<Hierarchy> {
    let mut v2 = None;
    for (mount_point, fstype, options) in mountinfo.lines().filter_map(crate::cgroupfs::mount_line)
    {
        match fstype {
            "cgroup" if options.split(',').any(|o| o == v1_name) => {
                return Some(Hierarchy::V1(mount_point.into()))
            }
            "cgroup2" if v2.is_none() => v2 = Some(PathBuf::from(mount_point)),
            _ => {}
        }
    }
    v2.filter(|_| v2_controllers.split_whitespace().any(|c| c == v2_name))
        .map(Hierarchy::V2)
}

/// The memory limit file of a hierarchy: (v2 high/max, v1 soft/hard).
pub fn memory_file(h: &Hierarchy, hard: bool) -> &'static str {
    match (h.is_v2(), hard) {
        (true, false) => "memory.high",
        (true, true) => "memory.max",
        (false, false) => "memory.soft_limit_in_bytes",
        (false, true) => "memory.limit_in_bytes",
    }
}

/// The I/O weight files to try, in order, and how a weight is written there.
pub fn io_weight_files(h: &Hierarchy) -> &'static [&'static str] {
    if h.is_v2() {
        &["io.weight", "io.bfq.weight"]
    } else {
        &["blkio.bfq.weight", "blkio.weight"]
    }
}

/// The value written to an I/O weight file: v2 `io.weight` takes "default N".
pub fn io_weight_value(file: &str, weight: u32) -> String {
    if file == "io.weight" {
        format!("default {weight}")
    } else {
        weight.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
        38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio\n\
        41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";

    #[test]
    fn v1_mounts_win_and_v2_needs_the_controller_offered() {
        let m = find(V1, "memory", "memory", "").unwrap();
        assert_eq!(m, Hierarchy::V1("/sys/fs/cgroup/memory".into()));
        assert_eq!(memory_file(&m, false), "memory.soft_limit_in_bytes");
        let v2only = "41 31 0:38 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(find(v2only, "blkio", "io", "cpuset memory"), None);
        let io = find(v2only, "blkio", "io", "cpuset io memory").unwrap();
        assert!(io.is_v2());
        assert_eq!(io_weight_files(&io)[0], "io.weight");
        assert_eq!(io_weight_value("io.weight", 50), "default 50");
        assert_eq!(io_weight_value("blkio.weight", 50), "50");
    }
}
