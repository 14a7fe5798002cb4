//! Access to the machine through one root path and one kernel backend: `/`
//! and the running kernel on the real machine; a temporary directory holding
//! a fake sysfs/procfs/cgroup tree, and a fake kernel that emulates the side
//! effects rtmgr relies on (task affinity, cgroup membership, IRQ masks), in
//! tests (feature `fake`). Production code never asks which one it has.

#[cfg(any(test, feature = "fake"))]
mod fake;
mod kept_files;
mod read;
mod real;
mod task_handles;
#[cfg(test)]
pub(crate) use fake::{ATTR_SETS, HOLD_AFFINITY};
pub(crate) use read::{read_file, read_whole};

use rtmgr_core::CpuSet;
pub use rtmgr_sys::process::{Limit, LimitKind};
/// An open file a Host handed out (`open_nonblocking`): read it directly.
pub use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

    /// What the kernel said, for people: "Operation not permitted" (the
    /// errno's text without its number), or the whole error.
    pub fn reason(&self) -> String {
        match self.errno() {
            Some(n) => {
                let text = std::io::Error::from_raw_os_error(n).to_string();
                text.split(" (os error").next().unwrap_or(&text).to_string()
            }
            None => self.to_string(),
        }
    }

    /// The error as an I/O error (a parse error becomes `ErrorKind::Other`),
    /// for callers whose errors carry one.
    pub fn into_io(self) -> std::io::Error {
        match self {
            HostError::Io { source, .. } => source,
            HostError::Parse { path, msg } => std::io::Error::other(format!("{path}: {msg}")),
        }
    }

    /// True when the object (file, task, IRQ) vanished.
    pub fn is_gone(&self) -> bool {
        matches!(self, HostError::Io { source, .. }
            if source.kind() == std::io::ErrorKind::NotFound || source.raw_os_error() == Some(libc::ESRCH))
    }
}

pub type Result<T> = std::result::Result<T, HostError>;

/// In a fake tree: this file in an IRQ's /proc directory makes it kernel-managed.
#[cfg(any(test, feature = "fake"))]
pub(crate) const FAKE_IRQ_MANAGED: &str = "rtmgr_fake_managed";
/// In a fake tree: this file (an errno) makes the SCHED_FIFO probe fail with it.
#[cfg(any(test, feature = "fake"))]
pub(crate) const FAKE_FIFO_ERRNO: &str = "/proc/self/rtmgr_fake_fifo_errno";
/// A fake tree's scheduler clock offset (ns), 0 when absent.
#[cfg(any(test, feature = "fake"))]
pub(crate) const FAKE_SCHED_CLOCK_OFFSET: &str = "/proc/self/rtmgr_fake_sched_clock_offset";
/// In a fake tree: this file ("ERRNO CPU-LIST") makes the kernel refuse
/// SCHED_DEADLINE with ERRNO to a thread waiting on a run queue of those
/// CPUs (stat field 39), as the real one does where the root domain does
/// not admit it.
#[cfg(any(test, feature = "fake"))]
pub(crate) const FAKE_DL_REFUSED: &str = "/proc/self/rtmgr_fake_dl_refused";
/// In a fake tree: this file makes debugfs refuse reads and writes (EPERM).
#[cfg(any(test, feature = "fake"))]
pub(crate) const FAKE_DEBUGFS_LOCKED: &str = "/sys/kernel/debug/.rtmgr_fake_locked";

/// What the kernel does when rtmgr talks to it. Paths are machine paths
/// (absolute, as the machine names them); `host` maps them to files.
pub(crate) trait Kernel: Send + Sync + std::fmt::Debug {
    /// Read a control file (the fake computes cgroup membership lists).
    fn read(&self, host: &Host, abs: &Path) -> Result<String>;
    /// Write a control file in a single write(2) (the fake emulates what the
    /// kernel does when it sees the write).
    fn write(&self, host: &Host, abs: &Path, value: &str) -> Result<()>;
    /// Create a directory (a cgroup: the kernel adds its control files).
    fn mkdir(&self, host: &Host, abs: &Path) -> Result<()>;
    /// Remove a cgroup directory.
    fn rmdir(&self, host: &Host, abs: &Path) -> Result<()>;
    fn get_affinity(&self, host: &Host, tid: u32) -> Result<CpuSet>;
    fn set_affinity(&self, host: &Host, tid: u32, cpus: &CpuSet) -> Result<()>;
    fn get_policy(&self, host: &Host, tid: u32) -> Result<crate::sched::Policy>;
    fn set_policy(&self, host: &Host, tid: u32, policy: crate::sched::Policy) -> Result<()>;
    /// A thread's full scheduling attributes (sched_getattr / sched_setattr).
    fn get_attr(&self, host: &Host, tid: u32) -> Result<rtmgr_sys::sched::SchedAttr>;
    fn set_attr(&self, host: &Host, tid: u32, attr: &rtmgr_sys::sched::SchedAttr) -> Result<()>;
    /// A process's resource limit (prlimit).
    fn get_limit(&self, host: &Host, pid: u32, kind: LimitKind) -> Result<Limit>;
    fn set_limit(&self, host: &Host, pid: u32, kind: LimitKind, limit: Limit) -> Result<()>;
    /// A thread's raw I/O priority (ioprio_get / ioprio_set).
    fn get_ioprio(&self, host: &Host, tid: u32) -> Result<u16>;
    fn set_ioprio(&self, host: &Host, tid: u32, raw: u16) -> Result<()>;
    /// May this process change the machine (root)?
    fn privileged(&self) -> bool;
    /// A debugfs file read in a private mount namespace (debugfs is never
    /// mounted for others).
    fn read_debugfs(&self, rel: &str) -> Result<String>;
    /// A debugfs file opened the same way: the descriptor stays readable
    /// after the private mount is gone (e.g. to read `sched/debug` often).
    fn open_debugfs(&self, rel: &str) -> Result<std::fs::File>;
    /// A debugfs file written the same way.
    fn write_debugfs(&self, rel: &str, value: &str) -> Result<()>;
    /// Remount the filesystem at `target` with superblock options `data`,
    /// keeping its per-mount options (the fake rewrites its mountinfo line).
    fn remount(&self, host: &Host, target: &Path, mount_options: &str, data: &str) -> Result<()>;
    /// Can a thread take SCHED_DEADLINE? None when it cannot be tried here.
    fn probe_deadline(&self) -> Option<std::result::Result<(), String>>;
    /// Can a thread take SCHED_FIFO? The errno when not; None when it
    /// cannot be tried here.
    fn probe_fifo(&self, host: &Host) -> Option<std::result::Result<(), i32>>;
    /// The scheduler's clock minus CLOCK_MONOTONIC, ns, or why unknown.
    fn sched_clock_offset(&self, host: &Host) -> std::result::Result<i64, String>;
    /// A handle on thread `tid` that sees it exit (a thread pidfd); None
    /// where there is none (a fake tree, a kernel before 6.9).
    fn task_handle(&self, tid: u32) -> Option<rtmgr_sys::pidfd::Pidfd>;
}

#[derive(Debug, Clone)]
pub struct Host {
    root: PathBuf,
    kernel: Arc<dyn Kernel>,
    /// Granted threads, held (`tasks::same_task`).
    handles: Arc<task_handles::TaskHandles>,
    /// The possible CPUs, read once (they do not change while the machine
    /// runs; a release reads them to give a thread its affinity back).
    possible_cpus: Arc<std::sync::OnceLock<rtmgr_core::CpuSet>>,
    /// The kernel's build configuration, read (and decompressed) once.
    kernel_config: Arc<std::sync::OnceLock<Option<Arc<str>>>>,
    /// The daemon's own cgroup files, held open (`keep_open_under`); None
    /// in a fake tree, whose kernel emulates each write.
    kept: Option<Arc<kept_files::KeptFiles>>,
}

impl Host {
    /// The running machine.
    pub fn real() -> Self {
        Host {
            root: PathBuf::from("/"),
            kernel: Arc::new(real::RealKernel),
            handles: Arc::default(),
            possible_cpus: Arc::default(),
            kernel_config: Arc::default(),
            kept: Some(Arc::default()),
        }
    }

    /// A fake tree under `root` (tests). Affinity and cgroup moves are emulated.
    #[cfg(any(test, feature = "fake"))]
    pub fn fake(root: impl Into<PathBuf>) -> Self {
        Host {
            root: root.into(),
            kernel: Arc::new(fake::FakeKernel),
            handles: Arc::default(),
            possible_cpus: Arc::default(),
            kernel_config: Arc::default(),
            kept: None,
        }
    }

    /// The machine named by the environment: the real one, or with the `fake`
    /// feature a fake tree at RTMGR_SYSROOT (tests; then root is not required).
    /// A build without the feature refuses RTMGR_SYSROOT rather than change the
    /// real machine in its place.
    pub fn from_env() -> std::result::Result<Self, String> {
        match std::env::var_os("RTMGR_SYSROOT") {
            None => Ok(Host::real()),
            #[cfg(any(test, feature = "fake"))]
            Some(root) => Ok(Host::fake(root)),
            #[cfg(not(any(test, feature = "fake")))]
            Some(_) => Err(
                "RTMGR_SYSROOT is set, but this rtmgr was built without the `fake` feature (a test-only fake machine): unset it".into(),
            ),
        }
    }

    /// The possible CPUs as `read` gives them the first time (`cpus::possible`).
    pub fn possible_cpus(
        &self,
        read: impl FnOnce() -> Result<rtmgr_core::CpuSet>,
    ) -> Result<rtmgr_core::CpuSet> {
        if let Some(set) = self.possible_cpus.get() {
            return Ok(set.clone());
        }
        let set = read()?;
        Ok(self.possible_cpus.get_or_init(|| set).clone())
    }

    /// The kernel's build configuration as `read` gives it the first time
    /// (`status::kernel_config`: several status items ask for it).
    pub fn kernel_config(&self, read: impl FnOnce() -> Option<String>) -> Option<Arc<str>> {
        self.kernel_config
            .get_or_init(|| read().map(Arc::from))
            .clone()
    }

    /// Is the thread known as (tid, start time) alive, by a handle held from
    /// its grant's check (`hold_task`)? False means "not known": read /proc.
    pub fn held_task_alive(&self, tid: u32, start_time: u64) -> bool {
        self.handles.alive(tid, start_time)
    }

    /// A handle on thread `tid`, to take before its start time is read.
    pub fn task_handle(&self, tid: u32) -> Option<rtmgr_sys::pidfd::Pidfd> {
        self.kernel.task_handle(tid)
    }

    /// Hold `handle`, taken before (tid, start time) matched in /proc.
    pub fn hold_task(&self, tid: u32, start_time: u64, handle: rtmgr_sys::pidfd::Pidfd) {
        self.handles.keep(tid, start_time, handle);
    }

    /// Close the held handles of the threads `keep(tid, start time)` refuses.
    pub fn keep_task_handles(&self, keep: impl Fn(u32, u64) -> bool) {
        self.handles.retain(keep);
    }

    /// May this process change the machine? Root on the real machine; always in a fake tree.
    pub fn privileged(&self) -> bool {
        self.kernel.privileged()
    }

    /// A thread's scheduling attributes (a fake tree: what was set, else SCHED_OTHER, nice 0).
    pub fn get_attr(&self, tid: u32) -> Result<rtmgr_sys::sched::SchedAttr> {
        self.kernel.get_attr(self, tid)
    }

    /// Set a thread's scheduling attributes, flags included (a fake tree: kept beside the task).
    pub fn set_attr(&self, tid: u32, attr: &rtmgr_sys::sched::SchedAttr) -> Result<()> {
        self.kernel.set_attr(self, tid, attr)
    }

    /// A process's resource limit (a fake tree: what was set, else unlimited).
    pub fn get_limit(&self, pid: u32, kind: LimitKind) -> Result<Limit> {
        self.kernel.get_limit(self, pid, kind)
    }

    /// Set a process's resource limit (a fake tree: kept beside the process).
    pub fn set_limit(&self, pid: u32, kind: LimitKind, limit: Limit) -> Result<()> {
        self.kernel.set_limit(self, pid, kind, limit)
    }

    /// A thread's raw I/O priority (a fake tree: kept in `/proc/<tid>/.rtmgr_ioprio`).
    pub fn get_ioprio(&self, tid: u32) -> Result<u16> {
        self.kernel.get_ioprio(self, tid)
    }

    /// Set a thread's raw I/O priority.
    pub fn set_ioprio(&self, tid: u32, raw: u16) -> Result<()> {
        self.kernel.set_ioprio(self, tid, raw)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Map an absolute machine path to where it lives under this host's root.
    pub fn path(&self, abs: impl AsRef<Path>) -> PathBuf {
        let abs = abs.as_ref();
        self.root.join(abs.strip_prefix("/").unwrap_or(abs))
    }

    pub fn exists(&self, abs: impl AsRef<Path>) -> bool {
        self.path(abs).exists()
    }

    pub fn read(&self, abs: impl AsRef<Path>) -> Result<String> {
        let abs = abs.as_ref();
        let real = self.path(abs);
        let held = self.handles.read(abs, &real);
        // A held thread's file, or one of the daemon's cgroup files.
        match held.or_else(|| self.kept.as_ref()?.read(&real)) {
            Some(text) => text
                .and_then(read::into_text)
                .map_err(|e| io_err("read", &real, e)),
            None => self.kernel.read(self, abs),
        }
    }

    /// Hold the control files under these cgroup directories open once
    /// used (the daemon's own: its grants move threads in and out and read
    /// their CPUs at every request), and no others; a fake tree holds none.
    pub fn keep_open_under(&self, dirs: impl IntoIterator<Item = PathBuf>) {
        if let Some(kept) = &self.kept {
            kept.keep_under(dirs.into_iter().map(|d| self.path(d)));
        }
    }

    /// Is a handle held on the thread that is `tid` now (`hold_task`)?
    pub fn holding_task(&self, tid: u32) -> bool {
        self.handles.holding(tid)
    }

    /// Read, or None when the file is absent or unreadable.
    pub fn read_opt(&self, abs: impl AsRef<Path>) -> Option<String> {
        self.read(abs).ok()
    }

    /// Write a control file in a single write(2), as sysfs and cgroupfs expect.
    pub fn write(&self, abs: impl AsRef<Path>, value: &str) -> Result<()> {
        let abs = abs.as_ref();
        let real = self.path(abs);
        match self.kept.as_ref().and_then(|k| k.write(&real, value)) {
            Some(done) => done.map_err(|e| io_err("write", &real, e)),
            None => self.kernel.write(self, abs, value),
        }
    }

    /// Write a file opened with O_TRUNC, in one write(2): tracefs lists such
    /// as `set_event_pid` are then replaced, not appended to.
    pub fn write_truncating(&self, abs: impl AsRef<Path>, value: &str) -> Result<()> {
        let p = self.path(abs);
        std::fs::write(&p, value).map_err(|e| io_err("write", &p, e))
    }

    /// Read a file in one large read(2): some tracefs files
    /// (`events/header_page`) answer only the first read of an open file, so
    /// a small first read would truncate them.
    pub fn read_in_one(&self, abs: impl AsRef<Path>) -> Result<String> {
        let p = self.path(abs);
        let mut f = std::fs::File::open(&p).map_err(|e| io_err("open", &p, e))?;
        let buf = read_whole(&mut f, 1 << 16).map_err(|e| io_err("read", &p, e))?;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Open a file for non-blocking reads (tracefs `trace_pipe_raw`).
    pub fn open_nonblocking(&self, abs: impl AsRef<Path>) -> Result<std::fs::File> {
        use std::os::unix::fs::OpenOptionsExt;
        let p = self.path(abs);
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(&p)
            .map_err(|e| io_err("open", &p, e))
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

    /// Create a directory; a cgroup gets its control files from the kernel.
    pub fn mkdir(&self, abs: impl AsRef<Path>) -> Result<()> {
        self.kernel.mkdir(self, abs.as_ref())
    }

    /// Remove a cgroup directory.
    pub fn rmdir(&self, abs: impl AsRef<Path>) -> Result<()> {
        self.kernel.rmdir(self, abs.as_ref())
    }

    /// The CPUs a task (thread id) may run on.
    pub fn get_affinity(&self, tid: u32) -> Result<CpuSet> {
        self.kernel.get_affinity(self, tid)
    }

    pub fn set_affinity(&self, tid: u32, cpus: &CpuSet) -> Result<()> {
        self.kernel.set_affinity(self, tid, cpus)
    }

    /// A thread's scheduling policy (a fake tree's threads are all SCHED_OTHER).
    pub fn get_policy(&self, tid: u32) -> Result<crate::sched::Policy> {
        self.kernel.get_policy(self, tid)
    }

    /// Set a thread's scheduling policy (a fake tree has no scheduler: accepted, nothing changes).
    pub fn set_policy(&self, tid: u32, policy: crate::sched::Policy) -> Result<()> {
        self.kernel.set_policy(self, tid, policy)
    }

    /// A debugfs file (e.g. "sched/preempt"), read in a private mount
    /// namespace so nothing is mounted for others; None when unreadable.
    pub fn read_debugfs(&self, rel: &str) -> Option<String> {
        self.try_read_debugfs(rel).ok()
    }

    /// A debugfs file, or why it cannot be read (EPERM when the kernel refuses
    /// debugfs, ENOENT when the file does not exist).
    pub fn try_read_debugfs(&self, rel: &str) -> Result<String> {
        let abs = Path::new("/sys/kernel/debug").join(rel);
        if self.exists(&abs) {
            return self.read(&abs);
        }
        self.kernel.read_debugfs(rel)
    }

    /// Open a debugfs file for reading (e.g. "sched/debug"), in a private
    /// mount namespace when debugfs is not mounted here: nothing is mounted
    /// for others, so nothing is left to unmount.
    pub fn open_debugfs(&self, rel: &str) -> Result<std::fs::File> {
        let abs = Path::new("/sys/kernel/debug").join(rel);
        if self.exists(&abs) {
            return std::fs::File::open(self.path(&abs)).map_err(|e| io_err("open", &abs, e));
        }
        self.kernel.open_debugfs(rel)
    }

    /// Write a debugfs file (e.g. "sched/preempt"), in a private mount
    /// namespace when debugfs is not mounted here.
    pub fn write_debugfs(&self, rel: &str, value: &str) -> Result<()> {
        let abs = Path::new("/sys/kernel/debug").join(rel);
        if self.exists(&abs) {
            return self.write(&abs, value);
        }
        self.kernel.write_debugfs(rel, value)
    }

    /// Remount the filesystem at `target` (a machine path, as
    /// /proc/self/mountinfo names it) with superblock options `data`, keeping
    /// its per-mount options `mount_options`.
    pub fn remount(&self, target: &Path, mount_options: &str, data: &str) -> Result<()> {
        self.kernel.remount(self, target, mount_options, data)
    }

    /// Where a symlink chain leads (sysfs device links), as a machine path;
    /// None when it does not resolve inside this host's root.
    pub fn canonical(&self, abs: impl AsRef<Path>) -> Option<PathBuf> {
        let real = std::fs::canonicalize(self.path(abs)).ok()?;
        let root = std::fs::canonicalize(&self.root).ok()?;
        Some(Path::new("/").join(real.strip_prefix(&root).ok()?))
    }

    /// Can a thread take SCHED_DEADLINE here? None when it cannot be tried.
    pub fn probe_deadline(&self) -> Option<std::result::Result<(), String>> {
        self.kernel.probe_deadline()
    }

    /// Can a thread take SCHED_FIFO here? The errno when not; None when it
    /// cannot be tried.
    pub fn probe_fifo(&self) -> Option<std::result::Result<(), i32>> {
        self.kernel.probe_fifo(self)
    }

    /// The scheduler's clock (SCHED_DEADLINE deadlines) minus
    /// CLOCK_MONOTONIC, ns (measured on a short-lived SCHED_DEADLINE thread, host/real.rs; a fake tree: 0,
    /// or what its FAKE_SCHED_CLOCK_OFFSET file says), or why unknown.
    pub fn sched_clock_offset(&self) -> std::result::Result<i64, String> {
        self.kernel.sched_clock_offset(self)
    }

    pub fn parse_err(&self, abs: impl AsRef<Path>, msg: impl Into<String>) -> HostError {
        HostError::Parse {
            path: abs.as_ref().display().to_string(),
            msg: msg.into(),
        }
    }
}

pub(crate) fn io_err(op: &'static str, p: &Path, source: std::io::Error) -> HostError {
    HostError::Io {
        op,
        path: p.display().to_string(),
        source,
    }
}

/// The error of a scheduling call on a task.
pub(crate) fn task_err(op: &'static str, tid: u32, source: std::io::Error) -> HostError {
    io_err(op, Path::new(&format!("task {tid}")), source)
}

/// Tests: write a file of a fake tree at its machine path, its directories
/// made as needed.
#[cfg(test)]
pub(crate) fn write_fake_file(host: &Host, abs: &str, text: &str) {
    let p = host.path(abs);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracefs_style_files_are_replaced_read_whole_and_opened_nonblocking() {
        let dir = tempfile::tempdir().unwrap();
        let host = Host::fake(dir.path());
        host.mkdir("/t").unwrap();
        host.write_truncating("/t/set_event_pid", "1 2 3").unwrap();
        host.write_truncating("/t/set_event_pid", "4").unwrap();
        assert_eq!(host.read_in_one("/t/set_event_pid").unwrap(), "4");
        let big = "x".repeat(200_000);
        host.write_truncating("/t/big", &big).unwrap();
        assert_eq!(host.read_in_one("/t/big").unwrap(), big);
        assert!(host.open_nonblocking("/t/big").is_ok());
        let gone = host.read_in_one("/t/none").unwrap_err();
        assert!(gone.is_gone());
        assert_eq!(gone.into_io().kind(), std::io::ErrorKind::NotFound);
    }
}
