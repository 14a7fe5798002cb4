//! Every scenario of `scenarios/` under every balancer, as `rtmgr lb
//! SCENARIO --sim --balancer B --json` simulates it (seed 1, T = 50 ms): the
//! JSON report of each run goes to `OUT/SCENARIO.BALANCER.json`, and its
//! events, wall time and M events/s of `Sim::run` to stdout. Two report
//! folders made before and after a change must be byte-identical
//! (`bench/sim-identical.sh`).
//!
//! `sim_reports OUT [SCENARIO [BALANCER]]`: only that scenario or run (for
//! profiling one run under callgrind).

use rtmgr_core::balance::scenario;
use rtmgr_sim::{scenario_config, tasks_from_scenario, Sim, ALL_BALANCERS};
use std::time::Instant;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(out) = args.first() else {
        eprintln!("usage: sim_reports OUT [SCENARIO [BALANCER]]");
        std::process::exit(2);
    };
    std::fs::create_dir_all(out).unwrap_or_else(|e| panic!("{out}: {e}"));
    let dir = format!("{}/../../scenarios", env!("CARGO_MANIFEST_DIR"));
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{dir}: {e}"))
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            Some(name.strip_suffix(".lbu")?.to_string())
        })
        .filter(|n| args.get(1).is_none_or(|only| only == n))
        .collect();
    names.sort();
    for name in names {
        let path = format!("{dir}/{name}.lbu");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let sc = scenario::parse(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        for b in ALL_BALANCERS {
            if args.get(2).is_some_and(|only| only != b.name()) {
                continue;
            }
            let cfg = scenario_config(&sc, b);
            let tasks = tasks_from_scenario(&sc, cfg.cpus);
            let mut sim = match Sim::new(cfg, tasks) {
                Ok(s) => s,
                Err(e) => {
                    println!("{name} {}: not simulated: {e}", b.name());
                    continue;
                }
            };
            let t0 = Instant::now();
            sim.run();
            let wall = t0.elapsed().as_secs_f64();
            let report = sim.report();
            let json = serde_json::to_string_pretty(&report).expect("report serialises");
            let file = format!("{out}/{name}.{}.json", b.name());
            std::fs::write(&file, json + "\n").unwrap_or_else(|e| panic!("{file}: {e}"));
            println!(
                "{name} {}: {} events in {:.3} s = {:.1} M events/s",
                b.name(),
                report.events,
                wall,
                report.events as f64 / wall.max(1e-9) / 1e6
            );
        }
    }
}
