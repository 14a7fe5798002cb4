//! Issue 27 (root only): the daemon holds its own cgroup files open
//! (host/kept_files.rs). On the real cgroup tree, a thread moved through a
//! held `tasks` (or `cgroup.procs`) file is moved every time, a held CPU
//! list reads what the kernel says now, and a cgroup removed and made again
//! under the same path is written through a fresh descriptor.

mod common;

use common::Lab;
use rtmgr_core::cgroupfs::{rel_path, Layout};
use rtmgr_core::CpuSet;
use rtmgr_linux::{cgroup, Host};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

/// A `sleep` to move, killed when dropped (whatever the test did).
struct Sleeper(Child);

impl Drop for Sleeper {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A scratch cpuset under the RT cgroup, removed when dropped, its task
/// moved `back` first (also when the test fails inside it), so that the
/// partition's reset can remove its parent.
struct Scratch<'a> {
    host: &'a Host,
    layout: &'a Layout,
    dir: PathBuf,
    pid: u32,
    back: &'a Path,
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        let _ = cgroup::attach(self.host, self.layout, self.back, self.pid);
        let _ = self.host.rmdir(&self.dir);
    }
}

fn in_cgroup(host: &Host, layout: &Layout, pid: u32, dir: &Path) -> bool {
    cgroup::task_cgroup(host, layout, pid).as_deref() == Some(rel_path(layout, dir).as_str())
}

#[test]
fn held_cgroup_files_move_and_read_like_fresh_ones() {
    let Some(lab) = Lab::start() else {
        return;
    };
    let host = lab.host.clone();
    let layout = lab.applied.layout.clone();
    let rt = lab.applied.rt_cgroup.clone();
    let back = lab
        .applied
        .nrt_cgroup
        .clone()
        .unwrap_or_else(|| layout.mount().to_path_buf());
    host.keep_open_under([rt.clone(), back.clone()]);
    let sleeper = Sleeper(Command::new("sleep").arg("30").spawn().unwrap());
    let pid = sleeper.0.id();

    for round in 0..3 {
        cgroup::attach(&host, &layout, &rt, pid).unwrap();
        assert!(in_cgroup(&host, &layout, pid, &rt), "round {round}: in");
        cgroup::attach(&host, &layout, &back, pid).unwrap();
        assert!(in_cgroup(&host, &layout, pid, &back), "round {round}: back");
    }
    let rt_cpus = CpuSet::single(lab.rt_cpu);
    for _ in 0..2 {
        assert_eq!(
            cgroup::cpuset_cpus_of(&host, &layout, &rel_path(&layout, &rt)),
            Some(rt_cpus.clone())
        );
    }
    // A refused move is the kernel's answer, and the held file still works.
    let refused = cgroup::attach(&host, &layout, &rt, u32::MAX / 2).unwrap_err();
    assert!(refused.errno().is_some(), "{refused}");
    cgroup::attach(&host, &layout, &rt, pid).unwrap();
    cgroup::attach(&host, &layout, &back, pid).unwrap();

    if let Layout::V1(_) = layout {
        let mems = cgroup::root_mems(&host, &layout);
        let dir = rt.join("kept-files-test");
        for made in 0..2 {
            // Made again under the same path: the held file of the first
            // answers ENODEV and is opened again.
            cgroup::create(&host, &layout, &dir).unwrap();
            let scratch = Scratch {
                host: &host,
                layout: &layout,
                dir: dir.clone(),
                pid,
                back: &back,
            };
            cgroup::configure_v1(&host, &dir, &rt_cpus, &mems).unwrap();
            cgroup::attach(&host, &layout, &dir, pid).unwrap();
            assert!(in_cgroup(&host, &layout, pid, &dir), "made {made}: in");
            cgroup::attach(&host, &layout, &back, pid).unwrap();
            drop(scratch);
            assert!(!dir.exists(), "made {made}: removed");
        }
    } else {
        eprintln!("skip part: a cgroup made again (cgroup v1 only)");
    }
    drop(sleeper);
    lab.finish();
}
