//! `rtmgr serve`: run the resource manager (DROPS §4.1) until SIGTERM —
//! apply the configured partition (or adopt the one a crashed predecessor
//! left), serve reservations on the Unix socket, run the balancer, repair
//! drift; on SIGTERM revoke every grant and reset the partition exactly.

use super::{bad_input, host, machine_lock, require_root, Outcome};
use rtmgr_linux::daemon::{self, config::DEFAULT_CONFIG, ServeConfig};
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// The daemon's TOML: partition keys plus [serve], [admission], [policy], [[client]].
    #[arg(long, value_name = "FILE", default_value = DEFAULT_CONFIG)]
    pub config: PathBuf,
    /// Keep the journals and the socket here instead of [serve] state_dir.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Do not run the live balancer and its latency guard.
    #[arg(long)]
    pub no_balancer: bool,
    /// Also answer rtkit's D-Bus API (own org.freedesktop.RealtimeKit1): see
    /// docs/rtkit.md. Needs a build with the cargo feature `rtkit`.
    #[arg(long)]
    pub rtkit: bool,
    /// The bus for --rtkit (a D-Bus address) instead of [rtkit] bus or the system bus.
    #[arg(long, value_name = "ADDRESS")]
    pub rtkit_bus: Option<String>,
    /// Serve OpenMetrics/Prometheus text on http://ADDR/metrics (e.g.
    /// 127.0.0.1:9464; overrides [serve] metrics): per RT CPU the latency
    /// guard's histogram, grants, refusals, evictions, starvation boosts, drift
    /// repairs. Needs a build with the cargo feature `metrics`.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Print the final report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub fn run(a: ServeArgs) -> anyhow::Result<Outcome> {
    let host = host()?;
    let text = match std::fs::read_to_string(&a.config) {
        Ok(t) => t,
        Err(e) => return bad_input(format!("config {}: {e}", a.config.display())),
    };
    let mut cfg = match ServeConfig::from_toml(&text) {
        Ok(c) => c,
        Err(e) => return bad_input(format!("{}: {e}", a.config.display())),
    };
    if let Some(d) = a.state_dir {
        cfg.serve.state_dir = d;
    }
    if a.no_balancer {
        cfg.serve.balancer = false;
    }
    cfg.rtkit.enabled |= a.rtkit || a.rtkit_bus.is_some();
    if let Some(bus) = a.rtkit_bus {
        cfg.rtkit.bus = Some(bus);
    }
    if a.metrics.is_some() {
        cfg.serve.metrics = a.metrics;
    }
    if let Err(e) = cfg.check_built() {
        return bad_input(e);
    }
    require_root(&host, "rtmgr serve")?;
    let _lock = machine_lock(&host)?;
    let stop = super::balance::stop_on_signals()?;
    eprintln!(
        "rtmgr serve: socket {}, state in {}; SIGTERM revokes every grant and resets the partition",
        cfg.socket().display(),
        cfg.serve.state_dir.display()
    );
    let report = match daemon::serve(&host, &cfg, stop) {
        Ok(r) => r,
        Err(e) if e.is_input() => return bad_input(e.to_string()),
        Err(e) => return Err(e.into()),
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        eprintln!(
            "rtmgr serve: stopped; {} request(s): {} granted, {} refused, {} errors; {} grant(s) revoked at stop, {} adopted at start, {} dropped at start; partition reset",
            report.requests,
            report.granted,
            report.refused,
            report.errors,
            report.revoked_at_stop,
            report.adopted,
            report.dropped_at_start
        );
    }
    Ok(Outcome::Ok)
}
