//! Long runs (issue 14; ARTiS §3.1's 8-hour runs): no segment longer than a
//! minute, and the report so far written to disk after each minute — a valid
//! report marked partial — so a crash or power cut loses at most a minute.

use crate::report::Report;
use std::time::Duration;

/// How often a long run writes its report so far, and the longest segment
/// (more rounds are run when the duration asks for longer ones).
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(60);

/// Rounds so that no segment is longer than `CHECKPOINT_EVERY` (issue 14:
/// `--duration 8h` streams its histograms to disk every minute).
pub fn rounds_for(requested: u32, total: Duration, configs: usize) -> u32 {
    let per_round = CHECKPOINT_EVERY.as_nanos() * configs.max(1) as u128;
    let needed = total.as_nanos().div_ceil(per_round).min(u32::MAX as u128) as u32;
    requested.max(needed)
}

/// Write `report` to `path` atomically (a temporary file renamed over it).
pub fn write_checkpoint(path: &std::path::Path, report: &Report) -> std::io::Result<()> {
    let tmp = path.with_extension("json.partial");
    if let Some(d) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(d)?;
    }
    std::fs::write(&tmp, serde_json::to_string_pretty(report)? + "\n")?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::session::report;
    use crate::report::{Body, EvaluateRun};
    use rtmgr_core::CpuSet;

    #[test]
    fn long_runs_get_segments_of_at_most_a_minute() {
        assert_eq!(rounds_for(4, Duration::from_secs(48), 5), 4);
        // 8 h = 480 one-minute segments: 96 rounds of 5 configurations.
        assert_eq!(rounds_for(4, Duration::from_secs(8 * 3600), 5), 96);
        assert_eq!(rounds_for(1, Duration::from_secs(301), 5), 2);
        assert_eq!(rounds_for(600, Duration::from_secs(8 * 3600), 5), 600);
    }

    #[test]
    fn checkpoints_replace_the_file_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/report.json");
        let online: CpuSet = "0-1".parse().unwrap();
        let body = Body::Evaluate(EvaluateRun {
            rt_cpus: "1".parse().unwrap(),
            nrt_cpus: "0".parse().unwrap(),
            load: "all".into(),
            load_engine: crate::load::LoadEngine::Builtin,
            interval_ns: 1,
            rounds_planned: 2,
            rounds_done: 1,
            segment_ns: 1,
            latency_bound_us: 300,
            configs: vec![],
            verdicts: vec![],
            rt_choice: None,
            skipped: vec![],
            host_preemption: None,
            intervals: None,
        });
        let r = report(body, &online, 0, Some("in progress".into()));
        write_checkpoint(&path, &r).unwrap();
        write_checkpoint(&path, &r).unwrap();
        let back: Report = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert!(back.header.partial);
        assert_eq!(
            std::fs::read_dir(path.parent().unwrap()).unwrap().count(),
            1
        );
    }
}
