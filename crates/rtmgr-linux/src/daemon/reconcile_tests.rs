//! The daemon's reconcile on a fake machine: a partition knob's file changed
//! behind the daemon's back is put back through the knob, journalled, and
//! counted in `status`'s drift counters; reset then restores the machine;
//! with the knobs spread over several reconciles, each is still verified once
//! in a sweep.

use super::*;
use crate::daemon::{domains, grants_journal as journal, startup, ServeConfig};
use crate::fake::FakeMachine;
use crate::{irq, snapshot, Host};
use rtmgr_core::admission::AdmissionConfig;
use rtmgr_core::partition::sweep::KnobSweep;
use rtmgr_core::partition::validate;

const WORKQUEUE_MASK: &str = "/sys/devices/virtual/workqueue/cpumask";

/// A daemon as `serve` builds it, on a fresh partition of `m` (RT CPU 3).
fn manager(m: &FakeMachine) -> Manager {
    let host = m.host();
    let cfg = ServeConfig::from_toml("rt_cpus = \"3\"").unwrap();
    let plan = validate(&cfg.partition, None, &cpus::online(&host).unwrap()).unwrap();
    let (applied, header) = startup::apply_fresh(&host, &cfg, &plan).unwrap();
    let domains = domains::ensure(&host, &applied).unwrap();
    let journal = journal::GrantJournal::open(&host, &cfg.grants_journal()).unwrap();
    let admission = AdmissionConfig {
        cap: cfg.admission.cap,
        dl_share: 0.95,
        placement: cfg.admission.placement,
    };
    let policy = cfg.policy.clone();
    Manager::new(
        host, applied, domains, policy, admission, journal, header, 1,
    )
}

fn read(host: &Host, p: &str) -> String {
    host.read(p).unwrap().trim().to_string()
}

#[test]
fn a_partition_knob_changed_behind_the_daemon_s_back_is_put_back_and_counted() {
    let m = FakeMachine::new(4).typical_tasks().build();
    let host = m.host();
    let before = snapshot::capture(&host);
    let mut d = manager(&m);
    let partitioned = (
        read(&host, WORKQUEUE_MASK),
        irq::affinity(&host, 41).unwrap(),
    );
    assert_eq!(partitioned.0, "7");
    reconcile(&mut d);
    assert!(d.stats.drift.is_empty(), "{:?}", d.stats.drift);
    // Behind the daemon's back: the workqueues and IRQ 41 onto the RT CPU again.
    host.write(WORKQUEUE_MASK, "f").unwrap();
    irq::set_affinity(&host, 41, &CpuSet::parse_list("0-3").unwrap()).unwrap();
    reconcile(&mut d);
    assert_eq!(read(&host, WORKQUEUE_MASK), partitioned.0);
    assert_eq!(irq::affinity(&host, 41).unwrap(), partitioned.1);
    let counted: Vec<(&str, u64)> = d
        .stats
        .drift
        .iter()
        .map(|(k, n)| (k.as_str(), *n))
        .collect();
    assert_eq!(
        counted,
        [("irq_masks_restored", 1), ("workqueues_restored", 1)]
    );
    // Nothing drifted since: nothing more counted.
    reconcile(&mut d);
    assert_eq!(d.stats.drift.values().sum::<u64>(), 2);
    // The repairs were journalled as the partition's: reset restores the machine.
    let pj = d.applied.journal.clone();
    drop(d);
    crate::partition::reset(&host, &pj).unwrap();
    let grants = crate::daemon::config::grants_journal_beside(&pj);
    journal::remove(&host, &grants).unwrap();
    let diff = before.diff(&snapshot::capture(&host));
    assert!(diff.is_empty(), "not restored: {diff:?}");
}

/// With the knobs spread over several reconciles, a drifted knob is put
/// back within that many, and one reconcile does not verify every knob.
#[test]
fn a_drifted_knob_is_put_back_within_one_sweep() {
    let m = FakeMachine::new(4).typical_tasks().build();
    let host = m.host();
    let mut d = manager(&m);
    let slices = 4;
    d.knob_sweep = KnobSweep::new(slices * 1000, 1000);
    let partitioned = read(&host, WORKQUEUE_MASK);
    // From any point of the sweep, put back within `slices` reconciles.
    for start in 0..slices {
        host.write(WORKQUEUE_MASK, "f").unwrap();
        let took = (1..=slices).find(|_| {
            reconcile(&mut d);
            read(&host, WORKQUEUE_MASK) == partitioned
        });
        assert!(took.is_some(), "start {start}: not put back in {slices}");
        // Move the sweep on before the next drift.
        (0..=start).for_each(|_| reconcile(&mut d));
    }
    assert_eq!(d.stats.drift.get("workqueues_restored"), Some(&slices));
    // Verified once in `slices` reconciles: with the mask made wrong before
    // each, all but one leave it wrong.
    let left_wrong = (0..slices)
        .filter(|_| {
            host.write(WORKQUEUE_MASK, "f").unwrap();
            reconcile(&mut d);
            read(&host, WORKQUEUE_MASK) != partitioned
        })
        .count();
    assert_eq!(left_wrong as u64, slices - 1);
}
