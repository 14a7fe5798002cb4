//! A private tracefs instance (McKenney §2.1: measure without changing the
//! machine): a thread that gets its own mount namespace, mounts tracefs there
//! (no other process sees the mount), creates `instances/rtmgr-<pid>-<n>`
//! with the events and CPUs asked for, streams each CPU's binary
//! `trace_pipe_raw` (decoded by `rtmgr_core::trace::raw`: ns timestamps, no
//! text formatting in the kernel) to a sink, and removes the instance when it
//! stops — also on error. An instance
//! left by a killed rtmgr is removed by `remove_stale_instances` (called by
//! `rtmgr partition reset`). Every file access goes through a `Host`: the real
//! one, as tracefs exists only on the running kernel (mounted privately here).

mod decoder;

use crate::{Host, HostError};
use decoder::{decoder, name_tasks};
use rtmgr_core::trace::raw::Decoder;
use rtmgr_core::trace::Event;
use rtmgr_core::CpuSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// Where tracefs is mounted in the tracer thread's private namespace.
const MOUNT: &str = "/sys/kernel/tracing";
/// Instance names start with this, then the owner's pid.
pub const INSTANCE_PREFIX: &str = "rtmgr-";
/// How long the reader waits for data before it checks its controls again.
const IDLE_POLL: Duration = Duration::from_millis(2);
/// How long a paused reader (events off, see `TraceSpec::events_only_with_pids`)
/// sleeps on its controls between checks of the stop flag: a stop also sends
/// `Control::Wake`, so this is only a backstop.
const PAUSED_POLL: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("tracing is not available here: {0}")]
    Unavailable(String),
    #[error("tracefs {what}: {cause}")]
    Io { what: String, cause: std::io::Error },
    #[error("tracer thread: {0}")]
    Thread(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> TraceError {
    let what = what.into();
    move |cause| TraceError::Io { what, cause }
}

/// A host error as a tracefs error doing `what` (the same message as the I/O error).
fn host_io(what: impl Into<String>) -> impl FnOnce(HostError) -> TraceError {
    let what = what.into();
    move |e| TraceError::Io {
        what,
        cause: e.into_io(),
    }
}

/// What to trace.
#[derive(Debug, Clone)]
pub struct TraceSpec {
    /// CPUs whose events are recorded (tracing_cpumask).
    pub cpus: CpuSet,
    /// Events as "group/name" (or "group" for a whole group); those the
    /// kernel lacks are skipped and named in `TraceStats::missing_events`.
    pub events: Vec<String>,
    /// Ring buffer per CPU, KiB.
    pub buffer_kb: u32,
    /// Record only these tasks (set_event_pid); None = every task.
    pub pids: Option<Vec<u32>>,
    /// A watch that acts on what it reads: the reader wakes at every event
    /// (`buffer_percent` 0) and runs at this SCHED_FIFO priority. None: a
    /// recorder, woken when pages fill, at the creator's policy.
    pub react_at_priority: Option<u8>,
    /// Enable the events only while `pids` names at least one task. A
    /// syscall event enabled in any instance puts every thread of the
    /// machine on the slow system-call path (TIF_SYSCALL_TRACEPOINT), even
    /// with a pid filter, so a watch with nobody to watch turns them off and
    /// its reader sleeps on its controls instead of polling.
    pub events_only_with_pids: bool,
}

/// What a finished trace reports.
#[derive(Debug, Clone, Default)]
pub struct TraceStats {
    pub events: u64,
    /// Events the kernel overwrote before they were read (per-CPU overruns).
    pub lost: u64,
    pub missing_events: Vec<String>,
    pub instance: String,
    /// CPU time of the reader thread, ns.
    pub cpu_ns: u64,
}

/// The consumer of the trace: called with each batch of parsed events, and
/// (with an empty batch) at least every few ms while the trace is quiet.
pub type Sink = Box<dyn FnMut(&[Event]) + Send>;

/// Messages to the tracer thread (path operations happen only there).
enum Control {
    /// Record only these tasks from now on.
    Pids(Vec<u32>),
    /// Look at the stop flag now (a paused reader sleeps on the controls).
    Wake,
}

/// A running trace. `finish` (or drop) stops it and removes the instance.
pub struct TraceSession {
    stop: Arc<AtomicBool>,
    control: mpsc::Sender<Control>,
    events: Arc<AtomicU64>,
    handle: Option<JoinHandle<Result<TraceStats, TraceError>>>,
}

static INSTANCES: AtomicU64 = AtomicU64::new(0);

impl TraceSession {
    /// Set the instance up and start streaming; returns once tracing is on.
    pub fn start(spec: TraceSpec, sink: Sink) -> Result<TraceSession, TraceError> {
        let stop = Arc::new(AtomicBool::new(false));
        let events = Arc::new(AtomicU64::new(0));
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), TraceError>>();
        let (control, control_rx) = mpsc::channel::<Control>();
        let (s, ev) = (stop.clone(), events.clone());
        let handle = std::thread::Builder::new()
            .name("rtmgr-tracer".into())
            .spawn(move || run(spec, sink, s, ev, control_rx, ready_tx))
            .map_err(io("spawn the tracer thread"))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(TraceSession {
                stop,
                control,
                events,
                handle: Some(handle),
            }),
            Ok(Err(e)) => {
                let _ = handle.join();
                Err(e)
            }
            Err(_) => {
                let r = handle.join();
                Err(match r {
                    Ok(Err(e)) => e,
                    _ => TraceError::Thread("died during set-up".into()),
                })
            }
        }
    }

    /// Record only these tasks from now on (an empty list records none).
    pub fn set_pids(&self, pids: Vec<u32>) {
        let _ = self.control.send(Control::Pids(pids));
    }

    /// Events parsed so far.
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }

    /// Stop, drain, remove the instance; what it recorded.
    pub fn finish(mut self) -> Result<TraceStats, TraceError> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.control.send(Control::Wake);
        match self.handle.take().map(|h| h.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(TraceError::Thread("panicked".into())),
            None => Err(TraceError::Thread("already finished".into())),
        }
    }
}

impl Drop for TraceSession {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.control.send(Control::Wake);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

/// Give this thread a private tracefs at MOUNT.
fn mount_privately() -> Result<PathBuf, TraceError> {
    rtmgr_sys::ns::private_mounts_for_this_thread()
        .map_err(|e| TraceError::Unavailable(format!("private mount namespace: {e}")))?;
    let m = Path::new(MOUNT);
    rtmgr_sys::ns::mount_tracefs(m)
        .map_err(|e| TraceError::Unavailable(format!("mount tracefs at {MOUNT}: {e}")))?;
    Ok(m.to_path_buf())
}

fn write(host: &Host, path: &Path, value: &str) -> Result<(), TraceError> {
    host.write_truncating(path, value)
        .map_err(host_io(format!("write {value:?} to {}", path.display())))
}

/// Turn the instance off and remove it (best effort: after a failure).
fn discard(host: &Host, inst: &Path) {
    let _ = host.write_truncating(inst.join("tracing_on"), "0");
    let _ = host.rmdir(inst);
}

/// Events per CPU the kernel overwrote ("overrun:" in per_cpu/cpuN/stats).
fn overruns(host: &Host, inst: &Path, cpus: &CpuSet) -> u64 {
    cpus.iter()
        .filter_map(|c| {
            host.read_in_one(inst.join(format!("per_cpu/cpu{c}/stats")))
                .ok()
        })
        .flat_map(|t| {
            t.lines()
                .filter_map(|l| l.strip_prefix("overrun:"))
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

fn configure(
    host: &Host,
    inst: &Path,
    spec: &TraceSpec,
    stats: &mut TraceStats,
) -> Result<(), TraceError> {
    write(host, &inst.join("trace_clock"), "mono")?;
    // A watch wakes at the first event, not when half the buffer is full.
    let percent = inst.join("buffer_percent");
    if spec.react_at_priority.is_some() && host.exists(&percent) {
        write(host, &percent, "0")?;
    }
    write(
        host,
        &inst.join("buffer_size_kb"),
        &spec.buffer_kb.to_string(),
    )?;
    write(host, &inst.join("tracing_cpumask"), &spec.cpus.to_mask(1))?;
    if let Some(p) = &spec.pids {
        set_pids(host, inst, p)?;
    }
    for ev in &spec.events {
        if !host.exists(inst.join("events").join(ev).join("enable")) {
            stats.missing_events.push(ev.clone());
        }
    }
    if events_wanted(spec, spec.pids.as_deref()) {
        enable_events(host, inst, &spec.events, true)?;
    }
    write(host, &inst.join("tracing_on"), "1")
}

/// Should the events be on, with these pids recorded?
fn events_wanted(spec: &TraceSpec, pids: Option<&[u32]>) -> bool {
    !spec.events_only_with_pids || pids.is_some_and(|p| !p.is_empty())
}

/// Turn the events the kernel has on or off.
fn enable_events(host: &Host, inst: &Path, events: &[String], on: bool) -> Result<(), TraceError> {
    for ev in events {
        let path = inst.join("events").join(ev).join("enable");
        if host.exists(&path) {
            write(host, &path, if on { "1" } else { "0" })?;
        }
    }
    Ok(())
}

fn set_pids(host: &Host, inst: &Path, pids: &[u32]) -> Result<(), TraceError> {
    // An empty set_event_pid records every task: a pid that cannot exist
    // (beyond pid_max) records none.
    let text = if pids.is_empty() {
        "4194304".to_string()
    } else {
        pids.iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(" ")
    };
    write(host, &inst.join("set_event_pid"), &text)
}

/// The tracer thread: set the instance up, say whether that worked, stream
/// until stopped, then remove the instance.
fn run(
    spec: TraceSpec,
    sink: Sink,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicU64>,
    control: mpsc::Receiver<Control>,
    ready: mpsc::Sender<Result<(), TraceError>>,
) -> Result<TraceStats, TraceError> {
    if let Some(p) = spec.react_at_priority {
        if let Err(e) = crate::sched::set_policy(0, crate::sched::Policy::Fifo { priority: p }) {
            tracing::debug!("tracer at SCHED_FIFO {p}: {e}");
        }
    }
    let host = Host::real();
    let mut live = match Instance::set_up(&host, &spec) {
        Ok(live) => {
            let _ = ready.send(Ok(()));
            live
        }
        Err(e) => {
            let _ = ready.send(Err(TraceError::Unavailable(e.to_string())));
            return Err(e);
        }
    };
    let streams = Streams {
        spec: &spec,
        stop: &stop,
        count: &count,
        control: &control,
    };
    if let Err(e) = streams.run(&host, &mut live, sink) {
        discard(&host, &live.path);
        return Err(e);
    }
    let Instance {
        path,
        mut stats,
        files,
        ..
    } = live;
    stats.lost = stats.lost.max(overruns(&host, &path, &spec.cpus));
    stats.cpu_ns = rtmgr_sys::time::thread_cpu_ns();
    drop(files);
    host.rmdir(&path)
        .map_err(host_io(format!("remove {}", path.display())))?;
    Ok(stats)
}

/// A configured instance, tracing, with its decoder and per-CPU pipes.
struct Instance {
    path: PathBuf,
    stats: TraceStats,
    decoder: Decoder,
    files: Vec<(u32, crate::host::File)>,
}

impl Instance {
    /// Mount tracefs privately, create and configure the instance, open each
    /// CPU's pipe; on a failure after the instance exists, remove it.
    fn set_up(host: &Host, spec: &TraceSpec) -> Result<Instance, TraceError> {
        let root = mount_privately()?;
        let name = format!(
            "{INSTANCE_PREFIX}{}-{}",
            std::process::id(),
            INSTANCES.fetch_add(1, Ordering::Relaxed)
        );
        let path = root.join("instances").join(&name);
        let mut stats = TraceStats {
            instance: name,
            ..Default::default()
        };
        host.mkdir(&path)
            .map_err(host_io(format!("create {}", path.display())))?;
        let opened = configure(host, &path, spec, &mut stats).and_then(|()| {
            let decoder = decoder(host, &root, &path, spec)?;
            let files = spec
                .cpus
                .iter()
                .map(|c| {
                    host.open_nonblocking(path.join(format!("per_cpu/cpu{c}/trace_pipe_raw")))
                        .map(|f| (c, f))
                        .map_err(host_io(format!("open cpu{c}/trace_pipe_raw")))
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((decoder, files))
        });
        match opened {
            Ok((decoder, files)) => Ok(Instance {
                path,
                stats,
                decoder,
                files,
            }),
            Err(e) => {
                discard(host, &path);
                Err(e)
            }
        }
    }
}

/// What the streaming loop reads its orders from and reports to.
struct Streams<'a> {
    spec: &'a TraceSpec,
    stop: &'a AtomicBool,
    count: &'a AtomicU64,
    control: &'a mpsc::Receiver<Control>,
}

impl Streams<'_> {
    /// Stream every CPU's pipe to the sink until stopped and drained.
    fn run(&self, host: &Host, live: &mut Instance, mut sink: Sink) -> Result<(), TraceError> {
        let spec = self.spec;
        let page_size = host
            .read_in_one(live.path.join("buffer_subbuf_size_kb"))
            .ok()
            .and_then(|t| t.trim().parse::<usize>().ok())
            .unwrap_or(4)
            * 1024;
        let mut page = vec![0u8; page_size];
        let mut batch: Vec<Event> = Vec::with_capacity(4096);
        let mut draining = false;
        let mut enabled = events_wanted(spec, spec.pids.as_deref());
        let inst = live.path.clone();
        let apply = |msg: Control, enabled: &mut bool| {
            let Control::Pids(p) = msg else { return };
            let want = events_wanted(spec, Some(&p));
            // Pids first when turning on (no event of another task slips in),
            // events first when turning off.
            if want {
                let _ = set_pids(host, &inst, &p);
            }
            if want != *enabled && enable_events(host, &inst, &spec.events, want).is_ok() {
                *enabled = want;
            }
            if !want {
                let _ = set_pids(host, &inst, &p);
            }
        };
        loop {
            while let Ok(msg) = self.control.try_recv() {
                apply(msg, &mut enabled);
            }
            if self.stop.load(Ordering::Relaxed) && !draining {
                let _ = write(host, &inst.join("tracing_on"), "0");
                draining = true;
            }
            let got = self.read_turn(host, live, &mut page, &mut batch, &mut sink)?;
            if got == 0 {
                sink(&[]);
                if draining {
                    return Ok(());
                }
                if !enabled {
                    // Paused: nothing can arrive until the controls change.
                    if let Ok(msg) = self.control.recv_timeout(PAUSED_POLL) {
                        apply(msg, &mut enabled);
                    }
                    continue;
                }
                use std::os::fd::AsFd;
                let fds: Vec<_> = live.files.iter().map(|(_, f)| f.as_fd()).collect();
                if rtmgr_sys::fd::wait_readable(&fds, IDLE_POLL.as_nanos() as u64).is_err() {
                    std::thread::sleep(IDLE_POLL);
                }
            }
        }
    }

    /// One turn over the CPUs' pipes, a few pages each (so no CPU starves the
    /// others), events to the sink; the bytes read.
    fn read_turn(
        &self,
        host: &Host,
        live: &mut Instance,
        page: &mut [u8],
        batch: &mut Vec<Event>,
        sink: &mut Sink,
    ) -> Result<usize, TraceError> {
        let mut got = 0;
        for (cpu, f) in live.files.iter_mut() {
            batch.clear();
            for _ in 0..16 {
                match f.read(page) {
                    Ok(0) => break,
                    Ok(n) => {
                        let info = live.decoder.page(*cpu, &page[..n], batch);
                        live.stats.lost += info.missed;
                        got += n;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        return Err(TraceError::Io {
                            what: format!("read cpu{cpu}/trace_pipe_raw"),
                            cause: e,
                        });
                    }
                }
            }
            name_tasks(host, &mut live.decoder, batch);
            live.stats.events += batch.len() as u64;
            self.count.store(live.stats.events, Ordering::Relaxed);
            if !batch.is_empty() {
                sink(batch);
            }
        }
        Ok(got)
    }
}

/// Run `f` on the instances directory of a private tracefs mount, in a
/// short-lived thread (path operations need the private namespace).
fn with_instances<T: Send + 'static>(
    f: impl FnOnce(&Host, &Path) -> Result<T, TraceError> + Send + 'static,
) -> Result<T, TraceError> {
    std::thread::spawn(move || f(&Host::real(), &mount_privately()?.join("instances")))
        .join()
        .map_err(|_| TraceError::Thread("panicked".into()))?
}

/// rtmgr's instances now (names), live or stale.
pub fn list_instances() -> Result<Vec<String>, TraceError> {
    with_instances(|host, dir| {
        let mut v: Vec<String> = host
            .list_dir(dir)
            .map_err(host_io("list instances"))?
            .into_iter()
            .filter(|n| n.starts_with(INSTANCE_PREFIX))
            .collect();
        v.sort();
        Ok(v)
    })
}

/// `remove_stale_instances`, said in one line for whoever reports it
/// (`rtmgr partition reset`, a starting daemon); None when nothing was left
/// (or tracefs could not be looked at: logged at debug level).
pub fn remove_stale_instances_said() -> Option<String> {
    match remove_stale_instances() {
        Ok(gone) if !gone.is_empty() => Some(format!(
            "removed tracer instances left by a killed rtmgr: {}",
            gone.join(", ")
        )),
        Ok(_) => None,
        Err(e) => {
            tracing::debug!("no tracer instances checked: {e}");
            None
        }
    }
}

/// Remove instances whose rtmgr is gone (killed before it could clean up);
/// returns their names.
pub fn remove_stale_instances() -> Result<Vec<String>, TraceError> {
    with_instances(|host, dir| {
        let mut removed = Vec::new();
        for name in host.list_dir(dir).map_err(host_io("list instances"))? {
            let Some(rest) = name.strip_prefix(INSTANCE_PREFIX) else {
                continue;
            };
            let pid: Option<u32> = rest.split('-').next().and_then(|p| p.parse().ok());
            let alive = pid.is_some_and(|p| !rtmgr_sys::process::is_gone(p as i32));
            if !alive {
                let path = dir.join(&name);
                let _ = host.write_truncating(path.join("tracing_on"), "0");
                host.rmdir(&path)
                    .map_err(host_io(format!("remove instance {name}")))?;
                removed.push(name);
            }
        }
        Ok(removed)
    })
}
