//! Every knob against a fake machine: applied, verified clean, changed behind
//! its back, the drift found (that knob's only), repaired, verified clean,
//! and reset leaves the machine exactly as before the partition.

use super::*;
use crate::fake::{FakeBuilder, FakeCgroup, FakeMachine};
use crate::partition::{apply, reset, ApplyOptions};
use crate::{irq, snapshot, Host};
use rtmgr_core::partition::{validate, KnobId, PartitionConfig};
use rtmgr_core::CpuSet;
use std::path::Path;

const JOURNAL: &str = "/run/rtmgr/journal.jsonl";

fn opts() -> ApplyOptions {
    ApplyOptions {
        journal: JOURNAL.into(),
        replace: false,
    }
}

fn read(host: &Host, p: &str) -> String {
    host.read(p).unwrap().trim().to_string()
}

fn set(host: &Host, p: &str, v: &str) {
    std::fs::write(host.path(p), format!("{v}\n")).unwrap();
}

/// On a 4-CPU fake (RT CPU 3) of each layout: apply `toml`, verify clean,
/// `change` the machine, verify finds `knob`'s drift only, repair, then
/// `check` and verify clean again; reset restores the machine exactly.
fn drifts(
    knob: KnobId,
    toml: &str,
    build: impl Fn(FakeBuilder) -> FakeBuilder,
    change: impl Fn(&FakeMachine, &Host),
    check: impl Fn(&Host),
) {
    drifts_started(knob, toml, build, |_| {}, change, check)
}

/// `drifts`, with `start` run on the machine before apply.
fn drifts_started(
    knob: KnobId,
    toml: &str,
    build: impl Fn(FakeBuilder) -> FakeBuilder,
    start: impl Fn(&FakeMachine),
    change: impl Fn(&FakeMachine, &Host),
    check: impl Fn(&Host),
) {
    for cg in [FakeCgroup::V1, FakeCgroup::V2] {
        let m = build(FakeMachine::new(4).cgroup(cg).typical_tasks()).build();
        start(&m);
        let host = m.host();
        let before = snapshot::capture(&host);
        let cfg = PartitionConfig::from_toml(toml).unwrap();
        let plan = validate(&cfg, None, &crate::cpus::online(&host).unwrap()).unwrap();
        let (applied, _) = apply(&host, &plan, &opts()).unwrap();
        let clean = verify(&host, &applied, &[]).unwrap();
        assert!(clean.is_empty(), "{cg:?} {knob}: after apply {clean:?}");
        change(&m, &host);
        let found = verify(&host, &applied, &[]).unwrap();
        assert!(!found.is_empty(), "{cg:?} {knob}: drift not found");
        assert!(
            found.iter().all(|d| d.knob == knob.name()),
            "{cg:?} {knob}: {found:?}"
        );
        let repaired = repair(&host, &applied, &found).unwrap();
        assert_eq!(repaired, vec![(knob.name(), found.len())], "{cg:?}");
        check(&host);
        let again = verify(&host, &applied, &[]).unwrap();
        assert!(again.is_empty(), "{cg:?} {knob}: after repair {again:?}");
        reset(&host, Path::new(JOURNAL)).unwrap();
        let d = before.diff(&snapshot::capture(&host));
        assert!(d.is_empty(), "{cg:?} {knob}: not restored: {d:?}");
    }
}

/// A control file of a knob changed by hand: drift, repaired to what apply wrote.
fn file_drifts(
    knob: KnobId,
    build: impl Fn(FakeBuilder) -> FakeBuilder,
    path: &str,
    by_hand: &str,
) {
    file_drifts_with(knob, "rt_cpus = \"3\"", build, path, by_hand)
}

fn file_drifts_with(
    knob: KnobId,
    toml: &str,
    build: impl Fn(FakeBuilder) -> FakeBuilder,
    path: &str,
    by_hand: &str,
) {
    let applied = std::cell::RefCell::new(String::new());
    drifts(
        knob,
        toml,
        build,
        |_, host| {
            *applied.borrow_mut() = read(host, path);
            assert_ne!(*applied.borrow(), by_hand, "{knob}: choose another value");
            set(host, path, by_hand);
        },
        |host| assert_eq!(read(host, path), *applied.borrow(), "{knob}"),
    );
}

#[test]
fn cgroups_cpus_changed_by_hand_go_back_to_the_plan() {
    drifts(
        KnobId::Cgroups,
        "rt_cpus = \"3\"",
        |b| b,
        |m, host| {
            let rt = m.cpuset_mount().join("rtmgr-rt/cpuset.cpus");
            set(host, rt.to_str().unwrap(), "2-3");
            if m.cgroup == FakeCgroup::V1 {
                set(host, "/sys/fs/cgroup/cpuset/cpuset.sched_load_balance", "1");
            }
        },
        |host| {
            let rt = ["/sys/fs/cgroup/cpuset/rtmgr-rt", "/sys/fs/cgroup/rtmgr-rt"]
                .into_iter()
                .find(|d| host.exists(d))
                .unwrap();
            assert_eq!(read(host, &format!("{rt}/cpuset.cpus")), "3");
            if rt.contains("cpuset/") {
                assert_eq!(
                    read(host, "/sys/fs/cgroup/cpuset/cpuset.sched_load_balance"),
                    "0"
                );
            }
        },
    );
}

#[test]
fn a_task_widened_to_rt_cpus_is_narrowed_again() {
    drifts(
        KnobId::Tasks,
        "rt_cpus = \"3\"",
        |b| b,
        |_, host| {
            host.set_affinity(300, &CpuSet::parse_list("0-3").unwrap())
                .unwrap()
        },
        |host| assert_eq!(host.get_affinity(300).unwrap().to_list(), "0-2"),
    );
}

#[test]
fn an_irqbalance_restarted_without_the_ban_is_banned_again() {
    let heard = std::cell::RefCell::new(None);
    drifts_started(
        KnobId::Irqbalance,
        "rt_cpus = \"3\"\nirqbalance = \"ban\"",
        |b| b.task(500, "irqbalance"),
        |m| *heard.borrow_mut() = Some(crate::fake::irqbalance::serve(m, 500, None)),
        |_, host| {
            // Restarted with the same pid: another start time, no ban.
            let stat = host.path("/proc/500/stat");
            let text = std::fs::read_to_string(&stat).unwrap();
            std::fs::write(&stat, text.replace(" 1500 ", " 1600 ")).unwrap();
        },
        |_| {
            let h = heard.borrow();
            let h = crate::fake::irqbalance::Heard::wait_for(h.as_ref().unwrap(), 3);
            assert_eq!(h.commands[1..], ["settings cpus 3", "settings cpus 3"]);
        },
    );
}

#[test]
fn an_irq_steered_back_onto_an_rt_cpu_is_steered_off_again() {
    drifts(
        KnobId::Irqs,
        "rt_cpus = \"3\"",
        |b| b,
        |_, host| irq::set_affinity(host, 41, &CpuSet::parse_list("0-3").unwrap()).unwrap(),
        |host| assert_eq!(irq::affinity(host, 41).unwrap().to_list(), "0-2"),
    );
}

#[test]
fn irqs_the_kernel_refuses_to_move_are_not_drift() {
    let m = FakeMachine::new(4).managed_irq(36, 3, 100).build();
    let host = m.host();
    let cfg = PartitionConfig::from_toml("rt_cpus = \"3\"").unwrap();
    let plan = validate(&cfg, None, &crate::cpus::online(&host).unwrap()).unwrap();
    let (applied, _) = apply(&host, &plan, &opts()).unwrap();
    assert!(!irq::affinity(&host, 36).unwrap().is_disjoint(&plan.rt));
    assert!(verify(&host, &applied, &[]).unwrap().is_empty());
    // Nor are IRQs the daemon steered to an RT CPU for a grant.
    irq::set_affinity(&host, 41, &CpuSet::single(3)).unwrap();
    assert!(verify(&host, &applied, &[41]).unwrap().is_empty());
    assert_eq!(verify(&host, &applied, &[]).unwrap().len(), 1);
    reset(&host, Path::new(JOURNAL)).unwrap();
}

#[test]
fn default_irq_affinity_drift() {
    file_drifts(
        KnobId::Defaults,
        |b| b,
        "/proc/irq/default_smp_affinity",
        "f",
    );
}

#[test]
fn workqueue_mask_drift() {
    file_drifts(
        KnobId::Workqueues,
        |b| b,
        "/sys/devices/virtual/workqueue/writeback/cpumask",
        "f",
    );
}

#[test]
fn rps_mask_drift() {
    file_drifts(
        KnobId::Rps,
        |b| b,
        "/sys/class/net/eth0/queues/rx-1/rps_cpus",
        "f",
    );
}

#[test]
fn block_rq_affinity_drift() {
    file_drifts(
        KnobId::Block,
        |b| b.managed_irq(36, 3, 25_000),
        "/sys/block/vda/queue/rq_affinity",
        "1",
    );
}

#[test]
fn sysctl_drift() {
    for (knob, path, by_hand) in [
        (
            KnobId::TimerMigration,
            "/proc/sys/kernel/timer_migration",
            "1",
        ),
        (KnobId::StatInterval, "/proc/sys/vm/stat_interval", "1"),
        (KnobId::Watchdog, "/proc/sys/kernel/watchdog_cpumask", "0-3"),
    ] {
        file_drifts(knob, |b| b, path, by_hand);
    }
}

#[test]
fn cpuidle_and_cpufreq_drift() {
    file_drifts(
        KnobId::Cpuidle,
        |b| b.cpuidle(),
        "/sys/devices/system/cpu/cpu3/cpuidle/state2/disable",
        "0",
    );
    file_drifts(
        KnobId::Cpufreq,
        |b| b.cpufreq(),
        "/sys/devices/system/cpu/cpu3/cpufreq/scaling_governor",
        "powersave",
    );
}

#[test]
fn preempt_model_drift() {
    file_drifts_with(
        KnobId::Preempt,
        "rt_cpus = \"3\"\npreempt = \"full\"",
        |b| b.preempt_dynamic(true),
        "/sys/kernel/debug/sched/preempt",
        "none (voluntary) full lazy",
    );
}

#[test]
fn favordynmods_removed_by_hand_is_set_again() {
    let options = |host: &Host| -> Vec<String> {
        rtmgr_core::cgroupfs::cgroup2_mounts(&read(host, "/proc/self/mountinfo"))
            .into_iter()
            .map(|m| m.super_options)
            .collect()
    };
    drifts(
        KnobId::Favordynmods,
        "rt_cpus = \"3\"\nfavordynmods = true",
        |b| b,
        |_, host| {
            let info = read(host, "/proc/self/mountinfo");
            set(
                host,
                "/proc/self/mountinfo",
                &info.replace("rw,favordynmods", "rw"),
            );
        },
        |host| assert_eq!(options(host), vec!["rw,favordynmods".to_string()]),
    );
}
