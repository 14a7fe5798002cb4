//! Access to the machine through one root path: `/` on the real machine, a
//! temporary directory holding a fake sysfs/procfs/cgroup tree in tests. In a
//! fake tree the few kernel side effects rtmgr relies on (task affinity,
//! cgroup membership) are emulated in files, so the same code paths run.

use rtmgr_core::CpuSet;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("{op} {path}: {source}")]
    Io {
        op: &'static str,
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Parse { path: String, msg: String },
}

impl HostError {
    pub fn errno(&self) -> Option<i32> {
        match self {
            HostError::Io { source, .. } => source.raw_os_error(),
            HostError::Parse { .. } => None,
        }
    }

    /// True when the object (file, task, IRQ) vanished.
    pub fn is_gone(&self) -> bool {
        matches!(self, HostError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound || source.raw_os_error() == Some(libc::ESRCH))
    }
}

pub type Result<T> = std::result::Result<T, HostError>;

#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
    fake: bool,
}

impl Host {
    /// The running machine.
    pub fn real() -> Self {
        Host {
            root: PathBuf::from("/"),
            fake: false,
        }
    }

    /// A fake tree under `root` (tests). Affinity and cgroup moves are emulated.
    pub fn fake(root: impl Into<PathBuf>) -> Self {
        Host {
            root: root.into(),
            fake: true,
        }
    }

    pub fn is_fake(&self) -> bool {
        self.fake
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Map an absolute machine path to where it lives under this host's root.
    pub fn path(&self, abs: impl AsRef<Path>) -> PathBuf {
        let abs = abs.as_ref();
        self.root.join(abs.strip_prefix("/").unwrap_or(abs))
    }

    /// The inverse of `path`: a path under the root, as the machine names it.
    pub fn machine_path(&self, p: &Path) -> PathBuf {
        match p.strip_prefix(&self.root) {
            Ok(rel) => Path::new("/").join(rel),
            Err(_) => p.to_path_buf(),
        }
    }

    pub fn exists(&self, abs: impl AsRef<Path>) -> bool {
        self.path(abs).exists()
    }

    pub fn read(&self, abs: impl AsRef<Path>) -> Result<String> {
        let p = self.path(abs.as_ref());
        std::fs::read_to_string(&p).map_err(|e| io_err("read", &p, e))
    }

    /// Read, or None when the file is absent or unreadable.
    pub fn read_opt(&self, abs: impl AsRef<Path>) -> Option<String> {
        std::fs::read_to_string(self.path(abs)).ok()
    }

    /// Write a control file in a single write(2), as sysfs and cgroupfs expect.
    pub fn write(&self, abs: impl AsRef<Path>, value: &str) -> Result<()> {
        let p = self.path(abs.as_ref());
        if self.fake && p.ends_with("cgroup.subtree_control") {
            return self.fake_subtree_control(abs.as_ref(), value);
        }
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true);
        if self.fake {
            opts.create(true).truncate(true);
        }
        let mut f = opts.open(&p).map_err(|e| io_err("open", &p, e))?;
        f.write_all(value.as_bytes())
            .map_err(|e| io_err("write", &p, e))
    }

    /// cgroup.subtree_control takes "+ctl"/"-ctl" tokens and shows the result.
    fn fake_subtree_control(&self, abs: &Path, value: &str) -> Result<()> {
        let mut enabled: Vec<String> = self
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
        let p = self.path(abs);
        std::fs::write(&p, enabled.join(" ") + "\n").map_err(|e| io_err("write", &p, e))
    }

    pub fn list_dir(&self, abs: impl AsRef<Path>) -> Result<Vec<String>> {
        let p = self.path(abs.as_ref());
        let mut names: Vec<String> = std::fs::read_dir(&p)
            .map_err(|e| io_err("list", &p, e))?
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        Ok(names)
    }

    pub fn mkdir(&self, abs: impl AsRef<Path>) -> Result<()> {
        let p = self.path(abs.as_ref());
        std::fs::create_dir(&p).map_err(|e| io_err("mkdir", &p, e))
    }

    /// Remove a cgroup directory. In a fake tree the emulated control files go too.
    pub fn rmdir(&self, abs: impl AsRef<Path>) -> Result<()> {
        let p = self.path(abs.as_ref());
        let r = if self.fake {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_dir(&p)
        };
        r.map_err(|e| io_err("rmdir", &p, e))
    }

    /// The CPUs a task (thread id) may run on.
    pub fn get_affinity(&self, tid: u32) -> Result<CpuSet> {
        if self.fake {
            return fake_status_cpus(self, tid);
        }
        crate::sched::get_affinity(tid)
            .map_err(|e| io_err("sched_getaffinity", Path::new(&format!("task {tid}")), e))
    }

    pub fn set_affinity(&self, tid: u32, cpus: &CpuSet) -> Result<()> {
        if self.fake {
            return fake_set_status_cpus(self, tid, cpus);
        }
        crate::sched::set_affinity(tid, cpus)
            .map_err(|e| io_err("sched_setaffinity", Path::new(&format!("task {tid}")), e))
    }

    /// Set a thread's scheduling policy. A fake tree has no scheduler: the
    /// call is accepted and changes nothing.
    pub fn set_policy(&self, tid: u32, policy: crate::sched::Policy) -> Result<()> {
        if self.fake {
            return Ok(());
        }
        crate::sched::set_policy(tid, policy)
            .map_err(|e| io_err("sched_setattr", Path::new(&format!("task {tid}")), e))
    }

    pub fn parse_err(&self, abs: impl AsRef<Path>, msg: impl Into<String>) -> HostError {
        HostError::Parse {
            path: abs.as_ref().display().to_string(),
            msg: msg.into(),
        }
    }
}

fn io_err(op: &'static str, p: &Path, source: std::io::Error) -> HostError {
    HostError::Io {
        op,
        path: p.display().to_string(),
        source,
    }
}

fn status_path(tid: u32) -> String {
    format!("/proc/{tid}/status")
}

fn fake_status_cpus(host: &Host, tid: u32) -> Result<CpuSet> {
    let status = host.read(status_path(tid))?;
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .ok_or_else(|| host.parse_err(status_path(tid), "no Cpus_allowed_list"))?;
    CpuSet::parse_list(line).map_err(|e| host.parse_err(status_path(tid), e.to_string()))
}

fn fake_set_status_cpus(host: &Host, tid: u32, cpus: &CpuSet) -> Result<()> {
    let status = host.read(status_path(tid))?;
    if status.contains("rtmgr_fake_no_setaffinity") {
        return Err(io_err(
            "sched_setaffinity",
            Path::new(&format!("task {tid}")),
            std::io::Error::from_raw_os_error(libc::EINVAL),
        ));
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
    host.write(status_path(tid), &out)
}
