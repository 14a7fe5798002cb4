//! A private tracefs instance (McKenney §2.1: measure without changing the
//! machine): a thread that gets its own mount namespace, mounts tracefs there
//! (no other process sees the mount), creates `instances/rtmgr-<pid>-<n>`
//! with the events and CPUs asked for, streams each CPU's binary
//! `trace_pipe_raw` (decoded by `rtmgr_core::trace::raw`: ns timestamps, no
//! text formatting in the kernel) to a sink, and removes the instance when it
//! stops — also on error. An instance
//! left by a killed rtmgr is removed by `remove_stale_instances` (called by
//! `rtmgr partition reset`).

use rtmgr_core::trace::format::{parse_format, parse_header_page, EventFormat};
use rtmgr_core::trace::raw::Decoder;
use rtmgr_core::trace::{Comm, Event};
use rtmgr_core::CpuSet;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
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
/// sleeps on its controls between checks of the stop flag.
const PAUSED_POLL: Duration = Duration::from_millis(100);

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

/// Read a tracefs file in one large read: some (events/header_page) answer
/// only the first read(2) of an open file, so a small first read truncates them.
fn read_whole(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut buf = vec![0u8; 1 << 16];
    let mut n = 0;
    loop {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
        if n == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
    }
    buf.truncate(n);
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

fn write(path: &Path, value: &str) -> Result<(), TraceError> {
    std::fs::write(path, value).map_err(io(format!("write {value:?} to {}", path.display())))
}

/// Events per CPU the kernel overwrote ("overrun:" in per_cpu/cpuN/stats).
fn overruns(inst: &Path, cpus: &CpuSet) -> u64 {
    cpus.iter()
        .filter_map(|c| read_whole(&inst.join(format!("per_cpu/cpu{c}/stats"))).ok())
        .flat_map(|t| {
            t.lines()
                .filter_map(|l| l.strip_prefix("overrun:"))
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

fn configure(inst: &Path, spec: &TraceSpec, stats: &mut TraceStats) -> Result<(), TraceError> {
    write(&inst.join("trace_clock"), "mono")?;
    // A watch wakes at the first event, not when half the buffer is full.
    let percent = inst.join("buffer_percent");
    if spec.react_at_priority.is_some() && percent.exists() {
        write(&percent, "0")?;
    }
    write(&inst.join("buffer_size_kb"), &spec.buffer_kb.to_string())?;
    write(&inst.join("tracing_cpumask"), &spec.cpus.to_mask(1))?;
    if let Some(p) = &spec.pids {
        set_pids(inst, p)?;
    }
    for ev in &spec.events {
        if !inst.join("events").join(ev).join("enable").exists() {
            stats.missing_events.push(ev.clone());
        }
    }
    if events_wanted(spec, spec.pids.as_deref()) {
        enable_events(inst, &spec.events, true)?;
    }
    write(&inst.join("tracing_on"), "1")
}

/// Should the events be on, with these pids recorded?
fn events_wanted(spec: &TraceSpec, pids: Option<&[u32]>) -> bool {
    !spec.events_only_with_pids || pids.is_some_and(|p| !p.is_empty())
}

/// Turn the events the kernel has on or off.
fn enable_events(inst: &Path, events: &[String], on: bool) -> Result<(), TraceError> {
    for ev in events {
        let path = inst.join("events").join(ev).join("enable");
        if path.exists() {
            write(&path, if on { "1" } else { "0" })?;
        }
    }
    Ok(())
}

fn set_pids(inst: &Path, pids: &[u32]) -> Result<(), TraceError> {
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
    write(&inst.join("set_event_pid"), &text)
}

fn run(
    spec: TraceSpec,
    mut sink: Sink,
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
    let root = match mount_privately() {
        Ok(r) => r,
        Err(e) => {
            let _ = ready.send(Err(TraceError::Unavailable(e.to_string())));
            return Err(e);
        }
    };
    let name = format!(
        "{INSTANCE_PREFIX}{}-{}",
        std::process::id(),
        INSTANCES.fetch_add(1, Ordering::Relaxed)
    );
    let inst = root.join("instances").join(&name);
    let mut stats = TraceStats {
        instance: name,
        ..Default::default()
    };
    if let Err(e) = std::fs::create_dir(&inst).map_err(io(format!("create {}", inst.display()))) {
        let _ = ready.send(Err(TraceError::Unavailable(e.to_string())));
        return Err(e);
    }
    let result = configure(&inst, &spec, &mut stats).and_then(|()| {
        let decoder = decoder(&root, &inst, &spec)?;
        let files = spec
            .cpus
            .iter()
            .map(|c| {
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(inst.join(format!("per_cpu/cpu{c}/trace_pipe_raw")))
                    .map(|f| (c, f))
                    .map_err(io(format!("open cpu{c}/trace_pipe_raw")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((decoder, files))
    });
    let (mut decoder, mut files) = match result {
        Ok(r) => {
            let _ = ready.send(Ok(()));
            r
        }
        Err(e) => {
            let _ = std::fs::write(inst.join("tracing_on"), "0");
            let _ = std::fs::remove_dir(&inst);
            let _ = ready.send(Err(TraceError::Unavailable(e.to_string())));
            return Err(e);
        }
    };
    let page_size = read_whole(&inst.join("buffer_subbuf_size_kb"))
        .ok()
        .and_then(|t| t.trim().parse::<usize>().ok())
        .unwrap_or(4)
        * 1024;
    let mut page = vec![0u8; page_size];
    let mut batch: Vec<Event> = Vec::with_capacity(4096);
    let mut draining = false;
    let mut enabled = events_wanted(&spec, spec.pids.as_deref());
    let apply = |msg: Control, enabled: &mut bool| {
        let Control::Pids(p) = msg;
        let want = events_wanted(&spec, Some(&p));
        // Pids first when turning on (no event of another task slips in),
        // events first when turning off.
        if want {
            let _ = set_pids(&inst, &p);
        }
        if want != *enabled && enable_events(&inst, &spec.events, want).is_ok() {
            *enabled = want;
        }
        if !want {
            let _ = set_pids(&inst, &p);
        }
    };
    loop {
        while let Ok(msg) = control.try_recv() {
            apply(msg, &mut enabled);
        }
        if stop.load(Ordering::Relaxed) && !draining {
            let _ = write(&inst.join("tracing_on"), "0");
            draining = true;
        }
        let mut got = 0;
        for (cpu, f) in files.iter_mut() {
            batch.clear();
            // At most a few pages per CPU per turn, so no CPU starves the others.
            for _ in 0..16 {
                match f.read(&mut page) {
                    Ok(0) => break,
                    Ok(n) => {
                        let info = decoder.page(*cpu, &page[..n], &mut batch);
                        stats.lost += info.missed;
                        got += n;
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        let _ = std::fs::write(inst.join("tracing_on"), "0");
                        let _ = std::fs::remove_dir(&inst);
                        return Err(TraceError::Io {
                            what: format!("read cpu{cpu}/trace_pipe_raw"),
                            cause: e,
                        });
                    }
                }
            }
            name_tasks(&mut decoder, &mut batch);
            stats.events += batch.len() as u64;
            count.store(stats.events, Ordering::Relaxed);
            if !batch.is_empty() {
                sink(&batch);
            }
        }
        if got == 0 {
            sink(&[]);
            if draining {
                break;
            }
            if !enabled {
                // Paused: nothing can arrive until the controls change.
                if let Ok(msg) = control.recv_timeout(PAUSED_POLL) {
                    apply(msg, &mut enabled);
                }
                continue;
            }
            use std::os::fd::AsFd;
            let fds: Vec<_> = files.iter().map(|(_, f)| f.as_fd()).collect();
            if rtmgr_sys::fd::wait_readable(&fds, IDLE_POLL.as_nanos() as u64).is_err() {
                std::thread::sleep(IDLE_POLL);
            }
        }
    }
    stats.lost = stats.lost.max(overruns(&inst, &spec.cpus));
    stats.cpu_ns = rtmgr_sys::time::thread_cpu_ns();
    drop(files);
    std::fs::remove_dir(&inst).map_err(io(format!("remove {}", inst.display())))?;
    Ok(stats)
}

/// Raw records carry only pids: name the tasks no switch named yet from /proc.
fn name_tasks(decoder: &mut Decoder, batch: &mut [Event]) {
    let unnamed = decoder.unnamed(batch);
    if unnamed.is_empty() {
        return;
    }
    for pid in &unnamed {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|c| c.trim().to_string())
            .unwrap_or_else(|_| format!("pid {pid}"));
        decoder.learn_comm(*pid, &comm);
    }
    let unknown = Comm::new("?");
    for e in batch.iter_mut().filter(|e| e.comm == unknown) {
        e.comm = decoder.comm_of(e.pid);
    }
}

/// The layouts of the enabled events (whole groups expanded) and the page
/// header; kernel symbols when workqueue functions must be named.
fn decoder(root: &Path, inst: &Path, spec: &TraceSpec) -> Result<Decoder, TraceError> {
    let path = root.join("events/header_page");
    let text = read_whole(&path).map_err(io(format!("read {}", path.display())))?;
    let header = parse_header_page(&text).ok_or_else(|| {
        TraceError::Unavailable(format!("{}: unknown layout: {text:?}", path.display()))
    })?;
    let mut formats: Vec<EventFormat> = Vec::new();
    for ev in &spec.events {
        let dir = inst.join("events").join(ev);
        let one = dir.join("format");
        let files: Vec<PathBuf> = if one.exists() {
            vec![one]
        } else {
            std::fs::read_dir(&dir)
                .map(|d| {
                    d.flatten()
                        .map(|e| e.path().join("format"))
                        .filter(|p| p.exists())
                        .collect()
                })
                .unwrap_or_default()
        };
        formats.extend(
            files
                .iter()
                .filter_map(|f| read_whole(f).ok())
                .filter_map(|t| parse_format(&t)),
        );
    }
    let symbols = if spec.events.iter().any(|e| e.starts_with("workqueue")) {
        kernel_symbols()
    } else {
        Vec::new()
    };
    Ok(Decoder::new(header, &formats, symbols))
}

/// Text symbols of /proc/kallsyms (zeros when not root: then addresses show).
fn kernel_symbols() -> Vec<(u64, String)> {
    let text = std::fs::read_to_string("/proc/kallsyms").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let kind = f.next()?;
            let name = f.next()?;
            (addr != 0 && matches!(kind, "t" | "T")).then(|| (addr, name.to_string()))
        })
        .collect()
}

/// Run `f` on the instances directory of a private tracefs mount, in a
/// short-lived thread (path operations need the private namespace).
fn with_instances<T: Send + 'static>(
    f: impl FnOnce(&Path) -> Result<T, TraceError> + Send + 'static,
) -> Result<T, TraceError> {
    std::thread::spawn(move || f(&mount_privately()?.join("instances")))
        .join()
        .map_err(|_| TraceError::Thread("panicked".into()))?
}

/// rtmgr's instances now (names), live or stale.
pub fn list_instances() -> Result<Vec<String>, TraceError> {
    with_instances(|dir| {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map_err(io("list instances"))?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(INSTANCE_PREFIX))
            .collect();
        v.sort();
        Ok(v)
    })
}

/// Remove instances whose rtmgr is gone (killed before it could clean up);
/// returns their names.
pub fn remove_stale_instances() -> Result<Vec<String>, TraceError> {
    with_instances(|dir| {
        let mut removed = Vec::new();
        for e in std::fs::read_dir(dir)
            .map_err(io("list instances"))?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(rest) = name.strip_prefix(INSTANCE_PREFIX) else {
                continue;
            };
            let pid: Option<u32> = rest.split('-').next().and_then(|p| p.parse().ok());
            let alive = pid.is_some_and(|p| !rtmgr_sys::process::is_gone(p as i32));
            if !alive {
                let _ = std::fs::write(e.path().join("tracing_on"), "0");
                std::fs::remove_dir(e.path()).map_err(io(format!("remove instance {name}")))?;
                removed.push(name);
            }
        }
        Ok(removed)
    })
}
