//! `rtmgr reserve … -- CMD`, `rtmgr reserve --pid PID …`, `rtmgr
//! reservations`, `rtmgr release ID`: the daemon's client on the command line
//! (budget-based RTAI §3: W every P; DROPS §4.1: resources on request).
//! `reserve` asks for the reservation for itself, then becomes CMD (exec):
//! the reservation lives as long as CMD; with `--pid` it is for an existing
//! process, and lives as long as that one.

use super::flags::parse_reservation_ns;
use super::{bad_input, Outcome};
use rtmgr_core::admission::fmt_duration;
use rtmgr_core::admission::memory::{fmt_bytes, parse_bytes};
use rtmgr_rt::client::{socket_path, Client, ClientError, IrqRef, ReservationInfo, ReserveRequest};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ReserveArgs {
    /// Period P, e.g. 4ms.
    #[arg(long, value_parser = parse_reservation_ns)]
    pub period: u64,
    /// Budget W per period, e.g. 1ms.
    #[arg(long, value_parser = parse_reservation_ns)]
    pub budget: u64,
    /// Deadline D ≤ P (default P).
    #[arg(long, value_parser = parse_reservation_ns)]
    pub deadline: Option<u64>,
    /// rt0 (hard: SCHED_DEADLINE) or rt1[:PRIO] (soft: SCHED_FIFO).
    #[arg(long, default_value = "rt0")]
    pub class: String,
    /// An RT CPU (default: any).
    #[arg(long)]
    pub cpu: Option<u32>,
    /// An IRQ (number or /proc/interrupts name) to steer to the reservation's CPU.
    #[arg(long)]
    pub irq: Option<String>,
    /// A name shown by `rtmgr reservations`.
    #[arg(long)]
    pub name: Option<String>,
    #[command(flatten)]
    pub resources: ResourceArgs,
    #[command(flatten)]
    pub socket: SocketArg,
    #[command(flatten)]
    pub target: TargetArgs,
    /// The program to run under the reservation (not with --pid).
    #[arg(last = true, required_unless_present = "pid")]
    pub command: Vec<String>,
}

/// An existing process to put under the reservation instead of a program
/// (root; or a user whose [[client]] rule has existing_processes, for its
/// own processes). The reservation ends when that process exits.
#[derive(clap::Args)]
pub struct TargetArgs {
    /// The process (its main thread unless --all-threads, --tid or --thread).
    #[arg(long, value_name = "PID", conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Every thread the process has now.
    #[arg(long, requires = "pid", conflicts_with_all = ["tid", "thread"])]
    pub all_threads: bool,
    /// These threads of the process.
    #[arg(long, value_name = "TID", requires = "pid", num_args = 1..)]
    pub tid: Vec<u32>,
    /// The process's threads with these names (as `ps -L` shows them; `*` and
    /// `?` match any characters and any one), e.g. --thread 'data-loop*'.
    /// Each name must match a thread.
    #[arg(long, value_name = "NAME", requires = "pid", conflicts_with = "tid", num_args = 1..)]
    pub thread: Vec<String>,
}

/// Resources beside CPU time (DROPS §4.3–4.4), served by the daemon's
/// `[resources]`: refused with the numbers when the machine cannot give them.
#[derive(clap::Args)]
pub struct ResourceArgs {
    /// Locked memory the program needs, e.g. 64M (counted against MemAvailable
    /// and the client rule's memlock; RLIMIT_MEMLOCK is raised to it).
    #[arg(long, value_name = "SIZE", value_parser = parse_bytes)]
    pub mlock: Option<u64>,
    /// I/O class of the program's threads: rt or be (default: the daemon's).
    #[arg(long, value_name = "CLASS", value_parser = clap::builder::PossibleValuesParser::new(["rt", "be"]))]
    pub io_class: Option<String>,
    /// Share of the L3 cache the program needs, 0..1 (where resctrl exists).
    #[arg(long, value_name = "F")]
    pub cache_share: Option<f64>,
}

impl ResourceArgs {
    fn apply(self, r: &mut ReserveRequest) {
        r.memlock_bytes = self.mlock;
        r.io_class = self.io_class;
        r.cache_share = self.cache_share;
    }
}

#[derive(clap::Args)]
pub struct SocketArg {
    /// The daemon's socket (default: $RTMGR_SOCKET or /run/rtmgr/rtmgr.sock).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
}

impl SocketArg {
    fn connect(&self) -> Result<Client, ClientError> {
        Client::connect_to(&self.socket.clone().unwrap_or_else(socket_path))
    }
}

#[derive(clap::Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub socket: SocketArg,
    #[arg(long)]
    pub json: bool,
}

#[derive(clap::Args)]
pub struct ReleaseArgs {
    pub id: u64,
    #[command(flatten)]
    pub socket: SocketArg,
}

/// A refusal is not an error of rtmgr: one line and exit code 1.
fn client_err(e: ClientError) -> anyhow::Result<Outcome> {
    match e {
        ClientError::Refused { .. } | ClientError::NoDaemon { .. } => {
            eprintln!("rtmgr: {e}");
            Ok(Outcome::Code(1))
        }
        e => Err(e.into()),
    }
}

pub fn reserve(a: ReserveArgs) -> anyhow::Result<Outcome> {
    let mut r = ReserveRequest::new(a.period, a.budget);
    r.deadline_ns = a.deadline;
    r.class = a.class;
    r.cpu = a.cpu;
    r.name = a.name;
    r.irq = a.irq.map(|s| match s.parse::<u32>() {
        Ok(n) => IrqRef::Number(n),
        Err(_) => IrqRef::Name(s),
    });
    a.resources.apply(&mut r);
    r.pid = a.target.pid;
    r.all_threads = a.target.all_threads;
    r.threads = a.target.tid;
    // (clap's `requires = "pid"` lapses once a command is given: `--pid`
    // conflicts with it.)
    if a.target.pid.is_none() && !(r.threads.is_empty() && a.target.thread.is_empty()) {
        return bad_input("--tid and --thread pick threads of the process given by --pid");
    }
    if let (Some(pid), false) = (a.target.pid, a.target.thread.is_empty()) {
        match rtmgr_linux::tasks::threads_named(&rtmgr_linux::Host::real(), pid, &a.target.thread) {
            Ok(tids) => r.threads = tids,
            Err(e) => return bad_input(e),
        }
    }
    if let Err(rtmgr_core::protocol::Invalid::Error(e)) = r.validate() {
        return bad_input(e.message);
    }
    let granted = match a.socket.connect().and_then(|mut c| c.reserve(r)) {
        Ok(g) => g,
        Err(e) => return client_err(e),
    };
    eprintln!("rtmgr: {}", describe(&granted));
    if a.target.pid.is_some() {
        // The reservation is the process's now, until it exits (or release).
        return Ok(Outcome::Ok);
    }
    let err = std::process::Command::new(&a.command[0])
        .args(&a.command[1..])
        .exec();
    anyhow::bail!("exec {}: {err}", a.command[0])
}

fn describe(g: &ReservationInfo) -> String {
    let threads: Vec<String> = g.threads.iter().map(u32::to_string).collect();
    let mut s = format!(
        "reservation {} for process {} (threads {}) on CPU {}: {} {} every {} (deadline {})",
        g.id,
        g.pid,
        threads.join(","),
        g.cpu,
        g.policy,
        fmt_duration(g.budget_ns),
        fmt_duration(g.period_ns),
        fmt_duration(g.deadline_ns)
    );
    if let Some(b) = g.memlock_reserved {
        s += &format!("; locked memory {} reserved", fmt_bytes(b));
    }
    if let Some(c) = &g.io_class {
        s += &format!("; I/O class {c}");
    }
    if let Some(c) = &g.cache {
        s += &format!("; cache: {c}");
    }
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    if !g.asleep.is_empty() {
        s += &format!("; asleep {}: in effect when they wake", list(&g.asleep));
    }
    if !g.stopped.is_empty() {
        s += &format!(
            "; stopped {}: in effect when they are continued",
            list(&g.stopped)
        );
    }
    if !g.pending.is_empty() {
        s += &format!(
            "; pending {}: SCHED_FIFO 1 until each first runs on CPU {}, then SCHED_DEADLINE",
            list(&g.pending),
            g.cpu
        );
    }
    s
}

pub fn list(a: ListArgs) -> anyhow::Result<Outcome> {
    let rs = match a.socket.connect().and_then(|mut c| c.list()) {
        Ok(r) => r,
        Err(e) => return client_err(e),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rs)?);
        return Ok(Outcome::Ok);
    }
    if rs.is_empty() {
        println!("no reservations");
        return Ok(Outcome::Ok);
    }
    println!(
        "{:>4} {:>7} {:>6} {:>3} {:<15} {:>8} {:>8} {:>8} {:<12} name",
        "id", "pid", "uid", "cpu", "policy", "budget", "period", "deadline", "threads"
    );
    let any_pending = rs.iter().any(|g| !g.pending.is_empty());
    for g in rs {
        // A pending thread (SCHED_FIFO 1 until it runs on its RT CPU) is marked "*".
        let threads: Vec<String> = g
            .threads
            .iter()
            .map(|t| format!("{t}{}", if g.pending.contains(t) { "*" } else { "" }))
            .collect();
        println!(
            "{:>4} {:>7} {:>6} {:>3} {:<15} {:>8} {:>8} {:>8} {:<12} {}",
            g.id,
            g.pid,
            g.uid,
            g.cpu,
            format!("{} {}", g.policy.trim_start_matches("SCHED_"), g.class),
            fmt_duration(g.budget_ns),
            fmt_duration(g.period_ns),
            fmt_duration(g.deadline_ns),
            threads.join(","),
            g.name.unwrap_or_default()
        );
    }
    if any_pending {
        println!("* pending: SCHED_FIFO 1 until the thread first runs on its RT CPU, then SCHED_DEADLINE (docs/protocol.md)");
    }
    Ok(Outcome::Ok)
}

pub fn release(a: ReleaseArgs) -> anyhow::Result<Outcome> {
    match a.socket.connect().and_then(|mut c| c.release(a.id)) {
        Ok(()) => {
            println!("released reservation {}", a.id);
            Ok(Outcome::Ok)
        }
        Err(e) => client_err(e),
    }
}
