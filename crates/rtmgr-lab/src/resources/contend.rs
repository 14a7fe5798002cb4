//! The workloads of `rtmgr measure resources` (DROPS §4.4: a matrix multiply
//! sized to the cache beside a cache-thrashing neighbour; §5.3: small reads
//! beside a dd/find-like I/O load): one RT pass of a routine, and the NRT
//! neighbours (a cache thrasher, a sequential writer and a metadata walker)
//! as threads pinned to another CPU until stopped.

use crate::measure::probe::setup_rt_thread;
use crate::measure::{mono_ns, sleep_until, MeasureError, Result};
use rtmgr_core::stats::Hist;
use rtmgr_core::CpuSet;
use rtmgr_linux::sched::{self, Policy};
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::thread::JoinHandle;

/// C = A × B for n×n row-major matrices.
pub fn matmul(n: usize, a: &[f64], b: &[f64], c: &mut [f64]) {
    for i in 0..n {
        for j in 0..n {
            let mut s = 0.0;
            for k in 0..n {
                s += a[i * n + k] * b[k * n + j];
            }
            c[i * n + j] = s;
        }
    }
}

/// The size of `cpu`'s last-level cache (bytes, from sysfs): the level a
/// neighbour on another CPU shares and can evict (DROPS §4.4 sized its
/// matrix to the second-level cache of a machine where that was the last).
pub fn cache_bytes(host: &rtmgr_linux::Host, cpu: u32) -> Option<u64> {
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cache");
    host.list_dir(&dir)
        .ok()?
        .iter()
        .filter(|n| n.starts_with("index"))
        .filter_map(|n| host.read_opt(format!("{dir}/{n}/size")))
        .filter_map(|s| rtmgr_core::admission::memory::parse_bytes(s.trim()).ok())
        .max()
}

/// Run `work` `runs` times on `cpu` at SCHED_FIFO `priority`, one run per
/// release (period 3× the first run, at least 1 ms, as `measure exec`), with
/// `setup` called first in the thread. The durations, ns.
pub fn rt_pass<W, S>(cpu: u32, priority: u8, runs: u64, setup: S, mut work: W) -> Result<Hist>
where
    W: FnMut() + Send + 'static,
    S: FnOnce() + Send + 'static,
{
    std::thread::Builder::new()
        .name(format!("rtmgr-res{cpu}"))
        .spawn(move || -> Result<Hist> {
            setup_rt_thread(cpu, Policy::Fifo { priority }, None)?;
            setup();
            let a = mono_ns();
            work();
            let period = ((mono_ns() - a) * 3).max(1_000_000);
            let mut h = Hist::new();
            let mut next = mono_ns() + period;
            for _ in 0..runs {
                sleep_until(next);
                let t = mono_ns();
                work();
                h.record((mono_ns() - t) as i64);
                next = (next + period).max(mono_ns() + period / 3);
            }
            Ok(h)
        })
        .map_err(|e| MeasureError::io("spawn RT thread", e))?
        .join()
        .map_err(|_| MeasureError::Setup("RT thread panicked".into()))?
}

/// NRT neighbour threads, stopped (and joined) on drop.
pub struct Neighbours {
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<()>>,
}

impl Neighbours {
    fn spawn(
        cpu: u32,
        name: &str,
        f: impl FnOnce(&AtomicBool) + Send + 'static,
        stop: &Arc<AtomicBool>,
    ) -> Result<JoinHandle<()>> {
        let s = stop.clone();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let _ = sched::set_affinity(0, &CpuSet::single(cpu));
                f(&s)
            })
            .map_err(|e| MeasureError::io("spawn neighbour", e))
    }

    /// A cache thrasher on `cpu`: writes one byte per cache line over `bytes`.
    pub fn thrasher(cpu: u32, bytes: usize) -> Result<Neighbours> {
        let stop = Arc::new(AtomicBool::new(false));
        let t = Self::spawn(
            cpu,
            "rtmgr-thrash",
            move |stop| {
                let mut buf = vec![0u8; bytes];
                let mut v = 0u8;
                while !stop.load(Relaxed) {
                    for i in (0..bytes).step_by(64) {
                        buf[i] = buf[i].wrapping_add(v);
                    }
                    v = v.wrapping_add(1);
                    std::hint::black_box(&buf);
                }
            },
            &stop,
        )?;
        Ok(Neighbours {
            stop,
            threads: vec![t],
        })
    }

    /// A dd-like sequential writer (1 MiB writes, fdatasync every 16 MiB, a
    /// file of `bytes` rewritten in a loop) and a find-like walker of /usr.
    pub fn io_load(cpu: u32, file: PathBuf, bytes: u64) -> Result<Neighbours> {
        let stop = Arc::new(AtomicBool::new(false));
        let dd = Self::spawn(
            cpu,
            "rtmgr-dd",
            move |stop| {
                let Ok(f) = std::fs::File::create(&file) else {
                    return;
                };
                let block = vec![0x5au8; 1 << 20];
                let mut off = 0u64;
                while !stop.load(Relaxed) {
                    if f.write_all_at(&block, off).is_err() {
                        break;
                    }
                    off = (off + block.len() as u64) % bytes.max(1 << 20);
                    if off.is_multiple_of(16 << 20) {
                        let _ = f.sync_data();
                    }
                }
                drop(f);
                let _ = std::fs::remove_file(&file);
            },
            &stop,
        )?;
        let find = Self::spawn(
            cpu,
            "rtmgr-find",
            |stop| {
                while !stop.load(Relaxed) {
                    walk(Path::new("/usr"), stop, 0);
                }
            },
            &stop,
        )?;
        Ok(Neighbours {
            stop,
            threads: vec![dd, find],
        })
    }
}

fn walk(dir: &Path, stop: &AtomicBool, depth: u32) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if stop.load(Relaxed) || depth > 12 {
            return;
        }
        if let Ok(m) = e.path().symlink_metadata() {
            if m.is_dir() {
                walk(&e.path(), stop, depth + 1);
            }
        }
    }
}

impl Drop for Neighbours {
    fn drop(&mut self) {
        self.stop.store(true, Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A file for small reads: `bytes` written once, opened O_DIRECT where the
/// file system allows it; removed on drop.
pub struct ReadTarget {
    pub path: PathBuf,
    pub file: std::fs::File,
    pub direct: bool,
    pub bytes: u64,
}

impl ReadTarget {
    pub fn create(path: PathBuf, bytes: u64) -> Result<ReadTarget> {
        let io = |e| MeasureError::io(format!("create {}", path.display()), e);
        {
            let f = std::fs::File::create(&path).map_err(io)?;
            let block = vec![0xa5u8; 1 << 20];
            let mut off = 0;
            while off < bytes {
                f.write_all_at(&block, off).map_err(io)?;
                off += block.len() as u64;
            }
            f.sync_all().map_err(io)?;
        }
        let direct = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(&path);
        let (file, direct) = match direct {
            Ok(f) => (f, true),
            Err(_) => (std::fs::File::open(&path).map_err(io)?, false),
        };
        Ok(ReadTarget {
            path,
            file,
            direct,
            bytes,
        })
    }

    /// A reader of 4 KiB blocks at pseudo-random aligned offsets.
    pub fn reader(&self) -> Result<impl FnMut() + Send + 'static> {
        let f = self
            .file
            .try_clone()
            .map_err(|e| MeasureError::io("dup read target", e))?;
        let blocks = (self.bytes / 4096).max(1);
        let mut buf = vec![0u8; 8192];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        Ok(move || {
            // An aligned 4 KiB window of the buffer (O_DIRECT needs it).
            let skew = buf.as_ptr().align_offset(4096);
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let _ = f.read_at(&mut buf[skew..skew + 4096], (x % blocks) * 4096);
        })
    }

    /// The I/O scheduler of the disk holding the file.
    pub fn scheduler(&self, host: &rtmgr_linux::Host) -> Option<String> {
        let dev = std::fs::metadata(&self.path).ok()?.dev();
        let (maj, min) = (
            ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff),
            (dev & 0xff) | ((dev >> 12) & !0xff),
        );
        let base = format!("/sys/dev/block/{maj}:{min}");
        let text = host
            .read_opt(format!("{base}/queue/scheduler"))
            .or_else(|| host.read_opt(format!("{base}/../queue/scheduler")))?;
        let active = text.split_whitespace().find(|w| w.starts_with('['))?;
        Some(active.trim_matches(|c| c == '[' || c == ']').to_string())
    }
}

impl Drop for ReadTarget {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_multiplies() {
        let a = [1.0, 2.0, 3.0, 4.0];
        let id = [1.0, 0.0, 0.0, 1.0];
        let mut c = [0.0; 4];
        matmul(2, &a, &id, &mut c);
        assert_eq!(c, a);
    }

    #[test]
    fn a_read_target_reads_and_goes_away() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t");
        let t = ReadTarget::create(p.clone(), 1 << 20).unwrap();
        let mut r = t.reader().unwrap();
        for _ in 0..10 {
            r();
        }
        drop(t);
        assert!(!p.exists());
    }
}
