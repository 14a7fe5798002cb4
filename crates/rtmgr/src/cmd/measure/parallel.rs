//! `rtmgr measure latency --parallel-sweep N` (McKenney §3 Fig. 8): flags
//! glue and output of `rtmgr_lab::parallel::run` — the table
//! (average, p99.999, max per number of tasks), the JSON report
//! (`rtmgr.parallel/1`) and the Fig. 8-style plot.

use super::{latency_config, outcome, LatencyArgs};
use crate::cmd::output::write_report;
use crate::cmd::progress::Bar;
use crate::cmd::Outcome;
use anyhow::Result;
use rtmgr_lab::experiment::Session;
use rtmgr_lab::parallel::parallel_svg;
use rtmgr_lab::parallel::parallel_table;
use rtmgr_lab::parallel::run as parallel;
use rtmgr_linux::machine_access::host_from_env;

pub fn sweep(a: LatencyArgs, max_tasks: u32) -> Result<Outcome> {
    let cfg = latency_config(&a)?;
    parallel::check(&cfg, max_tasks)?;
    let s = Session::open(host_from_env()?, "rtmgr measure latency --parallel-sweep")?;
    let planned = cfg.interval * (cfg.loops.unwrap_or(1) as u32).saturating_mul(max_tasks);
    let run = parallel::run(&s, &cfg, max_tasks, &mut Bar::new(planned))?;
    println!(
        "latency against parallel real-time tasks on CPUs {} ({} samples per task, every {} µs):\n",
        run.cpus,
        run.loops,
        run.interval_ns / 1000
    );
    print!("{}", parallel_table(&run.levels));
    let title = format!(
        "latency against parallel tasks on CPUs {} (McKenney Fig. 8)",
        run.cpus
    );
    let svgs = [("", parallel_svg(&title, &run.levels))];
    write_report(&a.out, "parallel", &run, &svgs)?;
    let partial = run.header.partial_reason.clone();
    if let Some(p) = &partial {
        eprintln!("rtmgr: {p}; partial report written");
    }
    Ok(outcome(&partial))
}
