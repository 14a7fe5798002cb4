//! The built-in cache-miss load (ARTiS §3.1 "cache miss load"; stress-ng
//! `cache`): per load CPU a thread reads and writes one cache line every 4160
//! bytes (65 lines: past the adjacent-line prefetcher, across pages) through
//! one buffer twice the size of the last-level cache, shared by the threads,
//! so nearly every access misses and dirty lines are written back.

use super::Workers;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

pub(super) const NAME: &str = "cache-walk";
const OP: &str =
    "4096 cache lines read and written, 4160 bytes apart, in a buffer twice the last-level cache";
const STRIDE_WORDS: usize = 4160 / 8;
const LINES_PER_OP: usize = 4096;
const MIN_BUFFER: u64 = 8 << 20;
const MAX_BUFFER: u64 = 512 << 20;
/// When sysfs does not say.
const DEFAULT_LLC: u64 = 32 << 20;

pub(super) fn start(instances: usize, w: &mut Workers) -> std::io::Result<()> {
    let ops = w.counter(NAME, OP);
    let words = (buffer_bytes(last_level_cache()) / 8) as usize;
    let buffer: Arc<Vec<AtomicU64>> = Arc::new((0..words).map(|_| AtomicU64::new(0)).collect());
    for i in 0..instances {
        let (buffer, ops) = (buffer.clone(), ops.clone());
        w.spawn(NAME, move |env| {
            // Threads start apart, on a line boundary.
            let mut at = (words / instances * i) & !7;
            while !env.stopped() {
                at = walk(&buffer, at);
                ops.add(1);
            }
            Ok(())
        })?;
    }
    Ok(())
}

/// One operation: `LINES_PER_OP` strided read-modify-writes from `at`; where
/// the next one starts.
pub(super) fn walk(buffer: &[AtomicU64], mut at: usize) -> usize {
    for _ in 0..LINES_PER_OP {
        // Plain loads and stores (no locked instruction): the traffic is the point.
        let v = buffer[at].load(Ordering::Relaxed);
        buffer[at].store(v.wrapping_add(1), Ordering::Relaxed);
        at += STRIDE_WORDS;
        if at >= buffer.len() {
            at -= buffer.len();
        }
    }
    at
}

/// Twice the last-level cache, within [8 MiB, 512 MiB].
pub(super) fn buffer_bytes(llc: u64) -> u64 {
    (2 * llc).clamp(MIN_BUFFER, MAX_BUFFER)
}

/// The size of CPU 0's highest-level cache from sysfs.
fn last_level_cache() -> u64 {
    let base = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    let read = |p: std::path::PathBuf| std::fs::read_to_string(p).ok();
    let mut best: Option<(u32, u64)> = None;
    for e in std::fs::read_dir(base).into_iter().flatten().flatten() {
        let level = read(e.path().join("level")).and_then(|s| s.trim().parse::<u32>().ok());
        let size = read(e.path().join("size")).and_then(|s| parse_size(s.trim()));
        if let (Some(level), Some(size)) = (level, size) {
            best = best.max(Some((level, size)));
        }
    }
    best.map_or(DEFAULT_LLC, |(_, size)| size)
}

/// sysfs cache sizes: "16384K", "32M", "512".
pub(super) fn parse_size(s: &str) -> Option<u64> {
    let (num, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().ok().map(|n| n * mult)
}
