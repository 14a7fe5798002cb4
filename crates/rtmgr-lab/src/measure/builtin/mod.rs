//! The built-in loads: the five ARTiS §3.1 loads (computing, input/output,
//! network, kernel locks, cache misses) written in Rust, for machines without
//! stress-ng. This is the load process's side: `rtmgr __load …` runs `main`,
//! which starts worker threads per load CPU, counts each component's
//! operations, and stops on SIGINT/SIGTERM, at its timeout, or as soon as its
//! parent is gone, writing the metrics file. `measure::load` starts, gates,
//! pins and stops these processes exactly like stress-ng.

mod cache;
mod compute;
mod io;
mod locks;
mod net;
#[cfg(test)]
mod tests;

use crate::load::{ComponentMetrics, LoadKind};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The hidden subcommand of the rtmgr binary that runs `main`.
pub const WORKER_COMMAND: &str = "__load";

/// Where a load process writes its `WorkerReport`, in its directory.
pub const METRICS_FILE: &str = "metrics.json";

/// How long stopped threads get to finish before the report is written anyway.
const JOIN_GRACE: Duration = Duration::from_secs(5);

/// What one load process runs: `kind` with `instances` workers per component,
/// its files in `dir`, for at most `timeout`.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerArgs {
    pub kind: LoadKind,
    pub instances: usize,
    pub dir: PathBuf,
    pub timeout: Duration,
}

impl WorkerArgs {
    /// The command-line arguments after `WORKER_COMMAND` (read back by `parse`).
    pub fn to_args(&self) -> Vec<String> {
        vec![
            "--kind".into(),
            self.kind.name().into(),
            "--instances".into(),
            self.instances.to_string(),
            "--dir".into(),
            self.dir.display().to_string(),
            "--timeout-s".into(),
            self.timeout.as_secs().max(1).to_string(),
        ]
    }

    pub fn parse(args: &[String]) -> Result<WorkerArgs, String> {
        let (mut kind, mut instances, mut dir, mut timeout) = (None, None, None, None);
        let mut it = args.iter();
        while let Some(flag) = it.next() {
            let value = it
                .next()
                .ok_or_else(|| format!("{flag}: a value is missing"))?;
            let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
            match flag.as_str() {
                "--kind" => kind = Some(value.parse::<LoadKind>().map_err(|e| bad(&e))?),
                "--instances" => instances = Some(value.parse::<usize>().map_err(|e| bad(&e))?),
                "--dir" => dir = Some(PathBuf::from(value)),
                "--timeout-s" => timeout = Some(value.parse::<u64>().map_err(|e| bad(&e))?),
                _ => return Err(format!("unknown argument {flag}")),
            }
        }
        let missing = |what: &str| format!("{what} is required");
        let instances = instances.ok_or_else(|| missing("--instances"))?;
        if instances == 0 {
            return Err("--instances must be at least 1".into());
        }
        Ok(WorkerArgs {
            kind: kind.ok_or_else(|| missing("--kind"))?,
            instances,
            dir: dir.ok_or_else(|| missing("--dir"))?,
            timeout: Duration::from_secs(timeout.ok_or_else(|| missing("--timeout-s"))?),
        })
    }
}

/// What a load process reports when it stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerReport {
    pub components: Vec<ComponentMetrics>,
    /// Failures of worker threads (a load that failed stops at once).
    pub errors: Vec<String>,
    pub elapsed_ns: u64,
    /// It stopped because the process that started it was gone.
    #[serde(default)]
    pub orphaned: bool,
}

/// What the worker threads share: the stop flag, the private directory, errors.
pub(crate) struct Env {
    stop: Arc<AtomicBool>,
    dir: PathBuf,
    errors: Mutex<Vec<String>>,
}

impl Env {
    pub(crate) fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Record a failure and stop every worker.
    fn fail(&self, what: String) {
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(what);
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// One component's operation counter.
pub(crate) struct Counter {
    name: &'static str,
    op: &'static str,
    ops: AtomicU64,
}

impl Counter {
    pub(crate) fn add(&self, n: u64) {
        self.ops.fetch_add(n, Ordering::Relaxed);
    }
}

/// The running worker threads of one load process.
pub(crate) struct Workers {
    env: Arc<Env>,
    counters: Vec<Arc<Counter>>,
    threads: Vec<JoinHandle<()>>,
}

impl Workers {
    /// A new component counter (`op` says what one operation is).
    pub(crate) fn counter(&mut self, name: &'static str, op: &'static str) -> Arc<Counter> {
        let c = Arc::new(Counter {
            name,
            op,
            ops: AtomicU64::new(0),
        });
        self.counters.push(c.clone());
        c
    }

    pub(crate) fn env(&self) -> &Env {
        &self.env
    }

    /// Run `body` on a new thread until it returns; an error stops the load.
    pub(crate) fn spawn(
        &mut self,
        name: &'static str,
        body: impl FnOnce(&Env) -> std::io::Result<()> + Send + 'static,
    ) -> std::io::Result<()> {
        let env = self.env.clone();
        let t = std::thread::Builder::new()
            .name(format!("load-{name}"))
            .spawn(move || {
                if let Err(e) = body(&env) {
                    env.fail(format!("{name}: {e}"));
                }
            })?;
        self.threads.push(t);
        Ok(())
    }
}

/// Start the components of `kind`, `instances` workers each. `all` starts the
/// cache load first: its buffer is filled before the other workers compete
/// for the CPUs.
fn start(kind: LoadKind, instances: usize, w: &mut Workers) -> std::io::Result<()> {
    let kinds: Vec<LoadKind> = match kind {
        LoadKind::All => vec![
            LoadKind::Cache,
            LoadKind::Compute,
            LoadKind::Io,
            LoadKind::Network,
            LoadKind::Locks,
        ],
        k => vec![k],
    };
    for k in kinds {
        match k {
            LoadKind::Compute => compute::start(instances, w)?,
            LoadKind::Io => io::start(instances, w)?,
            LoadKind::Network => net::start(instances, w)?,
            LoadKind::Locks => locks::start(instances, w)?,
            LoadKind::Cache => cache::start(instances, w)?,
            LoadKind::All => unreachable!("expanded above"),
        }
    }
    Ok(())
}

/// Run the load until `stop` is raised, `args.timeout` has passed, or the
/// process that started this one is gone; then stop the workers and report.
pub fn run(args: &WorkerArgs, stop: Arc<AtomicBool>) -> WorkerReport {
    let t0 = Instant::now();
    let parent = std::os::unix::process::parent_id();
    let env = Arc::new(Env {
        stop,
        dir: args.dir.clone(),
        errors: Mutex::new(Vec::new()),
    });
    let mut w = Workers {
        env: env.clone(),
        counters: Vec::new(),
        threads: Vec::new(),
    };
    if let Err(e) = start(args.kind, args.instances, &mut w) {
        env.fail(format!("start the {} load: {e}", args.kind));
    }
    let mut orphaned = false;
    while !env.stopped() {
        orphaned = std::os::unix::process::parent_id() != parent;
        if orphaned || t0.elapsed() >= args.timeout {
            env.stop.store(true, Ordering::Relaxed);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let joined = Instant::now() + JOIN_GRACE;
    while w.threads.iter().any(|t| !t.is_finished()) && Instant::now() < joined {
        std::thread::sleep(Duration::from_millis(5));
    }
    let stuck = w.threads.iter().filter(|t| !t.is_finished()).count();
    if stuck > 0 {
        env.fail(format!(
            "{stuck} worker threads did not stop within {JOIN_GRACE:?}"
        ));
    }
    let elapsed = t0.elapsed();
    let components = w
        .counters
        .iter()
        .map(|c| {
            let ops = c.ops.load(Ordering::Relaxed);
            ComponentMetrics {
                component: c.name.into(),
                ops,
                ops_per_s: ops as f64 / elapsed.as_secs_f64().max(1e-9),
                op: c.op.into(),
            }
        })
        .collect();
    let errors = std::mem::take(&mut *env.errors.lock().unwrap_or_else(|e| e.into_inner()));
    WorkerReport {
        components,
        errors,
        elapsed_ns: elapsed.as_nanos() as u64,
        orphaned,
    }
}

/// The load process (`rtmgr __load ARGS`): run until SIGINT/SIGTERM, the
/// timeout or the parent's end, then write `METRICS_FILE` into the directory
/// — or, when the parent is gone (killed), remove the directory, which nobody
/// else will. Errors (also the workers') are returned after the report is written.
pub fn main(args: &[String]) -> Result<(), String> {
    let args = WorkerArgs::parse(args)?;
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone())
            .map_err(|e| format!("install the signal handler: {e}"))?;
    }
    let report = run(&args, stop);
    if report.orphaned {
        let _ = std::fs::remove_dir_all(&args.dir);
        return Ok(());
    }
    let text = serde_json::to_string(&report).map_err(|e| e.to_string())?;
    let tmp = args.dir.join(format!("{METRICS_FILE}.tmp"));
    std::fs::write(&tmp, text)
        .and_then(|()| std::fs::rename(&tmp, args.dir.join(METRICS_FILE)))
        .map_err(|e| format!("write the load's metrics into {}: {e}", args.dir.display()))?;
    match report.errors.first() {
        Some(e) => Err(format!("the built-in {} load failed: {e}", args.kind)),
        None => Ok(()),
    }
}
