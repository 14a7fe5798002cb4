//! Mounts only one thread sees (McKenney §2.1's measurements without changing
//! the machine for others): the calling thread gets its own mount namespace
//! in which every mount is private, so a filesystem it mounts there (tracefs
//! for rtmgr's tracer, debugfs for the preemption model) is invisible to every other process and goes away
//! with the thread. Descriptors opened there stay usable by every thread.

use rustix::mount::{MountFlags, MountPropagationFlags, UnmountFlags};
use rustix::thread::UnshareFlags;
use std::io;
use std::path::Path;

/// Give the calling thread its own mount namespace with private propagation.
pub fn private_mounts_for_this_thread() -> io::Result<()> {
    // SAFETY: only the mount namespace and the fs attributes (root, cwd,
    // umask) are unshared, not the descriptor table (UnshareFlags::FILES):
    // every thread keeps seeing every descriptor, which is what makes the
    // unsafe variant unsafe.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWNS | UnshareFlags::FS) }?;
    rustix::mount::mount_change(
        "/",
        MountPropagationFlags::PRIVATE | MountPropagationFlags::REC,
    )?;
    Ok(())
}

/// The filesystem magic numbers of `statfs` (linux/magic.h).
const TRACEFS_MAGIC: u64 = 0x7472_6163;
const DEBUGFS_MAGIC: u64 = 0x6462_6720;

/// Mount a tracefs at `target` (in the caller's mount namespace), or use the
/// one already there (systemd mounts /sys/kernel/tracing on most machines).
pub fn mount_tracefs(target: &Path) -> io::Result<()> {
    mount_kernel_fs("tracefs", target, TRACEFS_MAGIC)
}

/// Mount a debugfs at `target` (in the caller's mount namespace), or use the
/// one already there.
pub fn mount_debugfs(target: &Path) -> io::Result<()> {
    mount_kernel_fs("debugfs", target, DEBUGFS_MAGIC)
}

/// Mount the kernel's pseudo-filesystem `fs` (no device) at `target`. The
/// kernel refuses a second mount of the same filesystem on the same place
/// with EBUSY: then the one there (copied into a private namespace with the
/// others) serves, and nothing new is mounted.
fn mount_kernel_fs(fs: &str, target: &Path, magic: u64) -> io::Result<()> {
    match rustix::mount::mount(fs, target, fs, MountFlags::empty(), None) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::BUSY) if is_fs(target, magic) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Is `target` the root of a filesystem with this magic number?
fn is_fs(target: &Path, magic: u64) -> bool {
    rustix::fs::statfs(target).is_ok_and(|s| s.f_type as u64 == magic)
}

/// Unmount `target`.
pub fn unmount(target: &Path) -> io::Result<()> {
    rustix::mount::unmount(target, UnmountFlags::empty())?;
    Ok(())
}

/// Remount the filesystem at `target` with superblock options `data`,
/// keeping its per-mount options (`mount_options`, as /proc/self/mountinfo
/// shows them: a legacy remount sets the mount's flags to those given, so
/// `nosuid,nodev,noexec` left out would be dropped).
pub fn remount(target: &Path, mount_options: &str, data: &str) -> io::Result<()> {
    let mut flags = MountFlags::empty();
    for o in mount_options.split(',') {
        flags |= match o {
            "ro" => MountFlags::RDONLY,
            "nosuid" => MountFlags::NOSUID,
            "nodev" => MountFlags::NODEV,
            "noexec" => MountFlags::NOEXEC,
            "noatime" => MountFlags::NOATIME,
            "nodiratime" => MountFlags::NODIRATIME,
            "relatime" => MountFlags::RELATIME,
            "strictatime" => MountFlags::STRICTATIME,
            "sync" => MountFlags::SYNCHRONOUS,
            _ => MountFlags::empty(),
        };
    }
    rustix::mount::mount_remount(target, flags, data)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_private_tracefs_is_seen_by_this_thread_only() {
        if !crate::process::is_root() {
            eprintln!("skip: mounting needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().to_path_buf();
        let t = target.clone();
        let inside = std::thread::spawn(move || {
            private_mounts_for_this_thread().unwrap();
            mount_tracefs(&t).unwrap();
            t.join("trace_clock").exists()
        })
        .join()
        .unwrap();
        assert!(inside, "tracefs mounted in the thread");
        assert!(
            !target.join("trace_clock").exists(),
            "not visible outside the thread"
        );
    }

    /// A tracefs or debugfs already mounted there (as systemd mounts
    /// /sys/kernel/tracing) serves: the kernel's EBUSY is not an error.
    /// Another filesystem's EBUSY still is.
    #[test]
    fn a_kernel_fs_already_mounted_there_serves() {
        if !crate::process::is_root() {
            eprintln!("skip: mounting needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().to_path_buf();
        let (twice, debug_twice) = std::thread::spawn(move || {
            private_mounts_for_this_thread().unwrap();
            let (a, b) = (t.join("a"), t.join("b"));
            std::fs::create_dir_all(&a).unwrap();
            std::fs::create_dir_all(&b).unwrap();
            mount_tracefs(&a).unwrap();
            let twice = mount_tracefs(&a).map(|()| a.join("trace_clock").exists());
            mount_debugfs(&b).unwrap();
            (twice, mount_debugfs(&b))
        })
        .join()
        .unwrap();
        assert!(twice.unwrap(), "the tracefs already there serves");
        assert!(debug_twice.is_ok(), "{debug_twice:?}");
        assert!(!is_fs(dir.path(), TRACEFS_MAGIC));
    }
}
