//! The built-in I/O load (ARTiS §3.1 "input/output load"; stress-ng `hdd` and
//! `io`): each worker writes 64 KiB blocks into its own file in the load's
//! private directory and forces each to the device with fsync; a file never
//! grows beyond 16 MiB (writes wrap around) and is removed at the end.

use super::Workers;
use std::os::unix::fs::FileExt;

pub(super) const NAME: &str = "write-fsync";
const OP: &str = "a 64 KiB write followed by fsync, in a private file of at most 16 MiB";
const BLOCK: usize = 64 << 10;
const FILE_MAX: u64 = 16 << 20;

pub(super) fn start(instances: usize, w: &mut Workers) -> std::io::Result<()> {
    let ops = w.counter(NAME, OP);
    for i in 0..instances {
        let path = w.env().dir().join(format!("io-{i}.dat"));
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)?;
        let ops = ops.clone();
        w.spawn(NAME, move |env| {
            let mut block: Vec<u8> = (0..BLOCK).map(|b| (b * 131 + i) as u8).collect();
            let (mut offset, mut n) = (0u64, 0u64);
            let result = (|| {
                while !env.stopped() {
                    // New bytes each time: every write dirties the page cache anew.
                    block[..8].copy_from_slice(&n.to_le_bytes());
                    file.write_all_at(&block, offset)?;
                    file.sync_all()?;
                    ops.add(1);
                    n += 1;
                    offset = (offset + BLOCK as u64) % FILE_MAX;
                }
                Ok(())
            })();
            let _ = std::fs::remove_file(&path);
            result
        })?;
    }
    Ok(())
}
