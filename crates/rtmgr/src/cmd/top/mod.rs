//! `rtmgr top`: the machine live (issue 23) — per RT CPU the wake-up latency
//! (ARTiS §2.2: the latency guard's samples), steal, IRQs and kernel threads,
//! guests lent; per NRT CPU the load; the reservations and their budgets
//! (budget-based RTAI §3); the daemon's counters (DROPS §4.1). Read-only but
//! for `--probe`. Files: snapshot.rs (the data, JSON schema rtmgr.top/1),
//! collect.rs (daemon or partition in place; `--probe` is
//! rtmgr_linux::probe::live), view.rs (keys,
//! sorting); with the cargo feature `top`: render.rs and tui.rs (ratatui).

mod collect;
#[cfg(feature = "top")]
mod render;
#[cfg(all(test, feature = "top"))]
mod render_tests;
pub mod snapshot;
#[cfg(feature = "top")]
mod tui;
#[cfg(feature = "top")]
mod view;

use super::{bad_input, host, Outcome};
use collect::Collector;
use rtmgr_linux::journal::DEFAULT_JOURNAL;
use rtmgr_linux::probe::live::LiveProbe;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct TopArgs {
    /// Print one snapshot and exit: two readings --interval apart (the deltas need both).
    #[arg(long)]
    pub once: bool,
    /// With --once: versioned JSON (schema rtmgr.top/1); works in a build without the feature `top`.
    #[arg(long, requires = "once")]
    pub json: bool,
    /// Refresh interval (e.g. 1s, 500ms).
    #[arg(long, default_value = "1s", value_parser = crate::cmd::flags::parse_duration)]
    pub interval: Duration,
    /// Without a daemon: measure wake-up latency on the RT CPUs with pinned
    /// SCHED_FIFO probe threads (the one change top makes; named on screen).
    #[arg(long)]
    pub probe: bool,
    /// The probe threads' SCHED_FIFO priority.
    #[arg(long, default_value_t = 99, requires = "probe", value_parser = clap::value_parser!(u8).range(1..=99))]
    pub probe_priority: u8,
    /// The daemon's socket (default: $RTMGR_SOCKET, else /run/rtmgr/rtmgr.sock).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// With --once without --json: the width of the text screen.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u16).range(80..=400))]
    pub width: u16,
    /// The partition journal read when no daemon runs.
    #[arg(long, default_value = DEFAULT_JOURNAL, value_name = "PATH")]
    pub journal: PathBuf,
}

/// The error of a build without the feature for the screen.
pub const NEEDS_FEATURE: &str =
    "rtmgr top needs the cargo feature `top`, and this rtmgr was built without it; \
     rebuild with `cargo install --path crates/rtmgr --features top` (the Debian package has it); \
     `rtmgr top --once --json` works without it";

pub fn run(a: TopArgs) -> anyhow::Result<Outcome> {
    let started = Instant::now();
    if a.interval < Duration::from_millis(100) {
        return bad_input(format!("--interval {:?}: at least 100ms", a.interval));
    }
    if !cfg!(feature = "top") && !a.json {
        return bad_input(NEEDS_FEATURE);
    }
    let socket = a
        .socket
        .clone()
        .unwrap_or_else(rtmgr_rt::client::socket_path);
    let mut c = Collector::new(host()?, socket, a.journal.clone());
    if a.probe {
        start_probe(&mut c, &a)?;
    }
    if a.once {
        c.collect();
        std::thread::sleep(a.interval);
        let snap = c.collect();
        print_once(&snap, &a)?;
        tracing::debug!("--once in {:?}", started.elapsed());
        return Ok(Outcome::Ok);
    }
    #[cfg(feature = "top")]
    tui::run(&mut c, a.interval, started)?;
    Ok(Outcome::Ok)
}

/// `--probe`: only without a daemon (its guard measures already), as root.
fn start_probe(c: &mut Collector, a: &TopArgs) -> anyhow::Result<()> {
    let (rt, _, _) = c.partition();
    if c.collect().daemon.is_some() {
        tracing::warn!("--probe not started: the daemon's latency guard measures the RT CPUs");
        return Ok(());
    }
    if rt.is_empty() {
        return bad_input("--probe: no RT CPUs (no daemon and no partition applied)");
    }
    let host = host()?;
    super::require_root(&host, "rtmgr top --probe")?;
    let applied = rtmgr_linux::partition::current(&host, &a.journal)
        .ok()
        .flatten();
    c.probe = Some(LiveProbe::start(&host, applied, &rt, a.probe_priority)?);
    Ok(())
}

fn print_once(snap: &snapshot::Snapshot, a: &TopArgs) -> anyhow::Result<()> {
    if a.json {
        println!("{}", serde_json::to_string_pretty(snap)?);
        return Ok(());
    }
    #[cfg(feature = "top")]
    {
        let view = view::View::new(false);
        let height = render::text_height(snap, a.width);
        println!("{}", render::to_text(snap, &view, a.width, height));
    }
    Ok(())
}
