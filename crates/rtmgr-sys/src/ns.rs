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

/// Mount a tracefs at `target` (in the caller's mount namespace).
pub fn mount_tracefs(target: &Path) -> io::Result<()> {
    mount_kernel_fs("tracefs", target)
}

/// Mount a debugfs at `target` (in the caller's mount namespace).
pub fn mount_debugfs(target: &Path) -> io::Result<()> {
    mount_kernel_fs("debugfs", target)
}

/// Mount the kernel's pseudo-filesystem `fs` (no device) at `target`.
fn mount_kernel_fs(fs: &str, target: &Path) -> io::Result<()> {
    rustix::mount::mount(fs, target, fs, MountFlags::empty(), None)?;
    Ok(())
}

/// Unmount `target`.
pub fn unmount(target: &Path) -> io::Result<()> {
    rustix::mount::unmount(target, UnmountFlags::empty())?;
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
}
