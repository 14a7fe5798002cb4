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

    fn get_policy(&self, tid: u32) -> Result<sched::Policy> {
        sched::get_policy(tid).map_err(|e| task_err("sched_getattr", tid, e))
    }

    fn set_policy(&self, tid: u32, policy: sched::Policy) -> Result<()> {
        sched::set_policy(tid, policy).map_err(|e| task_err("sched_setattr", tid, e))
    }

    fn privileged(&self) -> bool {
        sched::is_root()
    }

    fn read_debugfs(&self, rel: &str) -> Option<String> {
        if !sched::is_root() {
            return None;
        }
        let script = format!(
            "mount -t debugfs none /sys/kernel/debug 2>/dev/null && cat /sys/kernel/debug/{rel}"
        );
        let out = std::process::Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c", &script])
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    }

    fn probe_deadline(&self) -> Option<std::result::Result<(), String>> {
        Some(sched::deadline_available())
    }
}
