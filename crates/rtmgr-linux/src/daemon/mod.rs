//! `rtmgr serve`: the resource manager that owns the RT CPUs over time and
//! grants reservations on request (DROPS §4.1: Rmgr owns the resources and
//! gives them to tasks through a protocol, configured by a script; ARTiS §4:
//! capacity and periodicity per RT task, EDF or RM per RT CPU; McKenney §5
//! rule 2: a utilisation cap; budget-based RTAI §3: W every P).
//!
//! Files: `config.rs` (the TOML), `startup.rs` (ownership, adoption after a
//! crash, `reset_machine`), `domains.rs` (one root domain per RT CPU),
//! `dl_leak.rs` (deadline bandwidth the kernel leaks, given back),
//! `manager/` (requests → grants: the API every front end calls; giving
//! back in `revoke.rs`, list and status in `queries.rs`, a grant in three
//! parts in `granting.rs`), `grant_worker.rs` (a grant's kernel steps off
//! the request loop),
//! `grant/` (what a grant changes, as a pipeline of steps, and its undo), `grants_journal.rs` (grants
//! journalled before they take effect), `release.rs` (a deadline grant's
//! placement given back a period after its policy), `peer.rs` (who the client is),
//! `server.rs` (the Unix socket), `reconcile.rs` (drift), `notify.rs`
//! (systemd), `rtkit/` (rtkit's D-Bus API, `--rtkit`, cargo feature
//! `rtkit`), `metrics/` (`--metrics`: OpenMetrics over HTTP, cargo feature
//! `metrics`), `live.rs` (the live figures of `status` for `rtmgr top`),
//! `starvation.rs` (the starvation guard beside the RT CPUs),
//! `loop_priority.rs` (the request loop at SCHED_FIFO 1 on the NRT CPUs).
//! Memory, I/O and cache: `crate::resources`.

pub mod config;
mod dl_leak;
mod domains;
pub mod grant;
mod grant_worker;
pub mod grants_journal;
pub mod live;
mod loop_priority;
mod loop_share;
pub mod manager;
#[cfg(feature = "metrics")]
pub mod metrics;
mod notify;
pub mod peer;
pub mod pending;
pub mod reconcile;
mod release;
pub mod rtkit;
pub mod server;
pub mod startup;
pub mod starvation;
mod stranded;
mod zero_lag;

pub use config::ServeConfig;
pub use manager::Manager;
pub use startup::reset_machine;

use crate::balance::{run_balancer, EventSink, LiveConfig};
use crate::host::{Host, HostError};
use crate::partition::{self, PartitionError};
use rtmgr_core::admission::AdmissionConfig;
use rtmgr_core::partition::validate;
use std::os::unix::fs::PermissionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("config: {0}")]
    Config(String),
    #[error("{0}")]
    NotOwner(String),
    #[error(
        "could not undo every grant (grants journal kept; run `rtmgr partition reset` again): {0}"
    )]
    Incomplete(String),
    #[error("rtkit front end: {0}")]
    Rtkit(String),
    #[error(transparent)]
    Partition(#[from] PartitionError),
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("socket {path}: {source}")]
    Socket {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

impl ServeError {
    /// Bad input, detected before anything changed (exit code 2).
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            ServeError::Config(_)
                | ServeError::NotOwner(_)
                | ServeError::Partition(PartitionError::Irqbalance(_))
        )
    }
}

/// What a run of the daemon did.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct ServeReport {
    pub adopted: usize,
    pub dropped_at_start: usize,
    pub requests: u64,
    pub granted: u64,
    pub refused: u64,
    pub errors: u64,
    pub revoked_at_stop: usize,
    pub problems: Vec<String>,
}

fn rt_share(host: &Host) -> f64 {
    let read = |p: &str| {
        host.read_opt(p)
            .and_then(|s| s.trim().parse::<i64>().ok())
            .unwrap_or(-1)
    };
    AdmissionConfig::dl_share_from(
        read("/proc/sys/kernel/sched_rt_runtime_us"),
        read("/proc/sys/kernel/sched_rt_period_us"),
    )
}

/// Run the daemon until `stop` is set (SIGTERM): apply or adopt the
/// partition, serve the socket, run the balancer beside it, reconcile drift;
/// then revoke every grant and reset the partition exactly. The caller holds
/// the machine lock.
pub fn serve(
    host: &Host,
    cfg: &ServeConfig,
    stop: Arc<AtomicBool>,
) -> Result<ServeReport, ServeError> {
    cfg.check_built().map_err(ServeError::Config)?;
    let online = crate::cpus::online(host)?;
    let plan =
        validate(&cfg.partition, None, &online).map_err(|e| ServeError::Config(e.to_string()))?;
    let resources = crate::resources::prepare(host, &cfg.resources).map_err(ServeError::Config)?;
    let mut report = ServeReport::default();
    let (applied, header, old) = match startup::decide(host, cfg, &plan)? {
        startup::Start::Fresh => {
            let (a, h) = startup::apply_fresh(host, cfg, &plan)?;
            (a, h, Vec::new())
        }
        startup::Start::Adopt(a, st) => (*a, startup::adopted_header(host, cfg), st.live),
    };
    let result = run(
        host,
        cfg,
        &applied,
        header,
        old,
        &stop,
        &mut report,
        &resources,
    );
    // Whatever happened: resources and the partition go back exactly.
    match crate::resources::restore_beside(host, &applied.journal) {
        Ok(p) => report.problems.extend(p),
        Err(e) => report.problems.push(format!("resources: {e}")),
    }
    let reset = partition::reset(host, &applied.journal);
    notify::status("stopped");
    result?;
    if let Err(e) = reset {
        report.problems.push(format!("partition reset: {e}"));
        return Err(e.into());
    }
    if report.problems.is_empty() {
        grants_journal::remove(host, &cfg.grants_journal())?;
        let _ = std::fs::remove_dir(host.path(&cfg.serve.state_dir));
    } else {
        return Err(ServeError::Incomplete(report.problems.join("; ")));
    }
    Ok(report)
}

#[allow(clippy::too_many_arguments)]
fn run(
    host: &Host,
    cfg: &ServeConfig,
    applied: &partition::Applied,
    header: Vec<grants_journal::Record>,
    old: Vec<grants_journal::Grant>,
    stop: &Arc<AtomicBool>,
    report: &mut ServeReport,
    resources: &crate::resources::Prepared,
) -> Result<(), ServeError> {
    // Owning the bus name may fail (rtkit-daemon owns it): before anything changes.
    #[cfg(feature = "rtkit")]
    let mut rtkit = match cfg.rtkit.enabled {
        true => Some(rtkit::start(&cfg.rtkit, stop.clone()).map_err(ServeError::Rtkit)?),
        false => None,
    };
    let mut m = start_manager(host, cfg, applied, header, old, report, resources)?;
    let sock = cfg.socket();
    let listener = bind(host, &sock)?;
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    let (exporter, to_metrics) = start_metrics(cfg, applied, &mut m)?;
    // The guard's and the starvation guard's events: kept for `status`, passed on to the metrics.
    let live = Arc::new(live::LiveFigures::new(&applied.plan.rt, to_metrics));
    m.live = Some(live.clone());
    let events = Some(EventSink(live));
    let balancer = start_balancer(host, cfg, applied, events.clone());
    m.balancer = if balancer.is_some() {
        "running".into()
    } else {
        "off".into()
    };
    let pj = &applied.journal;
    let guard = starvation::start(host, &cfg.starvation, &applied.plan.rt, pj, events)?;
    let line = guard
        .as_ref()
        .map_or("off ([starvation] enabled = false)".into(), |g| g.1.clone());
    m.resources
        .held
        .extend(guard.iter().filter_map(|g| g.0.held.clone()));
    m.resources.status.insert("starvation".into(), line);
    notify::ready(&format!(
        "RT CPUs {}, {} reservation(s) adopted; listening on {}",
        applied.plan.rt,
        report.adopted,
        sock.display()
    ));
    #[allow(unused_mut)] // no front but the socket without the feature `rtkit`
    let mut fronts: Vec<&mut dyn server::Front> = Vec::new();
    #[cfg(feature = "rtkit")]
    if let Some(f) = rtkit.as_mut() {
        fronts.push(f);
    }
    let raised = loop_priority::raise(host, cfg.serve.loop_priority, &applied.plan.nrt);
    tracing::info!("{raised}");
    m.bound_loop_share(cfg.serve.loop_priority);
    if cfg.serve.grant_worker {
        m.start_grant_worker(cfg.serve.loop_priority, &applied.plan.nrt);
    } else {
        tracing::info!(
            "grant worker off ([serve] grant_worker = false): kernel steps on the request loop"
        );
    }
    let served = server::run_with(
        &mut m,
        &listener,
        cfg.serve.max_connections,
        cfg.serve.reconcile_ms,
        stop,
        reconcile::reconcile,
        &mut fronts,
    );
    notify::stopping();
    m.stop_grant_worker();
    loop_priority::lower(host);
    #[cfg(feature = "rtkit")]
    if let Some(f) = rtkit {
        report.problems.extend(f.stop(&m));
    }
    #[cfg(feature = "metrics")]
    drop(exporter);
    drop(listener);
    let _ = std::fs::remove_file(host.path(&sock));
    report.revoked_at_stop = m.grants().count();
    report.problems.extend(m.revoke_all());
    if let Some((g, _)) = guard {
        report.problems.extend(g.stop());
    }
    if let Some((bstop, handle)) = balancer {
        bstop.store(true, Ordering::Relaxed);
        // An idle balancer sleeps up to a second, parked: wake it now.
        handle.thread().unpark();
        match handle.join() {
            Ok(Ok(r)) => report.problems.extend(r.restore_failures),
            Ok(Err(e)) => report.problems.push(format!("balancer: {e}")),
            Err(_) => report.problems.push("balancer thread panicked".into()),
        }
    }
    report.requests = m.stats.requests;
    report.granted = m.stats.granted;
    report.refused = m.stats.refused;
    report.errors = m.stats.errors;
    served.map_err(|source| ServeError::Socket {
        path: sock.display().to_string(),
        source,
    })
}

/// The Manager of a starting daemon: resources given out, one root domain
/// per RT CPU, the grants of a predecessor that still hold re-adopted (the
/// dead ones dropped), the journal rewritten with them.
fn start_manager(
    host: &Host,
    cfg: &ServeConfig,
    applied: &partition::Applied,
    header: Vec<grants_journal::Record>,
    old: Vec<grants_journal::Grant>,
    report: &mut ServeReport,
    resources: &crate::resources::Prepared,
) -> Result<Manager, ServeError> {
    let resources = crate::resources::start(host, resources, &applied.journal, &applied.plan.rt)?;
    let domains = domains::ensure(host, applied)?;
    // Each grant and release moves threads between these and reads their
    // CPUs: held open, a move is one write(2) (host/kept_files.rs).
    host.keep_open_under(
        std::iter::once(applied.rt_cgroup.clone()).chain(applied.nrt_cgroup.clone()),
    );
    let (keep, dropped) = startup::split_live(host, &applied.layout, old);
    report.dropped_at_start = dropped.len();
    let journal = grants_journal::GrantJournal::open(host, &cfg.grants_journal())?;
    let admission = AdmissionConfig {
        cap: cfg.admission.cap,
        dl_share: rt_share(host),
        placement: cfg.admission.placement,
    };
    let next_id = keep.iter().map(|g| g.id).max().unwrap_or(0) + 1;
    let mut m = Manager::new(
        host.clone(),
        applied.clone(),
        domains,
        cfg.policy.clone(),
        admission,
        journal,
        header,
        next_id,
    );
    m.resources = resources;
    m.existing_processes = cfg.existing_processes.clone();
    m.knob_sweep = rtmgr_core::partition::sweep::KnobSweep::new(
        cfg.serve.knob_verify_ms,
        cfg.serve.reconcile_ms,
    );
    report.adopted = keep.len();
    // Their drift (a cache group re-created by `resources::start` too) was
    // repaired by `split_live`.
    for g in keep {
        m.adopt(g);
    }
    m.rewrite_journal()?;
    Ok(m)
}

type BalancerThread = (
    Arc<AtomicBool>,
    std::thread::JoinHandle<Result<crate::balance::LiveReport, crate::balance::BalanceError>>,
);

/// `serve --metrics`: the metrics fed by the Manager (`m.metrics`), their
/// HTTP endpoint, and the sink for the balancer's and the starvation guard's
/// events; none of them when `[serve] metrics` is unset.
#[cfg(feature = "metrics")]
fn start_metrics(
    cfg: &ServeConfig,
    applied: &partition::Applied,
    m: &mut Manager,
) -> Result<(Option<metrics::Exporter>, Option<EventSink>), ServeError> {
    let Some((mx, exporter)) = metrics::start(cfg, &applied.plan.rt)? else {
        return Ok((None, None));
    };
    m.metrics = Some(mx.clone());
    Ok((Some(exporter), Some(EventSink(mx))))
}

/// Built without the feature `metrics`: nothing to count into
/// (`ServeConfig::check_built` refused `--metrics` before anything changed).
#[cfg(not(feature = "metrics"))]
fn start_metrics(
    _: &ServeConfig,
    _: &partition::Applied,
    _: &mut Manager,
) -> Result<((), Option<EventSink>), ServeError> {
    Ok(((), None))
}

/// The live balancer and its latency guard (ARTiS §2.3), as `rtmgr balance` runs them.
fn start_balancer(
    host: &Host,
    cfg: &ServeConfig,
    applied: &partition::Applied,
    events: Option<EventSink>,
) -> Option<BalancerThread> {
    if !cfg.serve.balancer {
        return None;
    }
    remove_stale_tracer_instances(host);
    let stop = Arc::new(AtomicBool::new(false));
    let (h, a, s) = (host.clone(), applied.clone(), stop.clone());
    let mut live = LiveConfig::new(applied);
    live.period_ns = cfg.serve.balance_period_ms * 1_000_000;
    live.guard = cfg.serve.guard;
    live.events = events;
    let handle = std::thread::Builder::new()
        .name("rtmgr-balance".into())
        .spawn(move || run_balancer(&h, &a, &live, &s, |_, _| {}))
        .ok()?;
    Some((stop, handle))
}

/// The balancer watches kernel entries through a tracefs instance of its
/// own (`balance::entry_watch`); a daemon killed with -9 leaves it behind.
/// The next daemon takes away every rtmgr instance whose process is gone,
/// as `rtmgr partition reset` does (real machine only: a fake tree has no
/// tracefs of its own).
fn remove_stale_tracer_instances(host: &Host) {
    if host.root() != std::path::Path::new("/") {
        return;
    }
    if let Some(said) = crate::trace::remove_stale_instances_said() {
        tracing::info!("{said}");
    }
}

/// Listen on the socket: any local user may connect (the policy decides).
fn bind(
    host: &Host,
    sock: &std::path::Path,
) -> Result<std::os::unix::net::UnixListener, ServeError> {
    let real = host.path(sock);
    let err = |source| ServeError::Socket {
        path: sock.display().to_string(),
        source,
    };
    if let Some(dir) = real.parent() {
        std::fs::create_dir_all(dir).map_err(err)?;
    }
    let _ = std::fs::remove_file(&real);
    let l = std::os::unix::net::UnixListener::bind(&real).map_err(err)?;
    std::fs::set_permissions(&real, std::fs::Permissions::from_mode(0o666)).map_err(err)?;
    Ok(l)
}
