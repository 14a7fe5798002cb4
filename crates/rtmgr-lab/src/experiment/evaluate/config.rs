//! What `rtmgr evaluate` is asked to run (docs/evaluate.md): duration, rounds,
//! RT CPU, load, probe period, tail tracing, checkpoints and the A/A control
//! (docs/architecture.md "Measuring": configurations interleaved in rounds).

use crate::load::LoadKind;
use crate::measure::load::EngineChoice;
use std::path::PathBuf;
use std::time::Duration;

/// What to run.
#[derive(Debug, Clone)]
pub struct EvaluateConfig {
    /// Total measuring time, spread over all rounds and configurations.
    pub total: Duration,
    /// Rounds; each runs every configuration once.
    pub rounds: u32,
    /// The RT CPU (default: the one with the least unmovable work, `--rt-cpus auto`).
    pub rt_cpu: Option<u32>,
    pub load: LoadKind,
    pub load_engine: EngineChoice,
    /// Probe release period.
    pub interval: Duration,
    /// Explain each configuration's tail with tracefs (see `LatencyConfig::trace`).
    pub trace: Option<Option<u64>>,
    /// Long runs: where to write the report so far, at most every
    /// `CHECKPOINT_EVERY` (a valid report marked partial), so a crash loses
    /// at most that much.
    pub checkpoint: Option<PathBuf>,
    /// Measure the shield twice per round, the A/A control (`--no-control`: not).
    pub control: bool,
}

impl EvaluateConfig {
    /// The defaults: 36 s over 8 rounds, or 8 s over 4 with `quick` — many
    /// short rounds, the units the intervals resample (issue 28); with the
    /// control's sixth segment and each segment's load start the run takes
    /// about 60 s (about 25 s with `quick`).
    pub fn new(quick: bool, load_engine: EngineChoice) -> Self {
        EvaluateConfig {
            total: Duration::from_secs(if quick { 8 } else { 36 }),
            rounds: if quick { 4 } else { 8 },
            rt_cpu: None,
            load: LoadKind::All,
            load_engine,
            interval: Duration::from_micros(250),
            trace: None,
            checkpoint: None,
            control: true,
        }
    }

    /// `--ablate`'s defaults: 48 s over 4 rounds, or 12 s over 2 with
    /// `quick` (its steps' partitions are applied per segment, and it has no
    /// bootstrap intervals yet: more rounds would only cost set-up time).
    pub fn ablation(quick: bool, load_engine: EngineChoice) -> Self {
        EvaluateConfig {
            total: Duration::from_secs(if quick { 12 } else { 48 }),
            rounds: if quick { 2 } else { 4 },
            ..Self::new(quick, load_engine)
        }
    }
}
