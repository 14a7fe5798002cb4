//! Honest real-time measurement on the running machine (docs/architecture.md "Measuring";
//! ARTiS §3.1–3.2, McKenney §2.1 and §3, DROPS §5.3): latency probe threads,
//! stress-ng loads, disturbance snapshots, execution-time variation,
//! periodicity, and the cyclictest cross-check. Statistics and report types are
//! pure and live in `rtmgr_core::{stats, report}`.

pub mod builtin;
pub mod cyclictest;
pub mod disturb;
pub mod exec;
pub mod host_split;
pub mod load;
pub mod periodicity;
pub mod probe;
pub mod probe_loop;
pub mod segment;
pub mod spawn;
pub mod steal;

use crate::report::HostInfo;
use rtmgr_core::CpuSet;
use std::fs::File;
use std::io::Write;
use std::path::Path;

pub use rtmgr_linux::rt_thread::{MeasureError, Result};

pub use rtmgr_sys::process::thread_switches;
pub use rtmgr_sys::sched::gettid;
pub use rtmgr_sys::time::{mono_ns, sleep_until, thread_cpu_ns, unix_now_s};

/// Is `prog` on PATH?
pub fn which(prog: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(prog))
            .find(|p| p.is_file())
    })
}

/// Holds /dev/cpu_dma_latency at 0 µs while alive (the kernel restores the old
/// PM QoS request when the file is closed), so deep C-states do not add exit
/// latency to the measurement.
pub struct DmaLatencyGuard {
    _file: Option<File>,
}

impl DmaLatencyGuard {
    pub fn hold() -> Self {
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/cpu_dma_latency")
            .and_then(|mut f| f.write_all(&0i32.to_ne_bytes()).map(|_| f))
            .ok();
        DmaLatencyGuard { _file: file }
    }

    pub fn held(&self) -> bool {
        self._file.is_some()
    }
}

/// Facts about the machine for the report header.
pub fn host_info(online: &CpuSet) -> HostInfo {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    let cpuinfo = read("/proc/cpuinfo");
    let hypervisor = if Path::new("/sys/hypervisor/type").exists() {
        Some(read("/sys/hypervisor/type"))
    } else if cpuinfo.contains(" hypervisor") {
        Some("yes (cpuinfo hypervisor flag)".to_string())
    } else {
        None
    };
    HostInfo {
        hostname: read("/proc/sys/kernel/hostname"),
        kernel: read("/proc/sys/kernel/osrelease"),
        cpus_online: online.clone(),
        hypervisor,
    }
}
