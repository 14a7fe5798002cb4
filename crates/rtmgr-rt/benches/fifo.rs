//! Criterion benchmark of the in-process RT-FIFO (ring and the seed's Valois
//! list) against rtrb and crossbeam's ArrayQueue: two threads pinned to
//! different CPUs, u64 values, capacity 1024. `cargo bench -p rtmgr-rt --bench fifo`

mod fifo_queues;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fifo_queues::*;

fn bench<Q: Queue>(g: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>) {
    let at = Placement {
        producer_cpu: 0,
        consumer_cpu: 1,
        rt: false,
    };
    g.bench_function(Q::NAME, |b| {
        b.iter_custom(|iters| throughput::<Q>(iters, at))
    });
}

fn spsc_throughput(c: &mut Criterion) {
    let mut g = c.benchmark_group("spsc_throughput_pinned");
    g.throughput(Throughput::Elements(1));
    g.sample_size(20);
    bench::<Ring>(&mut g);
    bench::<List>(&mut g);
    bench::<Rtrb>(&mut g);
    bench::<Crossbeam>(&mut g);
    g.finish();
}

criterion_group!(benches, spsc_throughput);
criterion_main!(benches);
