//! The running kernel behind `Host`: control files are written in one
//! write(2), scheduling calls go to the kernel, debugfs is read in a private
//! mount namespace.

use super::{io_err, task_err, Host, Kernel, Result};
use crate::sched;
use rtmgr_core::CpuSet;
use std::io::Write;
use std::path::Path;

#[derive(Debug)]
pub(super) struct RealKernel;

impl Kernel for RealKernel {
    fn read(&self, host: &Host, abs: &Path) -> Result<String> {
        let p = host.path(abs);
        std::fs::read_to_string(&p).map_err(|e| io_err("read", &p, e))
    }

    fn write(&self, host: &Host, abs: &Path, value: &str) -> Result<()> {
        let p = host.path(abs);
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .map_err(|e| io_err("open", &p, e))?;
        f.write_all(value.as_bytes())
            .map_err(|e| io_err("write", &p, e))
    }

    fn mkdir(&self, host: &Host, abs: &Path) -> Result<()> {
        let p = host.path(abs);
        std::fs::create_dir(&p).map_err(|e| io_err("mkdir", &p, e))
    }

    fn rmdir(&self, host: &Host, abs: &Path) -> Result<()> {
        let p = host.path(abs);
        std::fs::remove_dir(&p).map_err(|e| io_err("rmdir", &p, e))
    }

    fn get_affinity(&self, _host: &Host, tid: u32) -> Result<CpuSet> {
        sched::get_affinity(tid).map_err(|e| task_err("sched_getaffinity", tid, e))
    }

    fn set_affinity(&self, _host: &Host, tid: u32, cpus: &CpuSet) -> Result<()> {
        sched::set_affinity(tid, cpus).map_err(|e| task_err("sched_setaffinity", tid, e))
    }

    fn set_policy(&self, tid: u32, policy: sched::Policy) -> Result<()> {
        sched::set_policy(tid, policy).map_err(|e| task_err("sched_setattr", tid, e))
    }

    fn privileged(&self) -> bool {
        sched::is_root()
    }

    fn read_debugfs(&self, rel: &str) -> Result<String> {
        in_private_debugfs(rel, r#"cat "/sys/kernel/debug/$1""#, "")
    }

    fn write_debugfs(&self, rel: &str, value: &str) -> Result<()> {
        in_private_debugfs(rel, r#"printf '%s' "$2" > "/sys/kernel/debug/$1""#, value).map(|_| ())
    }

    fn probe_deadline(&self) -> Option<std::result::Result<(), String>> {
        Some(sched::deadline_available())
    }
}

/// Run `script` (with $1 = the debugfs file, $2 = `value`) where debugfs is
/// mounted in a private mount namespace, so nothing is mounted for others.
/// The shell's complaint is mapped back to the errno it names.
fn in_private_debugfs(rel: &str, script: &str, value: &str) -> Result<String> {
    let path = Path::new("/sys/kernel/debug").join(rel);
    let fail = |errno: i32| io_err("debugfs", &path, std::io::Error::from_raw_os_error(errno));
    if !sched::is_root() {
        return Err(fail(libc::EPERM));
    }
    let full = format!("mount -t debugfs none /sys/kernel/debug && {script}");
    let out = std::process::Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            &full,
            "sh",
        ])
        .args([rel, value])
        .output()
        .map_err(|e| io_err("unshare", &path, e))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let errno = [
        ("Operation not permitted", libc::EPERM),
        ("Permission denied", libc::EACCES),
        ("No such file", libc::ENOENT),
        ("Invalid argument", libc::EINVAL),
    ]
    .iter()
    .find(|(text, _)| err.contains(text))
    .map_or(libc::EIO, |(_, n)| *n);
    Err(fail(errno))
}
