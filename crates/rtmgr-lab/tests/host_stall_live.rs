//! Per-sample host evidence on this machine (issue 21, root only): a user-mode
//! spinner at SCHED_IDLE on the RT CPU under the latency probe, once with the
//! other CPUs busy and once with them idle. The probe preempts the spinner at
//! once, so its late wake-ups are the host's: with the others busy, some must
//! be labelled host; with them idle, few. Only that loose relation is
//! asserted (never a latency figure); the figures are printed.

use rtmgr_core::host_stall::HostLabel;
use rtmgr_core::CpuSet;
use rtmgr_lab::measure::host_split::HostSplit;
use rtmgr_lab::measure::probe::{max_fifo_priority, ThreadOutcome};
use rtmgr_lab::measure::segment::{run_segment, Orchestrator, Segment, SegmentPlan};
use rtmgr_lab::measure::steal::PERIOD;
use rtmgr_lab::report::{PolicySpec, ProbeMode, ProbeSpec};
use rtmgr_linux::lock::{MachineLock, DEFAULT_LOCK_PATH};
use rtmgr_linux::{cpus, sched, Host};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MEASURE: Duration = Duration::from_secs(4);

/// Threads spinning in user mode on `cpu` at `policy` until `stop`.
fn spin(cpu: u32, policy: sched::Policy, stop: &Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let stop = stop.clone();
    std::thread::spawn(move || {
        sched::set_affinity(0, &CpuSet::single(cpu)).unwrap();
        sched::set_policy(0, policy).unwrap();
        let mut x = 0u64;
        while !stop.load(Ordering::Relaxed) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    })
}

struct Figures {
    late_samples: u64,
    host_samples: u64,
    host_ms: f64,
    by_steal: usize,
    by_silence: usize,
    steal_ms: f64,
    sampler_share: f64,
}

fn figures(seg: &Segment) -> Figures {
    if let Some(t) = &seg.tail {
        let causes =
            rtmgr_lab::trace::summarise(&t.attributions, 1_000_000, "1 ms", 0, t.stats.lost, 0);
        for c in causes.causes.iter().take(4) {
            eprintln!(
                "  {:.1} ms in {} samples: {}",
                c.total_ns as f64 / 1e6,
                c.samples,
                c.label
            );
        }
    }
    let late_samples = seg
        .threads
        .iter()
        .flat_map(|t: &ThreadOutcome| &t.late)
        .map(|w| w.samples())
        .sum();
    let split = HostSplit::of(&seg.threads);
    let by_steal = seg
        .threads
        .iter()
        .flat_map(|t| &t.labels)
        .filter(|l| **l == HostLabel::Steal)
        .count();
    let by_silence = seg
        .threads
        .iter()
        .flat_map(|t| &t.labels)
        .filter(|l| **l == HostLabel::Silence)
        .count();
    let steal_ms = seg
        .disturbance
        .steal
        .iter()
        .map(|s| s.steal_ns)
        .sum::<u64>() as f64
        / 1e6;
    let cost = seg.steal.read_cost_ns().unwrap_or(0) as f64;
    Figures {
        late_samples,
        host_samples: split.host_samples,
        host_ms: split.host_ns as f64 / 1e6,
        by_steal,
        by_silence,
        steal_ms,
        sampler_share: cost / PERIOD.as_nanos() as f64,
    }
}

fn measure(host: &Host, rt: u32, others: &CpuSet, busy: bool, traced: bool) -> Figures {
    let stop = Arc::new(AtomicBool::new(false));
    let mut spinners = vec![spin(rt, sched::Policy::Idle, &stop)];
    if busy {
        spinners.extend(
            others
                .iter()
                .map(|c| spin(c, sched::Policy::Other { nice: 0 }, &stop)),
        );
    }
    let probe = ProbeSpec {
        mode: ProbeMode::Absolute,
        cpus: CpuSet::single(rt),
        interval_ns: 250_000,
        duration_ns: Some(MEASURE.as_nanos() as u64),
        loops: None,
        policy: PolicySpec::Fifo {
            priority: max_fifo_priority(),
        },
        parallel: 1,
    };
    let plan = SegmentPlan {
        probe: &probe,
        load: None,
        applied: None,
        prepare: None,
        trace: traced.then_some(Some(1_000_000)),
        guard_feed: None,
    };
    let never = Arc::new(AtomicBool::new(false));
    let seg = run_segment(host, plan, &never, &mut |_, _| {});
    stop.store(true, Ordering::Relaxed);
    for s in spinners {
        s.join().unwrap();
    }
    figures(&seg.expect("segment runs"))
}

#[test]
fn a_user_mode_spinner_is_host_late_only_when_the_host_is_busy() {
    if !sched::is_root() {
        eprintln!("skip: SCHED_FIFO and SCHED_IDLE need root");
        return;
    }
    let host = Host::real();
    let online = cpus::online(&host).unwrap();
    if online.len() < 2 {
        eprintln!("skip: needs a second CPU to keep busy");
        return;
    }
    let _lock = MachineLock::acquire(Path::new(DEFAULT_LOCK_PATH)).unwrap();
    let rt = online.iter().last().unwrap();
    let others = online.difference(&CpuSet::single(rt));
    let _orchestrator = Orchestrator::enter(&CpuSet::single(rt), &online);
    let traced = rtmgr_lab::trace::list_instances().is_ok();
    let busy = measure(&host, rt, &others, true, traced);
    let idle = measure(&host, rt, &others, false, traced);
    for (name, f) in [("busy", &busy), ("idle", &idle)] {
        eprintln!(
            "{name}{}: {} late samples (≥ 1 ms wake-ups and the releases they missed), \
             {} labelled host ({:.0}%; wake-ups: {} by steal, {} by silence), host took \
             {:.1} ms, steal {:.0} ms; steal sampler ≈ {:.2}% of a CPU",
            if traced { " (traced)" } else { "" },
            f.late_samples,
            f.host_samples,
            100.0 * f.host_samples as f64 / f.late_samples.max(1) as f64,
            f.by_steal,
            f.by_silence,
            f.host_ms,
            f.steal_ms,
            100.0 * f.sampler_share,
        );
    }
    if busy.late_samples == 0 || busy.steal_ms == 0.0 {
        eprintln!(
            "skip: with the other CPUs busy the host took no measurable time \
             ({} late samples, steal {} ms): nothing to label",
            busy.late_samples, busy.steal_ms
        );
        return;
    }
    assert!(
        busy.host_samples > 0,
        "late samples with the other CPUs busy, none labelled host"
    );
    assert!(
        idle.host_samples <= busy.host_samples / 5 + 10,
        "idle: {} host samples, busy: {}",
        idle.host_samples,
        busy.host_samples
    );
}
