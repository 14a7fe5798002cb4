//! The load sweep's fixed job mix (DROPS §5.2 Fig. 5 after AIM VII): one job
//! computes, touches memory, writes and reads back a file and makes system
//! calls; `concurrency` tasks run jobs back to back for a while and the count
//! of finished jobs gives jobs per minute.

use std::hint::black_box;
use std::io::{self, Read, Write};
use std::path::Path;
use std::time::{Duration, Instant};

/// What one job does, for the report.
pub const JOB_MIX: &str = "one job = 2^19 integer hash steps + 4 MiB of memory written + a 256 KiB file written, read back and removed + 1000 getppid() calls";

/// One job, its file in `dir` named after `task`.
pub fn one_job(dir: &Path, task: u32) -> io::Result<()> {
    let mut x = task as u64 | 1;
    for _ in 0..(1u32 << 19) {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        x ^= x >> 29;
    }
    black_box(x);
    let mut mem = vec![0u8; 4 << 20];
    for i in (0..mem.len()).step_by(64) {
        mem[i] = i as u8;
    }
    black_box(&mem);
    let path = dir.join(format!("job-{task}"));
    let data = vec![task as u8; 256 << 10];
    std::fs::File::create(&path)?.write_all(&data)?;
    let mut back = Vec::with_capacity(data.len());
    std::fs::File::open(&path)?.read_to_end(&mut back)?;
    std::fs::remove_file(&path)?;
    if back.len() != data.len() {
        return Err(io::Error::other("job file read back short"));
    }
    for _ in 0..1000 {
        black_box(std::os::unix::process::parent_id());
    }
    Ok(())
}

/// `concurrency` tasks run jobs until `budget` has passed: (jobs finished, elapsed).
pub fn run_jobs(concurrency: u32, budget: Duration, dir: &Path) -> io::Result<(u64, Duration)> {
    let t0 = Instant::now();
    let end = t0 + budget;
    let counts = std::thread::scope(|s| {
        let tasks: Vec<_> = (0..concurrency.max(1))
            .map(|task| {
                s.spawn(move || -> io::Result<u64> {
                    let mut n = 0;
                    while Instant::now() < end {
                        one_job(dir, task)?;
                        n += 1;
                    }
                    Ok(n)
                })
            })
            .collect();
        tasks
            .into_iter()
            .map(|t| {
                t.join()
                    .map_err(|_| io::Error::other("job task panicked"))?
            })
            .collect::<io::Result<Vec<u64>>>()
    })?;
    Ok((counts.iter().sum(), t0.elapsed()))
}
