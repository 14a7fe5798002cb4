//! The ARTiS §3.1 loads run by stress-ng: pinned to the load CPUs (optionally as
//! SCHED_IDLE guests inside a cpuset), started before and stopped after each
//! measurement, their bogo-ops/s collected from stress-ng's YAML metrics, and
//! never left behind: the process group is killed on stop, error, drop and panic.

use super::spawn::{GroupChild, SpawnSpec};
use super::{which, MeasureError, Result};
use rtmgr_core::load::{parse_stress_ng_yaml, ComponentMetrics, LoadKind};
use rtmgr_core::CpuSet;
use std::path::PathBuf;
use std::time::Duration;

/// What to run where.
pub struct LoadSpec<'a> {
    pub kind: LoadKind,
    pub cpus: CpuSet,
    /// Run at SCHED_IDLE (ARTiS guests on an RT CPU).
    pub sched_idle: bool,
    /// Upper bound of the run: stress-ng's own --timeout, so that even a
    /// SIGKILLed rtmgr leaves no load behind for long.
    pub max_duration: Duration,
    /// Called with stress-ng's pid before it starts (e.g. to enter a cpuset).
    pub before_run: Option<&'a dyn Fn(u32) -> Result<()>>,
}

/// A running stress-ng; `stop` collects its metrics, drop kills it.
pub struct RunningLoad {
    child: Option<GroupChild>,
    dir: PathBuf,
    yaml: PathBuf,
    log: PathBuf,
}

/// The stress-ng binary, or the error that says how to install it.
pub fn stress_ng() -> Result<PathBuf> {
    which("stress-ng").ok_or(MeasureError::MissingTool("stress-ng", "stress-ng"))
}

impl RunningLoad {
    pub fn start(spec: LoadSpec<'_>) -> Result<RunningLoad> {
        let bin = stress_ng()?;
        if spec.cpus.is_empty() {
            return Err(MeasureError::Setup("load CPU set is empty".into()));
        }
        let dir = tempdir()?;
        let yaml = dir.join("metrics.yaml");
        let log = dir.join("stress-ng.log");
        let mut args = spec.kind.stress_ng_args(spec.cpus.len());
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
            yaml.display().to_string(),
            "--temp-path".into(),
            dir.display().to_string(),
        ]);
        let logf = std::fs::File::create(&log).map_err(|e| MeasureError::io("stress-ng log", e))?;
        let started = GroupChild::spawn(SpawnSpec {
            program: bin.to_str().unwrap_or("stress-ng"),
            args,
            cpus: Some(spec.cpus.clone()),
            sched_idle: spec.sched_idle,
            log: Some(logf),
            before_run: spec.before_run,
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
            dir,
            yaml,
            log,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.pid())
    }

    /// Is stress-ng still running (it exits early on a bad option)?
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().map(|c| !c.try_reap()).unwrap_or(false)
    }

    /// Stop the load (SIGINT: stress-ng stops its workers and writes its metrics)
    /// and return the metrics; the process group is verified gone.
    pub fn stop(mut self) -> Result<Vec<ComponentMetrics>> {
        let mut child = self.child.take().expect("running");
        let early = child.try_reap();
        child.stop(libc::SIGINT, Duration::from_secs(10))?;
        drop(child);
        let text = std::fs::read_to_string(&self.yaml).unwrap_or_default();
        let metrics = parse_stress_ng_yaml(&text);
        if metrics.is_empty() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            return Err(MeasureError::Load(format!(
                "stress-ng {}reported no metrics; its last lines: {}",
                if early { "exited early and " } else { "" },
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            )));
        }
        Ok(metrics)
    }
}

impl Drop for RunningLoad {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if let Err(e) = c.stop(libc::SIGKILL, Duration::ZERO) {
                eprintln!("rtmgr: stopping stress-ng: {e}");
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
    fn load_runs_reports_metrics_and_leaves_nothing() {
        let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        if !stress_ng_present() {
            return;
        }
        let load = RunningLoad::start(LoadSpec {
            kind: LoadKind::Compute,
            cpus: CpuSet::single(0),
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
            cpus: CpuSet::single(0),
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
            cpus: CpuSet::single(0),
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
