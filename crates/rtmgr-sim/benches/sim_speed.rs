//! Simulator speed (issue 10 goal: ≥ 25 M events/s on one core) on the two
//! ARTiS §3.3 machines of `scenarios/`: 4 CPUs (3 RT0 + 13 Linux tasks) and
//! 64 CPUs (48 RT0 + 208 Linux tasks), under each balancer, with the
//! defaults of `rtmgr lb --sim` (seed 1, T = 50 ms).
//!
//! An event is one entry taken off the simulator's queue and processed: a
//! running segment's end, a wake-up, a scheduler tick, a device interrupt, a
//! balancing pass or a policy sample (`Sim::events`, the events hashed into
//! the report's trace_hash). Throughput is events per second of `Sim::run`
//! alone, as `rtmgr lb --sim` prints it; building the machine is not timed.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use rtmgr_core::balance::scenario;
use rtmgr_sim::{scenario_config, tasks_from_scenario, Sim, SimConfig, TaskDef, ALL_BALANCERS};

const SCENARIOS: [&str; 2] = ["artis-3.3", "artis-3.3-64cpu"];

/// The machine and tasks `rtmgr lb SCENARIO --sim` would simulate.
fn machine(name: &str, b: rtmgr_sim::BalancerKind) -> (SimConfig, Vec<TaskDef>) {
    let path = format!("{}/../../scenarios/{name}.lbu", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let sc = scenario::parse(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
    let cfg = scenario_config(&sc, b);
    let tasks = tasks_from_scenario(&sc, cfg.cpus);
    (cfg, tasks)
}

fn bench(c: &mut Criterion) {
    for name in SCENARIOS {
        let mut g = c.benchmark_group(name);
        for b in ALL_BALANCERS {
            let (cfg, tasks) = machine(name, b);
            let events = {
                let mut s = Sim::new(cfg.clone(), tasks.clone()).unwrap();
                s.run();
                s.events()
            };
            g.throughput(Throughput::Elements(events));
            g.bench_function(b.name(), |bench| {
                bench.iter_batched(
                    || Sim::new(cfg.clone(), tasks.clone()).unwrap(),
                    |mut s| {
                        s.run();
                        s.events()
                    },
                    BatchSize::PerIteration,
                )
            });
        }
        g.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
