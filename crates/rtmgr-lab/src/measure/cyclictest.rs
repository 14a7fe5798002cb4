//! The independent cross-check (issue #3 item 6): cyclictest (rt-tests) run on
//! the same CPU, interval and priority as rtmgr's probe, its 1 µs histogram
//! parsed into the same statistics, and its CPU time per sample taken from
//! wait4's resource usage.

use super::spawn::{GroupChild, SpawnSpec};
use super::{which, MeasureError, Result};
use rtmgr_core::stats::Hist;
use std::time::Duration;

/// cyclictest's histogram range, µs (-h); later samples count as overflows.
pub const HIST_MAX_US: u64 = 20_000;

pub struct CyclictestRun {
    /// Samples at 1 µs resolution (bucket midpoints); overflows at cyclictest's max.
    pub hist: Hist,
    pub overflows: u64,
    pub cpu_time_ns: Option<u64>,
    pub command: Vec<String>,
}

/// Parsed cyclictest histogram file.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    pub buckets: Vec<(u64, u64)>,
    pub total: Option<u64>,
    pub max_us: Option<u64>,
    pub overflows: u64,
}

/// Parse the output of `cyclictest -h N` (one thread).
pub fn parse_hist(text: &str) -> Parsed {
    let mut p = Parsed::default();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix('#') {
            let Some((k, v)) = rest.split_once(':') else {
                continue;
            };
            let first = v
                .split_whitespace()
                .next()
                .and_then(|x| x.parse::<u64>().ok());
            match k.trim() {
                "Total" => p.total = first,
                "Max Latencies" => p.max_us = first,
                "Histogram Overflows" => p.overflows = first.unwrap_or(0),
                _ => {}
            }
            continue;
        }
        let mut t = line.split_whitespace();
        if let (Some(Ok(b)), Some(Ok(c))) = (
            t.next().map(str::parse::<u64>),
            t.next().map(str::parse::<u64>),
        ) {
            if c > 0 {
                p.buckets.push((b, c));
            }
        }
    }
    p
}

/// Parsed histogram → Hist: bucket k µs is recorded at k µs + 500 ns; overflows
/// at cyclictest's reported maximum (an upper bound for each of them).
pub fn to_hist(p: &Parsed) -> Hist {
    let mut h = Hist::new();
    for &(b, c) in &p.buckets {
        h.record_n((b * 1000 + 500) as i64, c);
    }
    if let Some(m) = p.max_us {
        h.record_n((m * 1000 + 500) as i64, p.overflows);
    }
    h
}

pub fn command(
    cpu: u32,
    interval_ns: u64,
    loops: u64,
    priority: u8,
    histfile: &str,
) -> Vec<String> {
    vec![
        "-m".into(),
        "-q".into(),
        format!("-p{priority}"),
        "-t1".into(),
        format!("-a{cpu}"),
        format!("-i{}", (interval_ns / 1000).max(1)),
        format!("-l{loops}"),
        format!("-h{HIST_MAX_US}"),
        format!("--histfile={histfile}"),
    ]
}

/// Run cyclictest for `loops` periods; `before_run` may move it into a cpuset.
pub fn run(
    cpu: u32,
    interval_ns: u64,
    loops: u64,
    priority: u8,
    before_run: Option<&dyn Fn(u32) -> Result<()>>,
    stop: &std::sync::atomic::AtomicBool,
) -> Result<CyclictestRun> {
    let bin = which("cyclictest").ok_or(MeasureError::MissingTool("cyclictest", "rt-tests"))?;
    let histfile = std::env::temp_dir().join(format!(
        "rtmgr-cyclictest-{}-{}.hist",
        std::process::id(),
        super::mono_ns()
    ));
    let args = command(
        cpu,
        interval_ns,
        loops,
        priority,
        &histfile.display().to_string(),
    );
    let mut full = vec![bin.display().to_string()];
    full.extend(args.iter().cloned());
    let mut child = GroupChild::spawn(SpawnSpec {
        program: bin.to_str().unwrap_or("cyclictest"),
        args,
        cpus: None,
        sched_idle: false,
        log: None,
        before_run,
    })?;
    let limit = Duration::from_nanos(interval_ns * loops) + Duration::from_secs(10);
    let t = std::time::Instant::now();
    let mut interrupted = false;
    while !child.try_reap() {
        if stop.load(std::sync::atomic::Ordering::Relaxed) {
            interrupted = true;
            // cyclictest prints its histogram on SIGINT too.
            child.stop(libc::SIGINT, Duration::from_secs(3))?;
            break;
        }
        if t.elapsed() > limit {
            child.stop(libc::SIGKILL, Duration::ZERO)?;
            let _ = std::fs::remove_file(&histfile);
            return Err(MeasureError::Setup(
                "cyclictest did not finish in time".into(),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.stop(libc::SIGKILL, Duration::ZERO)?;
    let text = std::fs::read_to_string(&histfile).unwrap_or_default();
    let _ = std::fs::remove_file(&histfile);
    let parsed = parse_hist(&text);
    if parsed.total.is_none() && !interrupted {
        return Err(MeasureError::Setup(format!(
            "cyclictest wrote no histogram (command: {})",
            full.join(" ")
        )));
    }
    Ok(CyclictestRun {
        hist: to_hist(&parsed),
        overflows: parsed.overflows,
        cpu_time_ns: child.cpu_time_ns(),
        command: full,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "# Histogram
000017 000002
000019 000003
000020 000000
# Total: 000000006
# Min Latencies: 00017
# Avg Latencies: 00019
# Max Latencies: 00250
# Histogram Overflows: 00001
# Histogram Overflow at cycle number:
# Thread 0: 00004
";

    #[test]
    fn parses_cyclictest_histogram() {
        let p = parse_hist(OUT);
        assert_eq!(p.buckets, [(17, 2), (19, 3)]);
        assert_eq!(p.total, Some(6));
        assert_eq!(p.max_us, Some(250));
        assert_eq!(p.overflows, 1);
        let h = to_hist(&p);
        assert_eq!(h.len(), 6);
        assert_eq!(h.min(), Some(17_500));
        assert_eq!(h.max(), Some(250_500));
    }
}
