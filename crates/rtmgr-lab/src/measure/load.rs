//! The ARTiS §3.1 loads, run by stress-ng or by rtmgr's built-in loads
//! (`builtin`, the same binary's `__load` subcommand): which engine runs them,
//! and a running load process — pinned to the load CPUs (optionally as
//! SCHED_IDLE guests inside a cpuset), started before and stopped after each
//! measurement, its operations per second collected (stress-ng's YAML, the
//! built-in load's JSON), and never left behind: the process group is killed
//! on stop, error, drop and panic, and the load's own timeout bounds it even
//! if rtmgr is killed.

use super::builtin::{WorkerArgs, WorkerReport, METRICS_FILE, WORKER_COMMAND};
use super::spawn::{GroupChild, SpawnSpec};
use super::{which, MeasureError, Result};
use crate::load::{parse_stress_ng_yaml, ComponentMetrics, LoadEngine, LoadKind};
use rtmgr_core::CpuSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The program that runs the loads, found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadProgram {
    /// The stress-ng binary.
    StressNg(PathBuf),
    /// A binary whose `__load` subcommand runs `builtin::main` (rtmgr).
    Builtin(PathBuf),
}

impl LoadProgram {
    pub fn engine(&self) -> LoadEngine {
        match self {
            LoadProgram::StressNg(_) => LoadEngine::StressNg,
            LoadProgram::Builtin(_) => LoadEngine::Builtin,
        }
    }
}

/// Which engine to run the loads with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineChoice {
    /// None: stress-ng when it is on PATH, else the built-in loads.
    pub requested: Option<LoadEngine>,
    /// The binary with the `__load` subcommand (the running rtmgr).
    pub worker: PathBuf,
}

impl EngineChoice {
    /// Find the program; an engine asked for but missing is an error.
    pub fn resolve(&self) -> Result<LoadProgram> {
        let builtin = || {
            if self.worker.is_file() {
                Ok(LoadProgram::Builtin(self.worker.clone()))
            } else {
                Err(MeasureError::Setup(format!(
                    "the built-in loads' program {} does not exist",
                    self.worker.display()
                )))
            }
        };
        match self.requested {
            Some(LoadEngine::StressNg) => stress_ng().map(LoadProgram::StressNg),
            Some(LoadEngine::Builtin) => builtin(),
            None => match which("stress-ng") {
                Some(bin) => Ok(LoadProgram::StressNg(bin)),
                None => builtin(),
            },
        }
    }
}

/// What to run where.
pub struct LoadSpec<'a> {
    pub kind: LoadKind,
    pub program: &'a LoadProgram,
    pub cpus: CpuSet,
    /// Workers per load component (None: one per CPU of `cpus`).
    pub instances: Option<usize>,
    /// Run at SCHED_IDLE (ARTiS guests on an RT CPU).
    pub sched_idle: bool,
    /// Upper bound of the run, enforced by the load itself (stress-ng's
    /// --timeout, the built-in load's --timeout-s), so that even a SIGKILLed
    /// rtmgr leaves no load behind for long.
    pub max_duration: Duration,
    /// Called with the load's pid before it starts (e.g. to enter a cpuset).
    pub before_run: Option<&'a dyn Fn(u32) -> Result<()>>,
}

impl LoadSpec<'_> {
    /// Workers per load component.
    fn instances(&self) -> usize {
        self.instances.unwrap_or(self.cpus.len()).max(1)
    }
}

/// A running load process; `stop` collects its metrics, drop kills it.
pub struct RunningLoad {
    child: Option<GroupChild>,
    engine: LoadEngine,
    dir: PathBuf,
    log: PathBuf,
}

/// The stress-ng binary, or the error that says how to install it.
pub fn stress_ng() -> Result<PathBuf> {
    which("stress-ng").ok_or(MeasureError::MissingTool("stress-ng", "stress-ng"))
}

/// stress-ng's arguments: the stressors, their bounds, and where its metrics go.
fn stress_ng_args(spec: &LoadSpec<'_>, dir: &Path) -> Vec<String> {
    let mut args = spec.kind.stress_ng_args(spec.instances());
    if spec.kind.stressors().contains(&"sock") {
        // Two loads at once (NRT and guests) must not fight for one port range.
        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 256;
        args.extend(["--sock-port".into(), (20_000 + 128 * k).to_string()]);
    }
    if spec.kind.stressors().contains(&"cache") {
        // The cache stressor otherwise hops between CPUs on its own.
        args.push("--cache-no-affinity".into());
    }
    args.extend([
        "--timeout".into(),
        format!("{}s", spec.max_duration.as_secs().max(1)),
        "--metrics-brief".into(),
        "--yaml".into(),
        dir.join(STRESS_NG_YAML).display().to_string(),
        "--temp-path".into(),
        dir.display().to_string(),
    ]);
    args
}

const STRESS_NG_YAML: &str = "metrics.yaml";

impl RunningLoad {
    pub fn start(spec: LoadSpec<'_>) -> Result<RunningLoad> {
        if spec.cpus.is_empty() {
            return Err(MeasureError::Setup("load CPU set is empty".into()));
        }
        let dir = tempdir()?;
        let log = dir.join("load.log");
        let (bin, args) = match spec.program {
            LoadProgram::StressNg(bin) => (bin, stress_ng_args(&spec, &dir)),
            LoadProgram::Builtin(exe) => {
                let worker = WorkerArgs {
                    kind: spec.kind,
                    instances: spec.instances(),
                    dir: dir.clone(),
                    timeout: spec.max_duration,
                };
                let mut args = vec![WORKER_COMMAND.to_string()];
                args.extend(worker.to_args());
                (exe, args)
            }
        };
        let started = std::fs::File::create(&log)
            .map_err(|e| MeasureError::io("load log", e))
            .and_then(|logf| {
                GroupChild::spawn(SpawnSpec {
                    program: bin.to_str().unwrap_or("stress-ng"),
                    args,
                    cpus: Some(spec.cpus.clone()),
                    sched_idle: spec.sched_idle,
                    log: Some(logf),
                    before_run: spec.before_run,
                })
            });
        let child = match started {
            Ok(c) => c,
            Err(e) => {
                let _ = std::fs::remove_dir_all(&dir);
                return Err(e);
            }
        };
        Ok(RunningLoad {
            child: Some(child),
            engine: spec.program.engine(),
            dir,
            log,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.pid())
    }

    pub fn engine(&self) -> LoadEngine {
        self.engine
    }

    /// Is the load still running (stress-ng exits early on a bad option)?
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().map(|c| !c.try_reap()).unwrap_or(false)
    }

    /// Stop the load (SIGINT: both engines stop their workers and write their
    /// metrics) and return the metrics; the process group is verified gone.
    pub fn stop(mut self) -> Result<Vec<ComponentMetrics>> {
        let mut child = self.child.take().expect("running");
        let early = child.try_reap();
        child.stop(libc::SIGINT, Duration::from_secs(10))?;
        drop(child);
        let (metrics, failure) = self.read_metrics();
        if failure.is_none() && !metrics.is_empty() {
            return Ok(metrics);
        }
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(5).collect();
        Err(MeasureError::Load(format!(
            "{} {}{}; its last lines: {}",
            self.engine,
            if early { "exited early and " } else { "" },
            failure.unwrap_or_else(|| "reported no metrics".into()),
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )))
    }

    /// The metrics the stopped load wrote, and its failure if it reported one.
    fn read_metrics(&self) -> (Vec<ComponentMetrics>, Option<String>) {
        match self.engine {
            LoadEngine::StressNg => {
                let text = std::fs::read_to_string(self.dir.join(STRESS_NG_YAML));
                (parse_stress_ng_yaml(&text.unwrap_or_default()), None)
            }
            LoadEngine::Builtin => {
                let text = std::fs::read_to_string(self.dir.join(METRICS_FILE));
                match text.map(|t| serde_json::from_str::<WorkerReport>(&t)) {
                    Ok(Ok(r)) => {
                        let failure = r.errors.first().map(|e| format!("failed: {e}"));
                        (r.components, failure)
                    }
                    _ => (Vec::new(), None),
                }
            }
        }
    }
}

impl Drop for RunningLoad {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Err(e) = c.stop(libc::SIGKILL, Duration::ZERO) {
                eprintln!("rtmgr: stopping the {} load: {e}", self.engine);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn tempdir() -> Result<PathBuf> {
    let base = std::env::temp_dir();
    for i in 0..1000u32 {
        let d = base.join(format!(
            "rtmgr-load-{}-{}-{i}",
            std::process::id(),
            super::mono_ns()
        ));
        match std::fs::create_dir(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(MeasureError::io(format!("create {}", d.display()), e)),
        }
    }
    Err(MeasureError::Setup(
        "no free temporary directory name".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The load tests look for leftovers by name: run them one at a time.
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

    fn stress_ng_present() -> bool {
        if which("stress-ng").is_none() {
            eprintln!("skip: stress-ng not installed");
            return false;
        }
        true
    }

    fn members_with(dir: &std::path::Path) -> usize {
        let needle = dir.display().to_string();
        std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
            .filter(|e| {
                std::fs::read(e.path().join("cmdline"))
                    .map(|c| String::from_utf8_lossy(&c).contains(&needle))
                    .unwrap_or(false)
            })
            .count()
    }

    #[test]
    fn the_engine_is_stress_ng_when_installed_else_builtin() {
        let dir = tempfile::tempdir().unwrap();
        let worker = dir.path().join("rtmgr");
        std::fs::write(&worker, "").unwrap();
        let choice = |requested| EngineChoice {
            requested,
            worker: worker.clone(),
        };
        let auto = choice(None).resolve().unwrap();
        match which("stress-ng") {
            Some(bin) => assert_eq!(auto, LoadProgram::StressNg(bin)),
            None => assert_eq!(auto, LoadProgram::Builtin(worker.clone())),
        }
        let b = choice(Some(LoadEngine::Builtin)).resolve().unwrap();
        assert_eq!(b, LoadProgram::Builtin(worker.clone()));
        assert_eq!(b.engine(), LoadEngine::Builtin);
        let missing = EngineChoice {
            requested: Some(LoadEngine::Builtin),
            worker: dir.path().join("absent"),
        };
        assert!(missing.resolve().is_err());
    }

    #[test]
    fn load_runs_reports_metrics_and_leaves_nothing() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        if !stress_ng_present() {
            return;
        }
        let load = RunningLoad::start(LoadSpec {
            kind: LoadKind::Compute,
            program: &LoadProgram::StressNg(stress_ng().unwrap()),
            cpus: CpuSet::single(0),
            instances: None,
            sched_idle: true,
            max_duration: Duration::from_secs(20),
            before_run: None,
        })
        .unwrap();
        let dir = load.dir.clone();
        std::thread::sleep(Duration::from_millis(700));
        assert!(members_with(&dir) >= 1);
        let m = load.stop().unwrap();
        assert_eq!(m[0].component, "cpu");
        assert!(m[0].ops > 0);
        assert_eq!(members_with(&dir), 0);
        assert!(!dir.exists());
    }

    #[test]
    fn dropped_load_is_killed() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        if !stress_ng_present() {
            return;
        }
        let load = RunningLoad::start(LoadSpec {
            kind: LoadKind::Network,
            program: &LoadProgram::StressNg(stress_ng().unwrap()),
            cpus: CpuSet::single(0),
            instances: None,
            sched_idle: true,
            max_duration: Duration::from_secs(20),
            before_run: None,
        })
        .unwrap();
        let dir = load.dir.clone();
        std::thread::sleep(Duration::from_millis(500));
        drop(load);
        assert_eq!(members_with(&dir), 0);
    }

    #[test]
    fn gate_error_leaves_nothing() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        if !stress_ng_present() {
            return;
        }
        let fail = |_pid: u32| Err(MeasureError::Setup("refused".into()));
        let r = RunningLoad::start(LoadSpec {
            kind: LoadKind::Compute,
            program: &LoadProgram::StressNg(stress_ng().unwrap()),
            cpus: CpuSet::single(0),
            instances: None,
            sched_idle: true,
            max_duration: Duration::from_secs(20),
            before_run: Some(&fail),
        });
        assert!(r.is_err());
        let prefix = format!("rtmgr-load-{}-", std::process::id());
        assert_eq!(members_with(std::path::Path::new(&prefix)), 0);
        let left = std::fs::read_dir(std::env::temp_dir())
            .unwrap()
            .filter_map(|e| e.ok())
            .any(|e| e.file_name().to_string_lossy().starts_with(&prefix));
        assert!(!left, "temporary directory left behind");
    }
}
