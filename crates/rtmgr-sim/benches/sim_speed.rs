//! Simulator speed (issue goal: ≥ 20 M events/s on one core): the ARTiS §3.3
//! machine (4 CPUs, 3 RT0 + 13 Linux tasks) under each balancer.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use rtmgr_core::class::TaskClass;
use rtmgr_core::CpuSet;
use rtmgr_sim::{BalancerKind, Sim, SimConfig, TaskDef, ALL_BALANCERS};

fn machine(b: BalancerKind) -> (SimConfig, Vec<TaskDef>) {
    let cfg = SimConfig::new(4, CpuSet::parse_list("1-3").unwrap(), b);
    let all: CpuSet = (0..4).collect();
    let mut tasks: Vec<TaskDef> = (0..13)
        .map(|i| TaskDef {
            name: format!("l{i}"),
            class: TaskClass::Linux,
            mask: all.clone(),
            work_ns: 500_000_000,
            burst_ns: 0,
            sleep_ns: 0,
            np_every_ns: 0,
            np_len_ns: 0,
        })
        .collect();
    for c in 1..=3 {
        tasks.push(TaskDef {
            name: format!("rt{c}"),
            class: TaskClass::Rt0,
            mask: CpuSet::single(c),
            work_ns: u64::MAX / 4,
            burst_ns: 900_000,
            sleep_ns: 100_000,
            np_every_ns: 0,
            np_len_ns: 0,
        });
    }
    (cfg, tasks)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("sim");
    for b in ALL_BALANCERS {
        let (cfg, tasks) = machine(b);
        let events = {
            let mut s = Sim::new(cfg.clone(), tasks.clone()).unwrap();
            s.run();
            s.events()
        };
        g.throughput(Throughput::Elements(events));
        g.bench_function(b.name(), |bench| {
            bench.iter(|| {
                let mut s = Sim::new(cfg.clone(), tasks.clone()).unwrap();
                s.run();
                s.events()
            })
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(10);
    targets = bench
}
criterion_main!(benches);
