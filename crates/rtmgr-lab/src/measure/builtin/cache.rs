//! The built-in cache-miss load (ARTiS §3.1 "cache miss load"; stress-ng
//! `cache`): per load CPU a thread reads and writes one cache line every 4160
//! bytes (65 lines: past the adjacent-line prefetcher, across pages) through
//! its share of a buffer twice the size of the last-level cache, so nearly
//! every access misses and dirty lines are written back. Each share is a
//! zeroed allocation the walk itself faults in: the load starts at once.

use super::Workers;

pub(super) const NAME: &str = "cache-walk";
const OP: &str =
    "4096 cache lines read and written, 4160 bytes apart, in its share of a buffer twice the last-level cache";
const STRIDE_WORDS: usize = 4160 / 8;
const LINES_PER_OP: usize = 4096;
const MIN_BUFFER: u64 = 8 << 20;
const MAX_BUFFER: u64 = 512 << 20;
/// When sysfs does not say.
const DEFAULT_LLC: u64 = 32 << 20;

pub(super) fn start(instances: usize, w: &mut Workers) -> std::io::Result<()> {
    let ops = w.counter(NAME, OP);
    let share = (buffer_bytes(last_level_cache()) / 8) as usize / instances.max(1);
    for _ in 0..instances {
        let ops = ops.clone();
        w.spawn(NAME, move |env| {
            let mut buffer = vec![0u64; share.max(STRIDE_WORDS)];
            let mut at = 0;
            // At least one operation, however soon the stop comes.
            loop {
                at = walk(&mut buffer, at);
                ops.add(1);
                if env.stopped() {
                    return Ok(());
                }
            }
        })?;
    }
    Ok(())
}

/// One operation: `LINES_PER_OP` strided read-modify-writes from `at`; where
/// the next one starts.
pub(super) fn walk(buffer: &mut [u64], mut at: usize) -> usize {
    for _ in 0..LINES_PER_OP {
        // black_box: every load and store happens; the traffic is the point.
        buffer[at] = std::hint::black_box(buffer[at]).wrapping_add(1);
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
